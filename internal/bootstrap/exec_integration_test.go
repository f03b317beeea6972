package bootstrap_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	. "github.com/onsi/gomega"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/ignition"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"

	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/container/containertest"
)

// fakeKubeadm stands in for kubeadm in the busybox node: it records its arguments and the join
// configuration it was given, and fails when /tmp/kubeadm-fail exists.
const fakeKubeadm = `#!/bin/sh
echo "$@" > /tmp/kubeadm-args
while [ $# -gt 0 ]; do
  if [ "$1" = "--config" ]; then cp "$2" /tmp/kubeadm-config; fi
  shift
done
if [ -f /tmp/kubeadm-fail ]; then echo "kubeadm failed" >&2; exit 1; fi
`

// TestCommandsRunInABusyboxNode runs the commands built from CABPK's cloud-config and Ignition in
// a busybox container, to prove that they need nothing but POSIX sh and busybox's tools.
func TestCommandsRunInABusyboxNode(t *testing.T) {
	d := containertest.Engine(t)
	containertest.EnsureBusyboxImage(t, d)
	ctx := context.Background()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	runLabel := map[string]string{"capdmp.test/run": run}
	t.Cleanup(func() {
		if cs, err := d.List(ctx, runLabel); err == nil {
			for _, c := range cs {
				_ = d.Delete(ctx, c.Name)
			}
		}
	})

	// newNode starts a busybox node with a kind node's mounts (tmpfs /run and /tmp, a /var
	// volume), a fake kubeadm, and users for chown.
	newNode := func(t *testing.T, name string) string {
		t.Helper()
		g := NewWithT(t)
		spec := container.NodeSpec(container.NodeSpecInput{Name: "capdmp-bs-" + run + "-" + name, Image: containertest.BusyboxImage, ClusterName: "c", Labels: runLabel})
		spec.Mounts = nil // the test host has no /lib/modules
		spec.Cmd = []string{"sleep", "3600"}
		c, err := d.Create(ctx, spec)
		g.Expect(err).ToNot(HaveOccurred())
		setup := `set -e
mkdir -p /usr/bin /etc/capdmp
cat > /usr/bin/kubeadm; chmod 0755 /usr/bin/kubeadm
echo 'root:x:0:0:root:/root:/bin/sh' > /etc/passwd
echo 'nobody:x:65534:65534:nobody:/:/bin/false' >> /etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' > /etc/group
echo "first" > /etc/capdmp/appended`
		res, err := d.Exec(ctx, c.Name, []string{"/bin/sh", "-c", setup}, strings.NewReader(fakeKubeadm))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(BeZero(), string(res.Stderr))
		return c.Name
	}
	sh := func(g Gomega, node, script string) string {
		res, err := d.Exec(ctx, node, []string{"/bin/sh", "-c", script}, nil)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(BeZero(), "%s: %s", script, res.Stderr)
		return string(res.Stdout)
	}
	status := func(g Gomega, node string) bootstrap.Status {
		s, err := bootstrap.Check(ctx, d, node)
		g.Expect(err).ToNot(HaveOccurred())
		return s
	}
	state := func(g Gomega, node string) bootstrap.State {
		return status(g, node).State
	}
	// runAll starts the commands as a controller does and follows them until they end.
	runAll := func(t *testing.T, g Gomega, node string, cmds []bootstrap.Command) bootstrap.Status {
		t.Helper()
		start := time.Now()
		g.Expect(bootstrap.Start(ctx, d, node, cmds)).To(Succeed())
		var s bootstrap.Status
		g.Eventually(func(g Gomega) {
			s = status(g, node)
			g.Expect(s.State).ToNot(Equal(bootstrap.StateRunning))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		t.Logf("%d bootstrap steps in %v: %s", len(cmds), time.Since(start), s.State)
		return s
	}

	version := semver.MustParse("1.36.3")
	joinConfiguration := func(g Gomega) string {
		jc := &bootstrapv1.JoinConfiguration{}
		jc.Discovery.BootstrapToken = bootstrapv1.BootstrapTokenDiscovery{Token: "abcdef.0123456789abcdef", APIServerEndpoint: "172.18.0.2:6443", CACertHashes: []string{"sha256:00"}}
		jc.NodeRegistration.Name = "{{ ds.meta_data.local_hostname }}"
		s, err := kubeadmtypes.MarshalJoinConfigurationForVersion(jc, version)
		g.Expect(err).ToNot(HaveOccurred())
		return s
	}
	baseUserData := cloudinit.BaseUserData{
		AdditionalFiles: []bootstrapv1.File{
			{Path: "/etc/capdmp/plain.conf", Content: "plain text", Permissions: "0600"},
			{Path: "/etc/capdmp/b64", Content: "ZGVjb2RlZA==", Encoding: bootstrapv1.Base64, Permissions: "0644"},
			{Path: "/etc/capdmp/owned", Content: "owned", Owner: "nobody:nogroup", Permissions: "0640"},
			{Path: "/etc/capdmp/appended", Content: "second", Append: ptr(true), Permissions: "0644"},
			{Path: "/etc/capdmp/with 'quotes' and $dollar", Content: "odd path", Permissions: "0644"},
		},
		PreKubeadmCommands:  []string{`echo "pre $(hostname)" > /tmp/pre`},
		PostKubeadmCommands: []string{"echo post > /tmp/post"},
		KubernetesVersion:   version,
	}

	t.Run("cloud-config: files, commands, kubeadm join, sentinel", func(t *testing.T) {
		g := NewWithT(t)
		node := newNode(t, "cloud")
		value, err := cloudinit.NewNode(&cloudinit.NodeInput{BaseUserData: baseUserData, JoinConfiguration: joinConfiguration(g)})
		g.Expect(err).ToNot(HaveOccurred())
		data, err := bootstrap.NewData(value, bootstrap.FormatCloudConfig)
		g.Expect(err).ToNot(HaveOccurred())
		cmds, err := bootstrap.Commands(data, bootstrap.Vars{Hostname: node, IgnorePreflightErrors: bootstrap.DefaultIgnorePreflightErrors})
		g.Expect(err).ToNot(HaveOccurred())

		g.Expect(state(g, node)).To(Equal(bootstrap.StateNotStarted))
		g.Expect(runAll(t, g, node, cmds).State).To(Equal(bootstrap.StateSucceeded))
		g.Expect(sh(g, node, "ls /var/lib/capdmp/bootstrap")).ToNot(ContainSubstring(".stdin"), "the staged data, token included, is gone")

		g.Expect(sh(g, node, "stat -c '%a %U:%G' /etc/capdmp/plain.conf /etc/capdmp/b64 /etc/capdmp/owned /run/kubeadm/kubeadm-join-config.yaml")).To(Equal(
			"600 root:root\n644 root:root\n640 nobody:nogroup\n640 root:root\n"))
		g.Expect(sh(g, node, "cat /etc/capdmp/plain.conf")).To(Equal("plain text\n"))
		g.Expect(sh(g, node, "cat /etc/capdmp/b64")).To(Equal("decoded"))
		g.Expect(sh(g, node, "cat /etc/capdmp/appended")).To(Equal("first\nsecond\n"))
		g.Expect(sh(g, node, `cat "/etc/capdmp/with 'quotes' and \$dollar"`)).To(Equal("odd path\n"))
		g.Expect(sh(g, node, "cat /tmp/pre /tmp/post")).To(Equal("pre " + node + "\npost\n"))
		g.Expect(sh(g, node, "cat /tmp/kubeadm-args")).To(Equal(
			"join --ignore-preflight-errors=" + bootstrap.DefaultIgnorePreflightErrors + " --config /run/kubeadm/kubeadm-join-config.yaml\n"))
		g.Expect(sh(g, node, "cat /tmp/kubeadm-config")).To(ContainSubstring("name: '" + node + "'"))

		// A restarted node loses /run (a tmpfs) but is still known as bootstrapped.
		sh(g, node, "rm "+bootstrap.SentinelPath)
		g.Expect(state(g, node)).To(Equal(bootstrap.StateSucceeded))
	})

	t.Run("a systemd image whose PID 1 is not systemd yet is Booting, not ready to bootstrap", func(t *testing.T) {
		g := NewWithT(t)
		node := newNode(t, "boot")
		// The stub's init stands in for a kind entrypoint that has not exec'd systemd yet.
		sh(g, node, "mkdir -p /lib/systemd && touch /lib/systemd/systemd && chmod +x /lib/systemd/systemd")
		g.Expect(state(g, node)).To(Equal(bootstrap.StateBooting))
		sh(g, node, "rm /lib/systemd/systemd")
		g.Expect(state(g, node)).To(Equal(bootstrap.StateNotStarted))
	})

	t.Run("cloud-config: a failed join stops the bootstrap and reports the step and its output", func(t *testing.T) {
		g := NewWithT(t)
		node := newNode(t, "fail")
		sh(g, node, "touch /tmp/kubeadm-fail")
		value, err := cloudinit.NewNode(&cloudinit.NodeInput{BaseUserData: baseUserData, JoinConfiguration: joinConfiguration(g)})
		g.Expect(err).ToNot(HaveOccurred())
		data, err := bootstrap.NewData(value, "")
		g.Expect(err).ToNot(HaveOccurred())
		cmds, err := bootstrap.Commands(data, bootstrap.Vars{Hostname: node})
		g.Expect(err).ToNot(HaveOccurred())
		s := runAll(t, g, node, cmds)
		g.Expect(s.State).To(Equal(bootstrap.StateFailed))
		g.Expect(s.Step).To(Equal("runcmd[1]"))
		g.Expect(s.ExitCode).To(Equal(1))
		g.Expect(string(s.Output)).To(Equal("kubeadm failed"))
		g.Expect(status(g, node)).To(Equal(s), "the result stays")
		g.Expect(sh(g, node, "ls /var/lib/capdmp/bootstrap")).ToNot(ContainSubstring(".stdin"), "the staged data, token included, is gone")
		res, err := d.Exec(ctx, node, []string{"test", "-e", "/tmp/post"}, nil)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).ToNot(BeZero(), "post-kubeadm commands must not run after a failed join")
	})

	t.Run("ignition: files, unit, kubeadm script with sh, sentinel", func(t *testing.T) {
		g := NewWithT(t)
		node := newNode(t, "ign")
		files := append([]bootstrapv1.File(nil), baseUserData.AdditionalFiles...)
		value, _, err := ignition.NewNode(&ignition.NodeInput{
			NodeInput: &cloudinit.NodeInput{BaseUserData: cloudinit.BaseUserData{
				AdditionalFiles:     files[:3],
				PreKubeadmCommands:  baseUserData.PreKubeadmCommands,
				PostKubeadmCommands: baseUserData.PostKubeadmCommands,
				KubernetesVersion:   version,
			}, JoinConfiguration: joinConfiguration(g)},
			Ignition: &bootstrapv1.IgnitionSpec{},
		})
		g.Expect(err).ToNot(HaveOccurred())
		data, err := bootstrap.NewData(value, bootstrap.FormatIgnition)
		g.Expect(err).ToNot(HaveOccurred())
		cmds, err := bootstrap.Commands(data, bootstrap.Vars{Hostname: node, IgnorePreflightErrors: bootstrap.DefaultIgnorePreflightErrors})
		g.Expect(err).ToNot(HaveOccurred())

		g.Expect(runAll(t, g, node, cmds).State).To(Equal(bootstrap.StateSucceeded))
		g.Expect(sh(g, node, "stat -c '%a %U:%G' /etc/capdmp/plain.conf /etc/capdmp/owned /etc/kubeadm.sh /etc/systemd/system/kubeadm.service")).To(Equal(
			"600 root:root\n640 nobody:nogroup\n700 root:root\n644 root:root\n"))
		g.Expect(sh(g, node, "cat /etc/capdmp/b64")).To(Equal("decoded"))
		g.Expect(sh(g, node, "cat /tmp/kubeadm-args")).To(Equal(
			"join --ignore-preflight-errors=" + bootstrap.DefaultIgnorePreflightErrors + " --config /etc/kubeadm.yml\n"))
		g.Expect(sh(g, node, "cat /tmp/pre /tmp/post")).To(Equal("pre " + node + "\npost\n"))
		// CABPK's script moves its configuration away once done, so its unit would not run again.
		g.Expect(sh(g, node, "test ! -e /etc/kubeadm.yml && test -e /tmp/kubeadm.yml && echo moved")).To(Equal("moved\n"))
	})

	// startSlow starts a slow bootstrap in a new node: its first runcmd waits until the test
	// lets it go, as kubeadm waits for a TLS bootstrap. The runner is detached: Start returns at
	// once, and whoever checks later (a restarted controller) finds it running, then finished.
	startSlow := func(t *testing.T, g Gomega, name string) string {
		t.Helper()
		node := newNode(t, name)
		in := baseUserData
		in.PreKubeadmCommands = []string{"while [ ! -f /tmp/go-on ]; do sleep 0.1; done; touch /tmp/let-go"}
		value, err := cloudinit.NewNode(&cloudinit.NodeInput{BaseUserData: in, JoinConfiguration: joinConfiguration(g)})
		g.Expect(err).ToNot(HaveOccurred())
		data, err := bootstrap.NewData(value, bootstrap.FormatCloudConfig)
		g.Expect(err).ToNot(HaveOccurred())
		cmds, err := bootstrap.Commands(data, bootstrap.Vars{Hostname: node})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(bootstrap.Start(ctx, d, node, cmds)).To(Succeed())
		return node
	}

	t.Run("a running bootstrap is found running, then finished", func(t *testing.T) {
		g := NewWithT(t)
		node := startSlow(t, g, "slow")
		g.Consistently(func(g Gomega) { g.Expect(state(g, node)).To(Equal(bootstrap.StateRunning)) }, 2*time.Second, 200*time.Millisecond).Should(Succeed())
		g.Expect(status(g, node).Elapsed).To(BeNumerically(">=", time.Second))
		sh(g, node, "touch /tmp/go-on")
		g.Eventually(func(g Gomega) { g.Expect(state(g, node)).To(Equal(bootstrap.StateSucceeded)) }, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		g.Expect(sh(g, node, "cat /tmp/post")).To(Equal("post\n"))
		// Once the runner is done, the time it ran is fixed: from its start to its last step's end.
		g.Eventually(func(g Gomega) {
			g.Expect(sh(g, node, "ls /var/lib/capdmp/bootstrap")).To(ContainSubstring("finished-at"))
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		g.Expect(status(g, node).Timed).To(BeTrue())
		ran := status(g, node).Elapsed
		g.Expect(ran).To(BeNumerically(">=", 2*time.Second), "it waited 2s for /tmp/go-on")
		time.Sleep(1100 * time.Millisecond)
		g.Expect(status(g, node).Elapsed).To(Equal(ran))
	})

	t.Run("Stop ends the whole runner and reports the step it cut short", func(t *testing.T) {
		g := NewWithT(t)
		node := startSlow(t, g, "stop")
		// The loop of runcmd[0] (the node's own process is a sleep too).
		g.Eventually(func(g Gomega) { g.Expect(sh(g, node, "ps -o args")).To(ContainSubstring("sleep 0.1")) }, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		g.Expect(bootstrap.Stop(ctx, d, node)).To(Succeed())
		s := status(g, node)
		g.Expect(s.State).To(Equal(bootstrap.StateFailed))
		g.Expect(s.Stopped).To(BeTrue())
		g.Expect(s.Step).To(Equal("runcmd[0]"))
		// Let the step go: a step that survived Stop would now end its loop and leave a mark.
		sh(g, node, "touch /tmp/go-on")
		g.Consistently(func(g Gomega) { g.Expect(state(g, node)).To(Equal(bootstrap.StateFailed)) }, 2*time.Second, 200*time.Millisecond).Should(Succeed())
		for _, mark := range []string{"/tmp/let-go", "/tmp/kubeadm-args"} {
			res, err := d.Exec(ctx, node, []string{"test", "-e", mark}, nil)
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(res.ExitCode).ToNot(BeZero(), "%s: the step and the join never ran on after Stop", mark)
		}
	})

	// await runs Await in the background; its error arrives on the channel.
	await := func(node string, limit time.Duration) <-chan error {
		done := make(chan error, 1)
		go func() { done <- bootstrap.Await(ctx, d, node, limit) }()
		return done
	}

	t.Run("Await returns when the bootstrap ends, and at once for one that ended", func(t *testing.T) {
		g := NewWithT(t)
		node := startSlow(t, g, "await")
		done := await(node, time.Minute)
		g.Consistently(done, 2*time.Second, 100*time.Millisecond).ShouldNot(Receive(), "the bootstrap still runs")
		sh(g, node, "touch /tmp/go-on")
		g.Eventually(done, 10*time.Second, 50*time.Millisecond).Should(Receive(BeNil()))
		g.Expect(state(g, node)).To(Equal(bootstrap.StateSucceeded), "it returned once the runner was done")
		g.Eventually(await(node, time.Minute), 5*time.Second).Should(Receive(BeNil()))
	})

	t.Run("Await returns when the bootstrap is stopped or its runner killed, and gives up at its limit", func(t *testing.T) {
		g := NewWithT(t)
		stopped, killed := startSlow(t, g, "await-stop"), startSlow(t, g, "await-kill")
		g.Expect(bootstrap.Await(ctx, d, stopped, 600*time.Millisecond)).To(MatchError(bootstrap.ErrAwaitLimit))

		doneStopped, doneKilled := await(stopped, time.Minute), await(killed, time.Minute)
		g.Expect(bootstrap.Stop(ctx, d, stopped)).To(Succeed())
		g.Eventually(doneStopped, 10*time.Second, 50*time.Millisecond).Should(Receive(BeNil()))
		g.Eventually(func(g Gomega) { g.Expect(state(g, killed)).To(Equal(bootstrap.StateRunning)) }, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		sh(g, killed, "kill -KILL -$(cat /var/lib/capdmp/bootstrap/pid)")
		g.Eventually(doneKilled, 10*time.Second, 50*time.Millisecond).Should(Receive(BeNil()))
		g.Expect(state(g, killed)).To(Equal(bootstrap.StateInterrupted))
	})

	t.Run("a runner killed without a result is Interrupted, never run again", func(t *testing.T) {
		g := NewWithT(t)
		node := startSlow(t, g, "kill")
		g.Eventually(func(g Gomega) { g.Expect(state(g, node)).To(Equal(bootstrap.StateRunning)) }, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		// What a restart of the node does to the runner, without its report.
		sh(g, node, "kill -KILL -$(cat /var/lib/capdmp/bootstrap/pid)")
		g.Eventually(func(g Gomega) { g.Expect(state(g, node)).To(Equal(bootstrap.StateInterrupted)) }, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	})
}

func ptr[T any](v T) *T { return &v }
