//go:build e2e_local

package smoke

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	"github.com/moby/moby/client"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/cluster-api/test/infrastructure/container"
	"sigs.k8s.io/cluster-api/test/infrastructure/kind"

	"github.com/capdmp/capdmp/internal/kubeversions"
	"github.com/capdmp/capdmp/test/devtools/hostsysctl"
)

const (
	// defaultLoadBalancerImage is the image CAPD v1.14.2's DockerCluster runs for its load
	// balancer (test/infrastructure/docker/internal/loadbalancer/const.go).
	defaultLoadBalancerImage = "kindest/haproxy:v20230606-42a2262b"
	podSubnet                = "10.244.0.0/16"
	bootstrapToken           = "capdmp.0123456789abcdef"
	// What CAPD's cloud-init adapter adds to every kubeadm init and join.
	ignorePreflightErrors = "SystemVerification,Swap,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"
)

// multiUserTarget is CAPD's probe for a node ready to bootstrap (docker/internal/docker/machine.go).
var multiUserTarget = regexp.MustCompile("Reached target .*Multi-User System.*")

func TestRealNodes(t *testing.T) {
	g := NewWithT(t)
	versions := strings.Fields(envOr("NODE_IMAGE_VERSIONS", strings.Join(kubeversions.Nodes(), " ")))
	lbImage := envOr("NODE_IMAGES_LB_IMAGE", defaultLoadBalancerImage)

	rt, err := container.NewDockerClient()
	g.Expect(err).NotTo(HaveOccurred())
	ctx := container.RuntimeInto(context.Background(), rt)
	docker, err := client.New(client.FromEnv)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = docker.Close() })
	if _, err := rt.GetSystemInfo(ctx); err != nil {
		t.Fatalf("no Docker engine answers (run `eval \"$(hack/docker-engine.sh start)\"`): %v", err)
	}

	host := hostsysctl.Host{StateFile: hostsysctl.DefaultStateFile(), Logf: t.Logf}
	sysctls, err := host.Record(hostsysctl.KubeletChanged, nil)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := sysctls.Restore(); err != nil {
			t.Error(err)
		}
	})

	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			c := &cluster{t: t, ctx: ctx, rt: rt, docker: docker, version: v, lbImage: lbImage}
			c.smoke()
		})
	}
}

type cluster struct {
	t       *testing.T
	ctx     context.Context //nolint:containedctx // a fixture for one subtest; its steps share the subtest's context
	rt      container.Runtime
	docker  *client.Client
	version string
	lbImage string

	name, network, lb, controlPlane, worker string
}

func (c *cluster) smoke() {
	t := c.t
	g := NewWithT(t)
	image := "kindest/node:" + c.version
	for _, img := range []string{image, c.lbImage} {
		ok, err := c.rt.ImageExistsLocally(c.ctx, img)
		g.Expect(err).NotTo(HaveOccurred())
		if !ok {
			t.Fatalf("image %s is not in Docker: run `make node-images`", img)
		}
	}
	semVer, err := semver.ParseTolerant(c.version)
	g.Expect(err).NotTo(HaveOccurred())
	mapping := kind.GetMapping(semVer, image)
	t.Logf("kind mapping for %s: image %s, mode %q", c.version, mapping.Image, mapping.Mode)

	c.name = "capdmp-realnode-" + strings.ReplaceAll(strings.TrimPrefix(c.version, "v"), ".", "-") + "-" + randomSuffix()
	c.network, c.lb, c.controlPlane, c.worker = c.name, c.name+"-lb", c.name+"-control-plane", c.name+"-worker"
	c.createNetwork()
	t.Cleanup(c.teardown)

	start := time.Now()
	step := func(what string) {
		t.Logf("%6.1fs %s", time.Since(start).Seconds(), what)
	}

	// The load balancer, as CAPD's DockerCluster creates it.
	c.run(&container.RunContainerInput{
		Name: c.lb, Image: c.lbImage, Network: c.network,
		Entrypoint: []string{"haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"},
		Labels:     map[string]string{"io.x-k8s.kind.cluster": c.name, "io.x-k8s.kind.role": "external-load-balancer"},
		Volumes:    map[string]string{"/var": ""}, Tmpfs: map[string]string{"/tmp": "", "/run": ""},
		PortMappings: []container.PortMapping{
			{ContainerPort: 6443, ListenAddress: "127.0.0.1", Protocol: "tcp"},
			{ContainerPort: 8404, ListenAddress: "127.0.0.1", Protocol: "tcp"},
		},
		KindMode: kind.ModeNone,
	})
	lbIP := c.ip(c.lb)
	step("load balancer running at " + lbIP)

	// Nodes, with the run options of CAPD's docker backend (docker/internal/docker/manager.go).
	c.run(c.nodeInput(c.controlPlane, image, "control-plane", mapping.Mode))
	c.waitForNode(c.controlPlane)
	step("control-plane node booted (multi-user target reached, crictl ps answers)")
	c.configureLoadBalancer(c.ip(c.controlPlane))
	step("load balancer configured and reloaded (SIGHUP)")

	skipPhases := ""
	if !c.hasImage(c.controlPlane, "coredns") {
		skipPhases = "\nskipPhases:\n- addon/coredns"
		t.Logf("no CoreDNS image in %s: skipping the addon/coredns phase", image)
	}
	c.writeFile(c.controlPlane, "/run/kubeadm/kubeadm.yaml", fmt.Sprintf(initConfig, bootstrapToken, skipPhases, nodeRegistration, c.version, lbIP, podSubnet))
	c.exec(c.controlPlane, "", "/bin/sh", "-c",
		"mkdir -p /run/cluster-api && echo started > /run/cluster-api/capd.bootstrap.started && "+
			"kubeadm init --ignore-preflight-errors="+ignorePreflightErrors+" --config /run/kubeadm/kubeadm.yaml")
	step("kubeadm init done")

	c.run(c.nodeInput(c.worker, image, "worker", mapping.Mode))
	c.waitForNode(c.worker)
	step("worker node booted")
	c.writeFile(c.worker, "/run/kubeadm/kubeadm-join-config.yaml", fmt.Sprintf(joinConfig, lbIP, bootstrapToken, nodeRegistration))
	c.exec(c.worker, "", "/bin/sh", "-c",
		"mkdir -p /run/cluster-api && echo started > /run/cluster-api/capd.bootstrap.started && "+
			"kubeadm join --ignore-preflight-errors="+ignorePreflightErrors+" --config /run/kubeadm/kubeadm-join-config.yaml")
	step("kubeadm join done")

	g.Eventually(func() (string, error) {
		return c.kubectl("get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{" "}{end}`)
	}, 3*time.Minute, 2*time.Second).Should(And(
		ContainSubstring(c.controlPlane+"=True"), ContainSubstring(c.worker+"=True")), "both nodes Ready")
	step("both nodes Ready")

	pause := c.imageRef(c.controlPlane, "pause")
	_, err = c.kubectlIn(fmt.Sprintf(smokePod, c.worker, pause), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() (string, error) {
		return c.kubectl("get", "pod", "smoke", "-o", "jsonpath={.status.phase} {.spec.nodeName} {.status.podIP}")
	}, 2*time.Minute, 2*time.Second).Should(MatchRegexp(`^Running `+regexp.QuoteMeta(c.worker)+` \d`), "pod running on the worker")
	step("pod running on the worker")

	// The pod network: the pod's address is in the worker's podCIDR, and the control-plane node
	// routes that podCIDR through the worker.
	workerCIDR, err := c.kubectl("get", "node", c.worker, "-o", "jsonpath={.spec.podCIDR}")
	g.Expect(err).NotTo(HaveOccurred())
	_, cidr, err := net.ParseCIDR(strings.TrimSpace(workerCIDR))
	g.Expect(err).NotTo(HaveOccurred(), "worker podCIDR %q", workerCIDR)
	podIP, err := c.kubectl("get", "pod", "smoke", "-o", "jsonpath={.status.podIP}")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cidr.Contains(net.ParseIP(strings.TrimSpace(podIP)))).To(BeTrue(), "pod IP %s in the worker's podCIDR %s", podIP, cidr)
	g.Eventually(func() (string, error) {
		return c.execOut(c.controlPlane, "", "ip", "route", "show", cidr.String())
	}, time.Minute, 2*time.Second).Should(ContainSubstring("via "+c.ip(c.worker)), "control plane routes the worker's pods")
	step("pod network: pod IP in the worker's podCIDR " + cidr.String() + ", routed from the control plane")

	if skipPhases == "" {
		g.Eventually(func() (string, error) {
			return c.kubectl("-n", "kube-system", "get", "deployment", "coredns", "-o", "jsonpath={.status.readyReplicas}")
		}, 3*time.Minute, 2*time.Second).Should(Equal("2"), "CoreDNS ready (reaches the API server through the service network)")
		step("CoreDNS ready")
	}
	out, _ := c.kubectl("get", "nodes,pods", "-A", "-o", "wide")
	t.Logf("cluster %s:\n%s", c.name, out)
}

func (c *cluster) nodeInput(name, image, role string, mode kind.Mode) *container.RunContainerInput {
	in := &container.RunContainerInput{
		Name: name, Image: image, Network: c.network,
		Labels:   map[string]string{"io.x-k8s.kind.cluster": c.name, "io.x-k8s.kind.role": role},
		Volumes:  map[string]string{"/var": ""},
		Tmpfs:    map[string]string{"/tmp": "", "/run": ""},
		KindMode: mode,
	}
	if role == "control-plane" {
		in.EnvironmentVars = map[string]string{"KUBECONFIG": "/etc/kubernetes/admin.conf"}
		in.PortMappings = []container.PortMapping{{ContainerPort: 6443, ListenAddress: "127.0.0.1", Protocol: "tcp"}}
	}
	return in
}

func (c *cluster) createNetwork() {
	_, err := c.docker.NetworkCreate(c.ctx, c.network, client.NetworkCreateOptions{
		Driver:  "bridge",
		Options: map[string]string{"com.docker.network.bridge.enable_ip_masquerade": "false"},
		Labels:  map[string]string{"io.x-k8s.kind.cluster": c.name},
	})
	if err != nil {
		c.t.Fatalf("creating network %s: %v", c.network, err)
	}
}

func (c *cluster) run(in *container.RunContainerInput) {
	if err := c.rt.RunContainer(c.ctx, in, nil); err != nil {
		c.t.Fatalf("running container %s: %v", in.Name, err)
	}
}

func (c *cluster) ip(name string) string {
	ip, _, err := c.rt.GetContainerIPs(c.ctx, name)
	if err != nil || ip == "" {
		c.t.Fatalf("no IPv4 address for %s: %v", name, err)
	}
	return ip
}

// waitForNode waits as CAPD does before it bootstraps: the multi-user target in the container's
// log, then `crictl ps` answering.
func (c *cluster) waitForNode(name string) {
	NewWithT(c.t).Eventually(func() error {
		logs, err := c.rt.GetContainerLogs(c.ctx, name)
		if err != nil {
			return err
		}
		if !multiUserTarget.MatchString(logs) {
			return fmt.Errorf("multi-user target not reached yet")
		}
		_, err = c.execOut(name, "", "crictl", "ps")
		return err
	}, 2*time.Minute, time.Second).Should(Succeed(), "node %s ready for bootstrap", name)
}

// configureLoadBalancer writes and reloads a configuration as CAPD does (write with mkdir and cp,
// read back with cp, SIGHUP), then checks haproxy took it: the stats page lists the backend.
func (c *cluster) configureLoadBalancer(backendIP string) {
	cfg := fmt.Sprintf(lbConfig, c.controlPlane, backendIP)
	const path = "/usr/local/etc/haproxy/haproxy.cfg"
	c.exec(c.lb, "", "mkdir", "-p", filepath.Dir(path))
	c.exec(c.lb, cfg, "cp", "/dev/stdin", path)
	g := NewWithT(c.t)
	// CAPD's exec may return before a command reading stdin has run (writeFile): the copy lands a
	// moment later.
	g.Eventually(func() (string, error) { return c.execOut(c.lb, "", "cp", path, "/dev/stdout") }, 10*time.Second, 200*time.Millisecond).Should(Equal(cfg))
	g.Expect(c.rt.KillContainer(c.ctx, c.lb, "SIGHUP")).To(Succeed())
	g.Eventually(func() (string, error) {
		return c.rt.GetContainerLogs(c.ctx, c.lb)
	}, 30*time.Second, time.Second).Should(MatchRegexp(`(?i)reexecuting|loading success`), "haproxy reloaded")
}

// writeFile writes content to path in node, passed as an argument rather than on stdin: CAPD's
// ExecContainer returns once its input is sent if the engine does not report the command
// running yet, so a command reading stdin may still run, or not have started, when the next
// exec begins (seen under load: kubeadm join found no configuration). Without stdin it returns
// when the command's output ends.
func (c *cluster) writeFile(node, path, content string) {
	c.exec(node, "", "/bin/sh", "-c", `mkdir -p "$(dirname "$1")" && printf '%s' "$2" > "$1"`, "sh", path, content)
}

func (c *cluster) exec(node, stdin, cmd string, args ...string) string {
	out, err := c.execOut(node, stdin, cmd, args...)
	if err != nil {
		c.t.Fatalf("%s: %s %s: %v\n%s", node, cmd, strings.Join(args, " "), err, out)
	}
	return out
}

func (c *cluster) execOut(node, stdin, cmd string, args ...string) (string, error) {
	var out bytes.Buffer
	in := &container.ExecContainerInput{OutputBuffer: &out, ErrorBuffer: &out}
	if stdin != "" {
		in.InputBuffer = strings.NewReader(stdin)
	}
	err := c.rt.ExecContainer(c.ctx, node, in, cmd, args...)
	return out.String(), err
}

func (c *cluster) kubectl(args ...string) (string, error) {
	return c.execOut(c.controlPlane, "", "kubectl", args...)
}

func (c *cluster) kubectlIn(stdin string, args ...string) (string, error) {
	return c.execOut(c.controlPlane, stdin, "kubectl", args...)
}

// imageRef returns the reference of the preloaded image named NAME (registry.k8s.io/NAME:tag).
func (c *cluster) imageRef(node, name string) string {
	out := c.exec(node, "", "ctr", "-n", "k8s.io", "images", "ls", "-q")
	for _, ref := range strings.Fields(out) {
		if strings.Contains(ref, "/"+name+":") {
			return ref
		}
	}
	c.t.Fatalf("no %s image in %s:\n%s", name, node, out)
	return ""
}

func (c *cluster) hasImage(node, name string) bool {
	out := c.exec(node, "", "ctr", "-n", "k8s.io", "images", "ls", "-q")
	return strings.Contains(out, "/"+name+":")
}

// teardown removes every container and the network of the cluster, dumping what helps to debug
// first if the test failed.
func (c *cluster) teardown() {
	ctx := context.Background()
	if c.t.Failed() {
		for _, node := range []string{c.controlPlane, c.worker} {
			out, _ := c.execOut(node, "", "/bin/sh", "-c",
				"journalctl -u kubelet -u containerd -u capdmp-cni --no-pager | tail -n 60; crictl ps -a; "+
					"KUBECONFIG=/etc/kubernetes/admin.conf kubectl get nodes,pods -A -o wide 2>/dev/null")
			c.t.Logf("--- %s ---\n%s", node, out)
		}
	}
	for _, name := range []string{c.worker, c.controlPlane, c.lb} {
		if err := c.rt.DeleteContainer(container.RuntimeInto(ctx, c.rt), name); err != nil && !strings.Contains(err.Error(), "No such container") {
			c.t.Errorf("removing container %s: %v", name, err)
		}
	}
	if _, err := c.docker.NetworkRemove(ctx, c.network, client.NetworkRemoveOptions{}); err != nil {
		c.t.Errorf("removing network %s: %v", c.network, err)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// nodeRegistration is what CAPD's cloud-init adapter adds to every node's kubeadm configuration
// (criSocket and kubeletExtraArgs, docker/internal/provisioning/cloudinit/writefiles.go), plus
// imagePullPolicy Never: no registry can be reached, every image is preloaded.
const nodeRegistration = `nodeRegistration:
  criSocket: unix:///var/run/containerd/containerd.sock
  imagePullPolicy: Never
  kubeletExtraArgs:
  - name: eviction-hard
    value: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
  - name: image-gc-high-threshold
    value: "100"
  - name: fail-swap-on
    value: "false"
  - name: cgroup-root
    value: /kubelet
  - name: runtime-cgroups
    value: /system.slice/containerd.service`

const initConfig = `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: %s
  ttl: 1h0m0s%s
%s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %s
controlPlaneEndpoint: %s:6443
networking:
  podSubnet: %s
---
# What CAPD's cloud-init adapter appends to every kubeadm init configuration: kube-proxy must not
# set nf_conntrack_max, a host-wide setting.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack:
  maxPerCore: 0
`

const joinConfig = `apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: %s:6443
    token: %s
    unsafeSkipCAVerification: true
%s
`

const smokePod = `apiVersion: v1
kind: Pod
metadata:
  name: smoke
spec:
  nodeSelector:
    kubernetes.io/hostname: %s
  containers:
  - name: pause
    image: %s
    imagePullPolicy: Never
`

// lbConfig has the shape of CAPD's default haproxy configuration: a stats frontend, the API
// server frontend and a backend checked over TLS, with Docker's embedded DNS as resolver.
const lbConfig = `global
  log stdout format raw local0
  maxconn 100000

resolvers docker
  nameserver dns 127.0.0.11:53

defaults
  log global
  mode tcp
  option dontlognull
  timeout connect 5000
  timeout client 50000
  timeout server 50000
  default-server init-addr none

frontend stats
  mode http
  bind *:8404
  stats enable
  stats uri /stats
  stats refresh 1s
  stats admin if TRUE

frontend control-plane
  bind *:6443
  default_backend kube-apiservers

backend kube-apiservers
  option httpchk GET /healthz
  server %s %s:6443 weight 100 check check-ssl verify none resolvers docker resolve-prefer ipv4
`
