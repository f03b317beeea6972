//go:build e2e_local

// Package realnodes runs pkg/conformance's scenario table on real nodes: real
// KubeadmControlPlanes, real kubelets from the node images `make node-images` builds, CAPD's
// control-plane machines and CAPDMP's pools, in test/framework's world. Run it with
// `make test-e2e-local` (blocking) or `make test-e2e-full`.
package realnodes

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

	"github.com/capdmp/capdmp/internal/clusterops"
	"github.com/capdmp/capdmp/internal/kubeversions"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/test/framework"
)

// The node images of the chain, oldest first (internal/kubeversions; hack/node-images/node-images.mk
// builds them): a scenario of the table starts at the oldest of the newest versions it needs.
var (
	vOldest = kubeversions.Oldest
	vOlder  = kubeversions.Older
	vNewer  = kubeversions.Newer
)

var chain = []string{vOldest, vOlder, vNewer}

var (
	world *framework.World

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
	// finding is what a kit run saw of a pool that is not CAPDMP's: its violations are the
	// finding, not the suite's failure.
	finding string
}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctx := context.Background()
	start := time.Now()
	var err error
	world, err = framework.Start(ctx, framework.Options{
		Artifacts: filepath.Join(testenv.RepoRoot(), "_artifacts", "e2e-local"),
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
		if r.finding != "" {
			fmt.Fprintf(out, "%-42s kit finding, not counted: %s\n", "", r.finding)
		}
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
	if passed+failed == 0 {
		// A run that ran no scenario proves nothing: a -run or CAPDMP_SCENARIOS that selects
		// nothing must not pass.
		fmt.Fprintln(out, "FAIL: no scenario ran")
		return 1
	}
	if code == 0 && (failed > 0 || violations > 0) {
		return 1
	}
	return code
}

// budgets are the table's waits on a loaded 2-core machine: a control-plane node boots and joins
// in about a minute, a one-node KCP rollout takes two to four. A join that fails costs the
// MachineHealthCheck's node startup timeout and a new join before KCP's rollout goes on: the
// control plane's waits leave room for one remediation.
var budgets = conformance.Budgets{
	// A first control-plane machine whose kubeadm init fails (a kube-apiserver too slow to answer
	// init's own calls on a busy machine) is remediated too: KCP replaces it like any other.
	ClusterReady:        clusterReady + remediation,
	ControlPlaneMachine: 4*time.Minute + remediation/2,
	ControlPlaneUpgrade: upgradeDone + remediation,
	PoolUpgrade:         upgradeDone,
	Gate:                2 * time.Minute,
	Settle:              30 * time.Second,
}

const (
	clusterReady = 8 * time.Minute
	upgradeDone  = 12 * time.Minute
	remediation  = controlPlaneNodeStartup + 6*time.Minute
)

// scenario is one cluster of the suite, its monitor and its timeline.
type scenario struct {
	t     *testing.T
	g     Gomega
	ctx   context.Context //nolint:containedctx // one scenario's steps share its context
	c     *framework.Cluster
	start time.Time
	out   io.Writer
	res   *result
	// watcher watches a cluster that no table scenario runs on (TestMakeRun).
	watcher *conformance.Watcher
}

// startScenario starts a scenario's clock, log and result; its cleanup records the result, after
// the cleanups registered later (the cluster's, then a plane's) have run.
func startScenario(t *testing.T, name string) *scenario {
	t.Helper()
	s := &scenario{
		t: t, g: NewWithT(t), ctx: context.Background(), start: time.Now(), res: &result{name: name},
		out: prefixWriter{prefix: fmt.Sprintf("[%s] ", name), w: os.Stdout},
	}
	t.Cleanup(func() {
		s.res.failed, s.res.duration = t.Failed(), time.Since(s.start)
		s.logf("done in %s (failed: %t)", s.res.duration.Round(time.Second), s.res.failed)
		resultsMu.Lock()
		results = append(results, *s.res)
		resultsMu.Unlock()
	})
	return s
}

// createCluster creates the scenario's cluster with the suite's settings for a busy machine.
func (s *scenario) createCluster(spec framework.ClusterSpec) *framework.Cluster {
	s.t.Helper()
	// A scenario's name has a '/', which no object name may hold.
	spec.Name = "e2e-" + strings.ReplaceAll(s.res.name, "/", "-")
	spec.SkipAddons = true
	spec.KubeadmTimeout = 10 * time.Minute
	// A control-plane join under the suite's load once took 5.5 minutes, past CAPD's default.
	spec.ControlPlaneBootstrapTimeout = 15 * time.Minute
	// Past kubeadm's own waits: a join still inside them is not replaced.
	spec.ControlPlaneNodeStartupTimeout = controlPlaneNodeStartup
	// A run that was killed leaves its containers, and the load balancer's name is fixed.
	s.g.Expect(world.RemoveClusterContainers(s.ctx, spec.Name)).To(Succeed())
	c, err := world.CreateCluster(s.ctx, spec)
	s.g.Expect(err).NotTo(HaveOccurred())
	s.c = c
	s.t.Cleanup(s.deleteCluster)
	s.logf("cluster %s: control plane %s x%d, pool %s x%d", c.Name, spec.ControlPlaneVersion, spec.ControlPlaneReplicas, spec.PoolVersion, spec.PoolReplicas)
	return c
}

// run runs a scenario of the table on cluster c (conformance.Cluster: CAPDMP's pool with every
// optional interface, or the kit's view of any provider's) and checks what its monitor saw.
func (s *scenario) run(sc conformance.Scenario, c conformance.Cluster) (conformance.Report, error) {
	report, err := sc.Run(s.ctx, c, conformance.Options{
		Versions: chain, Interval: 50 * time.Millisecond, Budgets: budgets, TokenTTL: tokenTTL(),
		Logf: s.logf, OnChange: s.timeline,
		AfterControlPlaneWait: func(err error) {
			if err != nil {
				s.logControlPlaneConditions()
			}
			s.recordRemediation()
		},
	})
	s.logf("%s: %v", sc.Name, err)
	return report, err
}

// check records what the monitor saw and fails the test on a violation or a blind monitor.
func (s *scenario) check(report conformance.Report, runErr error) {
	t := s.t
	s.res.samples, s.res.violations, s.res.blind = report.Coverage.Samples, len(report.Violations), report.Coverage.NoAPIServer
	mean, longest, end := report.SampleInterval, report.LongestGap, report.LongestGapEnd
	s.res.interval = fmt.Sprintf("%s (%s)", mean.Round(time.Millisecond), longest.Round(time.Millisecond))
	s.logf("sampled every %s on average; longest gap %s, ending at %.1fs; new containers seen within %s", mean.Round(time.Millisecond), longest.Round(time.Millisecond), end.Seconds(), s.c.ContainerLag().Round(time.Millisecond))
	for _, l := range report.Latencies {
		s.res.latencies = append(s.res.latencies, fmt.Sprintf("%s: %s (%s after KCP status)", l.Target, l.FromAPIServers.Round(10*time.Millisecond), l.FromStatus.Round(10*time.Millisecond)))
		s.logf("gate re-open latency to %s: %s from the last kube-apiserver at %s to the first pool container of %s, %s of it after KCP's status.versions said %s",
			l.Target, l.FromAPIServers.Round(10*time.Millisecond), l.Target, l.Target, l.FromStatus.Round(10*time.Millisecond), l.Target)
	}
	for i, v := range report.Violations {
		if i == 5 {
			s.logf("... %d more violations", len(report.Violations)-5)
			break
		}
		s.logf("VIOLATION %s", v)
	}
	if len(report.Violations) > 0 {
		t.Errorf("%d samples of %d broke the skew policy", len(report.Violations), report.Coverage.Samples)
	}
	s.logf("monitor: %s", report.Coverage)
	if blind := report.Coverage.Blind(); blind != "" && runErr == nil {
		t.Errorf("%s (%s)", blind, report.Coverage)
	}
	if runErr != nil {
		t.Error(runErr)
	}
}

// timeline prints a sample that differs from the one before.
func (s *scenario) timeline(x conformance.Sample) {
	fmt.Fprintf(s.out, "  %7.1fs  %s\n", x.At.Sub(s.start).Seconds(), x)
}

// watch starts the monitor of a cluster no table scenario runs on; its cleanup checks what the
// monitor saw and deletes the cluster, before the cleanups registered earlier (a plane's) run.
func (s *scenario) watch(c *framework.Cluster) {
	s.c = c
	s.watcher = conformance.Watch(s.ctx, c, conformance.Options{Interval: 50 * time.Millisecond, OnChange: s.timeline})
	s.t.Cleanup(func() {
		report := s.watcher.Stop()
		report.Scenario = s.res.name
		s.check(report, nil)
		s.deleteCluster()
	})
}

// deleteCluster deletes s.c through whichever plane serves it now, and fails the test if that
// leaves anything behind.
func (s *scenario) deleteCluster() {
	s.logf("deleting the cluster")
	if err := s.c.Delete(context.Background(), 5*time.Minute); err != nil {
		s.t.Errorf("deleting cluster %s: %v", s.c.Name, err)
	}
}

func (s *scenario) logf(format string, args ...any) {
	fmt.Fprintf(s.out, "  %7.1fs  "+format+"\n", append([]any{time.Since(s.start).Seconds()}, args...)...)
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

// wait runs one wait of the kit on s.c, for TestMakeRun's steps, and fails the test when it fails.
func (s *scenario) wait(what string, timeout time.Duration, cond func(context.Context) (bool, string, error)) {
	s.t.Helper()
	s.logf("waiting for %s", what)
	err := clusterops.WaitFor(s.ctx, timeout, func(p string) { s.logf("%s", p) }, cond)
	s.recordRemediation()
	s.g.Expect(err).NotTo(HaveOccurred(), what)
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
