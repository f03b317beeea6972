//go:build e2e_local

package realnodes

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/pkg/skew"
	"github.com/capdmp/capdmp/test/framework"
)

// TestMakeRun does what the README tells a newcomer, the way they would: `make run` in a
// terminal, a cluster rendered by clusterctl and applied with kubectl, its nodes Ready, then the
// control plane and the pool upgraded at once with kubectl. The templates are applied as they
// ship (kube-proxy and CoreDNS included), so the node images need CoreDNS: the full tier's.
// The subtests run one after the other: each runs `make run`, which builds bin/.
func TestMakeRun(t *testing.T) {
	t.Parallel()
	t.Run("upgrade-both-at-once", func(t *testing.T) {
		s, plane := readmeCluster(t, "run1-make-run-upgrade", "upgrade", "e2e-make-run")
		plane.upgradeBothAtOnce(s, vNewer)
		s.waitUpgraded(vNewer)
		plane.waitNodesReady(s, 3)
	})
	t.Run("restart-mid-upgrade", func(t *testing.T) {
		s, plane := readmeCluster(t, "run2-make-run-restart", "restart", "e2e-make-run-restart")
		plane.upgradeBothAtOnce(s, vNewer)

		machines, containers := s.machineNames(), s.containerNames()
		out := plane.interrupt(s)
		s.g.Expect(out).To(ContainSubstring("The containers of clusters default/"+s.c.Name), "Ctrl-C says the cluster's containers keep running")
		s.g.Expect(s.containerNames()).To(ContainElements(containers), "the containers run on while the plane is stopped")
		s.logf("plane stopped while the gate waited; %d containers run on", len(containers))

		plane.start(s, false)
		s.c = plane.world.Cluster(s.c.Namespace, s.c.Name)
		s.g.Expect(s.machineNames()).To(ContainElements(machines), "the restarted plane knows every Machine it knew")
		s.logf("plane restarted with its state: the Cluster and its %d Machines are there", len(machines))
		s.waitUpgraded(vNewer)
		plane.waitNodesReady(s, 3)
	})
}

// readmeCluster does the README's first steps for scenario name: `make run` with a fresh state in
// folder state, the cluster applied, its control plane and its pool at vOlder with every Node Ready.
func readmeCluster(t *testing.T, name, state, cluster string) (*scenario, *makeRun) {
	t.Helper()
	s := startScenario(t, name)
	plane := startMakeRun(s, state, true)
	c := plane.applyCluster(s, cluster)
	s.watch(c)
	s.wait("the control plane at "+vOlder, clusterReady, func(ctx context.Context) (bool, string, error) { return s.c.ControlPlaneAt(ctx, vOlder, 1) })
	s.wait("the pool at "+vOlder, clusterReady, func(ctx context.Context) (bool, string, error) { return framework.PoolAt(ctx, s.c, vOlder, 2) })
	plane.waitNodesReady(s, 3)
	return s, plane
}

// waitUpgraded waits until the control plane and the pool run version.
func (s *scenario) waitUpgraded(version string) {
	s.t.Helper()
	s.wait("the control plane at "+version, upgradeDone+remediation, func(ctx context.Context) (bool, string, error) { return s.c.ControlPlaneAt(ctx, version, 1) })
	s.wait("the pool at "+version, upgradeDone, func(ctx context.Context) (bool, string, error) { return framework.PoolAt(ctx, s.c, version, 2) })
}

// makeRun is `make run` as a user starts it in a terminal: its own process group, stopped with
// Ctrl-C (SIGINT to the group).
type makeRun struct {
	dataDir string
	cmd     *exec.Cmd
	exited  chan struct{}
	out     *gbytes.Buffer
	// world reaches the plane through its kubeconfig.
	world *framework.World
}

// startMakeRun runs `make run` with a fresh state, or the state an earlier run left, in a folder
// of the scenario's, and waits until it says the plane is ready. The scenario's cleanup stops it
// after deleting the cluster.
func startMakeRun(s *scenario, state string, fresh bool) *makeRun {
	s.t.Helper()
	r := &makeRun{dataDir: filepath.Join(testenv.RepoRoot(), "_artifacts", "e2e-local", "make-run", state), out: gbytes.NewBuffer()}
	s.t.Cleanup(func() { r.interrupt(s) })
	r.start(s, fresh)
	return r
}

// start runs `make run` (again, after interrupt).
func (r *makeRun) start(s *scenario, fresh bool) {
	s.t.Helper()
	flags := "--data-dir=" + r.dataDir
	if fresh {
		flags += " --fresh"
	}
	r.cmd = exec.Command("make", "--no-print-directory", "run", "RUN_FLAGS="+flags)
	r.cmd.Dir = testenv.RepoRoot()
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.cmd.Stdout = io.MultiWriter(r.out, prefixWriter{prefix: "  make run | ", w: s.out})
	r.cmd.Stderr = r.cmd.Stdout
	s.logf("make run RUN_FLAGS=%q", flags)
	from := len(r.out.Contents())
	s.g.Expect(r.cmd.Start()).To(Succeed())
	exited := make(chan struct{})
	r.exited = exited
	go func() { _ = r.cmd.Wait(); close(exited) }()

	// Building the binaries is most of it when the Go cache is cold.
	deadline := time.After(15 * time.Minute)
	for !strings.Contains(string(r.out.Contents()[from:]), "Management plane ready") {
		select {
		case <-exited:
			s.t.Fatalf("make run ended before the plane was ready: %v", r.cmd.ProcessState)
		case <-deadline:
			s.t.Fatal("make run: the plane was not ready after 15 minutes")
		case <-time.After(time.Second):
		}
	}
	var err error
	r.world, err = framework.Attach(filepath.Join(r.dataDir, "kubeconfig"), os.Getenv("DOCKER_HOST"))
	s.g.Expect(err).NotTo(HaveOccurred())
}

// interrupt presses Ctrl-C and waits for make run to end; it returns what the plane printed from
// then on. Called again, or once it ended, it does nothing.
func (r *makeRun) interrupt(s *scenario) string {
	if r.cmd == nil {
		return ""
	}
	select {
	case <-r.exited:
		return ""
	default:
	}
	from := len(r.out.Contents())
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-r.exited:
	case <-time.After(2 * time.Minute):
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-r.exited
		s.t.Errorf("make run did not stop within 2 minutes of Ctrl-C")
	}
	return string(r.out.Contents()[from:])
}

// user runs a shell command line as the README's user does: from the repository's root, with
// the plane's kubeconfig and bin/ on the PATH.
func (r *makeRun) user(s *scenario, line string) string {
	s.t.Helper()
	cmd := exec.Command("bash", "-o", "pipefail", "-c", line)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.world.Kubeconfig, "PATH="+filepath.Join(testenv.RepoRoot(), "bin")+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	s.logf("$ %s\n%s", line, strings.TrimRight(string(out), "\n"))
	s.g.Expect(err).NotTo(HaveOccurred(), line)
	return string(out)
}

// applyCluster renders the README's cluster, named name, at vOlder and applies it.
func (r *makeRun) applyCluster(s *scenario, name string) *framework.Cluster {
	r.user(s, fmt.Sprintf("clusterctl generate cluster %s --from templates/cluster-template-machinepool.yaml "+
		"--kubernetes-version %s --worker-machine-count 2 | kubectl apply -f -", name, vOlder))
	r.user(s, "kubectl get cluster,kcp,mp,dmp,dmpm")
	return r.world.Cluster("default", name)
}

// upgradeBothAtOnce patches the MachinePool and then the KubeadmControlPlane to version, back to
// back, and checks that `kubectl describe dmp` says the pool waits for the control plane.
func (r *makeRun) upgradeBothAtOnce(s *scenario, version string) {
	s.t.Helper()
	r.user(s, fmt.Sprintf(`kubectl patch machinepool %s --type merge -p '{"spec":{"template":{"spec":{"version":"%s"}}}}' && `+
		`kubectl patch kcp %s --type merge -p '{"spec":{"version":"%s"}}'`, s.c.Pool, version, s.c.ControlPlane, version))
	s.wait("the pool to wait for the control plane", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		reason, _, err := s.c.Gate(ctx)
		return reason == string(skew.ControlPlaneOlder), reason, err
	})
	described := r.user(s, "kubectl describe dmp "+s.c.Pool)
	s.g.Expect(described).To(ContainSubstring("is newer than the oldest control plane version"), "kubectl describe dmp says why the pool waits")
}

// waitNodesReady waits, with the workload cluster's kubeconfig from clusterctl, until it has
// nodes Nodes and all are Ready.
func (r *makeRun) waitNodesReady(s *scenario, nodes int) {
	s.t.Helper()
	kubeconfig := filepath.Join(r.dataDir, s.c.Name+".kubeconfig")
	r.user(s, fmt.Sprintf("clusterctl get kubeconfig %s > %s && kubectl --kubeconfig %s wait --for=condition=Ready nodes --all --timeout=5m", s.c.Name, kubeconfig, kubeconfig))
	out := r.user(s, fmt.Sprintf("kubectl --kubeconfig %s get nodes --no-headers", kubeconfig))
	s.g.Expect(strings.Count(strings.TrimSpace(out), "\n")+1).To(Equal(nodes), "the workload cluster's Nodes")
}

// machineNames lists the cluster's Machines.
func (s *scenario) machineNames() []string {
	machines := &clusterv1.MachineList{}
	s.g.Expect(s.c.World().Client.List(s.ctx, machines, client.InNamespace(s.c.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: s.c.Name})).To(Succeed())
	var names []string
	for _, m := range machines.Items {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names
}

// containerNames lists the cluster's containers.
func (s *scenario) containerNames() []string {
	names, err := s.c.Containers(s.ctx)
	s.g.Expect(err).NotTo(HaveOccurred())
	return names
}
