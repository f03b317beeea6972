//go:build e2e_local

// Package real is the real tier of test/local: the scenarios of "upgrade both at once" with real
// KubeadmControlPlanes, real kubelets from the node images `make node-images` builds, CAPD's
// control-plane machines and CAPDMP's pools (test/realworld). Run it with `make test-e2e-local`.
package real

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/test/envtest"
	"github.com/capdmp/capdmp/test/realworld"
)

// The node images of the chain, oldest first (hack/node-images/node-images.mk builds them).
const (
	v135 = "v1.35.4"
	v136 = "v1.36.3"
	v137 = "v1.37.2"
)

var (
	world *realworld.World

	resultsMu sync.Mutex
	results   []result
)

type result struct {
	name       string
	failed     bool
	duration   time.Duration
	samples    int
	interval   string
	violations int
	// blind counts samples with pool nodes and no kube-apiserver to judge them against.
	blind        int
	latencies    []string
	remediations []string
}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctx := context.Background()
	start := time.Now()
	var err error
	world, err = realworld.Start(ctx, realworld.Options{
		Artifacts: filepath.Join(envtest.RepoRoot(), "_artifacts", "e2e-local"),
		TokenTTL:  tokenTTL(),
		Progress:  os.Stdout,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the real world:", err)
		return 1
	}
	code := m.Run()
	world.Stop()
	return summarize(os.Stdout, code, time.Since(start))
}

// controlPlaneNodeStartup is how long the control plane's MachineHealthCheck waits for a new
// Machine's Node before KCP replaces the Machine: longer than the 10 minutes the scenarios give
// kubeadm's waits.
const controlPlaneNodeStartup = 12 * time.Minute

// tokenTTL is CABPK's bootstrap token TTL: short, so that scenario 3's pause outlives it, and
// long enough for a control-plane node to join on a loaded machine.
func tokenTTL() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("E2E_LOCAL_TOKEN_TTL")); err == nil {
		return d
	}
	return 90 * time.Second
}

// summarize prints each scenario's figures and the suite's verdict in the plain form CI reads.
func summarize(out io.Writer, code int, wall time.Duration) int {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	passed, failed, violations := 0, 0, 0
	fmt.Fprintln(out, "\nscenario                                   result  time     samples  blind  every (longest gap)  violations  gate re-open latency")
	for _, r := range results {
		verdict := "pass"
		if r.failed {
			verdict, failed = "FAIL", failed+1
		} else {
			passed++
		}
		violations += r.violations
		fmt.Fprintf(out, "%-42s %-7s %-8s %-8d %-6d %-20s %-11d %s\n", r.name, verdict, r.duration.Round(time.Second), r.samples, r.blind, r.interval, r.violations, strings.Join(r.latencies, ", "))
	}
	for _, r := range results {
		for _, rem := range r.remediations {
			fmt.Fprintf(out, "%s remediation: %s\n", r.name, rem)
		}
	}
	if kitUpstream != "" {
		fmt.Fprintf(out, "conformance kit, upstream CAPD: %s\n", kitUpstream)
	}
	fmt.Fprintf(out, "suite wall time: %s\n", wall.Round(time.Second))
	fmt.Fprintf(out, "skew-violations: %d\n", violations)
	fmt.Fprintf(out, "%d passed, %d failed\n", passed, failed)
	if code == 0 && (failed > 0 || violations > 0) {
		return 1
	}
	return code
}

// scenario is one cluster of the suite, its monitor and its timeline.
type scenario struct {
	t     *testing.T
	g     Gomega
	ctx   context.Context //nolint:containedctx // one scenario's steps share its context
	c     *realworld.Cluster
	mon   *realworld.Monitor
	start time.Time
	out   io.Writer
	res   *result
}

// newScenario creates the scenario's cluster on the suite's world and watches it (watch).
func newScenario(t *testing.T, name string, spec realworld.ClusterSpec) *scenario {
	t.Helper()
	s := startScenario(t, name)
	s.watch(s.createCluster(spec))
	return s
}

// createCluster creates the scenario's cluster with the suite's settings for a busy machine.
func (s *scenario) createCluster(spec realworld.ClusterSpec) *realworld.Cluster {
	s.t.Helper()
	spec.Name = "e2e-" + s.res.name
	spec.SkipAddons = true
	spec.KubeadmTimeout = 10 * time.Minute
	// A control-plane join under the suite's load once took 5.5 minutes, past CAPD's default.
	spec.ControlPlaneBootstrapTimeout = 15 * time.Minute
	// Past kubeadm's own waits: a join still inside them is not replaced.
	spec.ControlPlaneNodeStartupTimeout = controlPlaneNodeStartup
	c, err := world.CreateCluster(s.ctx, spec)
	s.g.Expect(err).NotTo(HaveOccurred())
	s.logf("cluster %s: control plane %s x%d, pool %s x%d", c.Name, spec.ControlPlaneVersion, spec.ControlPlaneReplicas, spec.PoolVersion, spec.PoolReplicas)
	return c
}

// startScenario starts a scenario's clock, log and result; watch gives it its cluster.
func startScenario(t *testing.T, name string) *scenario {
	t.Helper()
	return &scenario{
		t: t, g: NewWithT(t), ctx: context.Background(), start: time.Now(), res: &result{name: name},
		out: prefixWriter{prefix: fmt.Sprintf("[%s] ", name), w: os.Stdout},
	}
}

// watch starts the monitor of cluster c; the scenario's cleanup prints the timeline summary,
// checks the monitor saw no violation, deletes the cluster (s.c, whichever plane serves it then)
// and records the result.
func (s *scenario) watch(c *realworld.Cluster) {
	t := s.t
	s.c = c
	var err error
	s.mon, err = c.StartMonitor(s.ctx, s.start, 50*time.Millisecond, s.out)
	s.g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		s.mon.Stop()
		violations := s.mon.Violations()
		s.res.samples, s.res.violations = s.mon.Samples(), len(violations)
		mean, longest, end := s.mon.Interval()
		s.res.interval = fmt.Sprintf("%s (%s)", mean.Round(time.Millisecond), longest.Round(time.Millisecond))
		s.logf("sampled every %s on average; longest gap %s, ending at %.1fs; new containers seen within %s", mean.Round(time.Millisecond), longest.Round(time.Millisecond), end.Seconds(), s.mon.ContainerLag().Round(time.Millisecond))
		for i, v := range violations {
			if i == 5 {
				s.logf("... %d more violations", len(violations)-5)
				break
			}
			s.logf("VIOLATION at %.1fs: %s", v.At.Sub(s.start).Seconds(), v.Detail)
		}
		if len(violations) > 0 {
			t.Errorf("%d samples of %d broke the skew policy", len(violations), s.mon.Samples())
		}
		coverage := s.mon.Coverage()
		s.res.blind = coverage.NoAPIServer
		s.logf("monitor: %s", coverage)
		if blind := coverage.Blind(); blind != "" {
			t.Errorf("%s (%s)", blind, coverage)
		}
		s.logf("deleting the cluster")
		if err := s.c.Delete(context.Background(), 5*time.Minute); err != nil {
			t.Errorf("deleting cluster %s: %v", s.c.Name, err)
		}
		s.res.failed, s.res.duration = t.Failed(), time.Since(s.start)
		s.logf("done in %s (failed: %t)", s.res.duration.Round(time.Second), s.res.failed)
		resultsMu.Lock()
		results = append(results, *s.res)
		resultsMu.Unlock()
	})
}

func (s *scenario) logf(format string, args ...any) {
	fmt.Fprintf(s.out, "  %7.1fs  "+format+"\n", append([]any{time.Since(s.start).Seconds()}, args...)...)
}

func (s *scenario) waitControlPlane(version string, replicas int32, timeout time.Duration) {
	s.t.Helper()
	s.logf("waiting for the control plane at %s x%d", version, replicas)
	err := realworld.WaitFor(s.ctx, timeout, func(d string) { s.logf("%s", d) }, func(ctx context.Context) (bool, string, error) {
		return s.c.ControlPlaneAt(ctx, version, replicas)
	})
	if err != nil {
		s.logControlPlaneConditions()
	}
	s.recordRemediation()
	s.g.Expect(err).NotTo(HaveOccurred(), "control plane at %s", version)
}

// recordRemediation notes a remediation of a control-plane Machine by KCP that this scenario has
// not noted yet: which Machine, when, and how long the control plane took to be ready after it.
func (s *scenario) recordRemediation() {
	machine, at, retries, ok, err := s.c.LastRemediation(s.ctx)
	if err != nil {
		s.logf("reading KCP's last remediation: %v", err)
		return
	}
	if !ok || slices.ContainsFunc(s.res.remediations, func(r string) bool { return strings.HasPrefix(r, machine+" ") }) {
		return
	}
	r := fmt.Sprintf("%s at %.0fs (retry %d), control plane ready %s later", machine, at.Sub(s.start).Seconds(), retries, time.Since(at).Round(time.Second))
	s.res.remediations = append(s.res.remediations, r)
	s.logf("KCP remediated Machine %s", r)
}

// logControlPlaneConditions prints where a control-plane rollout stalled.
func (s *scenario) logControlPlaneConditions() {
	conditions, err := s.c.ControlPlaneMachineConditions(s.ctx)
	if err != nil {
		s.logf("the control plane's machines: %v", err)
		return
	}
	s.logf("the control plane's machines, conditions not healthy:\n    %s", strings.Join(conditions, "\n    "))
}

func (s *scenario) waitPool(version string, replicas int32, timeout time.Duration) {
	s.t.Helper()
	s.logf("waiting for the pool at %s x%d", version, replicas)
	err := realworld.WaitFor(s.ctx, timeout, func(d string) { s.logf("%s", d) }, func(ctx context.Context) (bool, string, error) {
		return s.c.PoolAt(ctx, version, replicas)
	})
	s.g.Expect(err).NotTo(HaveOccurred(), "pool at %s", version)
}

// recordLatency notes the gate's re-open latency for target.
func (s *scenario) recordLatency(target string) {
	latency, fromStatus, ok := s.mon.ReopenLatency(target)
	if !ok {
		return
	}
	s.res.latencies = append(s.res.latencies, fmt.Sprintf("%s: %s (%s after KCP status)", target, latency.Round(10*time.Millisecond), fromStatus.Round(10*time.Millisecond)))
	s.logf("gate re-open latency to %s: %s from the last kube-apiserver at %s to the first pool container of %s, %s of it after KCP's status.versions said %s",
		target, latency.Round(10*time.Millisecond), target, target, fromStatus.Round(10*time.Millisecond), target)
}

// prefixWriter prefixes every line, so that parallel scenarios' timelines stay readable.
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p prefixWriter) Write(b []byte) (int, error) {
	lines := strings.SplitAfter(string(b), "\n")
	var sb strings.Builder
	for _, l := range lines {
		if l != "" {
			sb.WriteString(p.prefix + l)
		}
	}
	_, err := io.WriteString(p.w, sb.String())
	return len(b), err
}
