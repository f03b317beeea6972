//go:build bench

package stubnodes

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/controllers"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/pkg/skew"
	"github.com/capdmp/capdmp/test/framework"
	"github.com/capdmp/capdmp/test/stubnode"
)

// The bench driver (`make bench`, docs/benchmarks.md) compares systems in one run on the suite's
// API servers, engine and stub node images, and prints each figure as a ratio: the machine is
// shared, and only figures taken side by side compare. It times and never fails on time; it fails
// when a system does not do what it is timed doing.

// benchConcurrency is the shipped concurrency both systems run at: the manager's controllers
// reconcile this many objects at once (--dockermachinepoolmachine-concurrency, and the pools' and
// Cluster API's as many), and the baseline starts as many bootstraps at once. The baseline creates
// as many containers at once as a pool does: controllers.DefaultMaxConcurrentCreates, which
// runManager leaves as it ships.
const benchConcurrency = controllers.DefaultMachineConcurrency

// benchPoll is how often the driver looks for a milestone.
const benchPoll = 100 * time.Millisecond

// benchLabel marks the baseline's containers.
const benchLabel = "test.capdmp.dev/bench"

// comparison is one figure measured for several systems in the same run, in interleaved pairs.
type comparison struct {
	Figure string `json:"figure"`
	// Pairs is how many times each system was measured, one after the other.
	Pairs int `json:"pairs"`
	// Seconds by system, the median of its samples: capdmp, engine (the Docker engine alone:
	// the physical limit here).
	Seconds map[string]float64 `json:"seconds"`
	// Samples by system, in seconds, in the order of the pairs.
	Samples map[string][]float64 `json:"samples"`
	// Ratio is the median over the pairs of capdmp's seconds over the engine's, when both were
	// measured; RatioMin and RatioMax are the pairs' spread, Ratios each pair's.
	Ratio    float64   `json:"capdmpOverEngine,omitempty"`
	RatioMin float64   `json:"capdmpOverEngineMin,omitempty"`
	RatioMax float64   `json:"capdmpOverEngineMax,omitempty"`
	Ratios   []float64 `json:"capdmpOverEngineByPair,omitempty"`
}

// hopComparison is one figure's nodes split by hop (framework.NodeTimeline), for each system: the
// quantiles of each hop over every node of every pair.
type hopComparison struct {
	Figure string                                    `json:"figure"`
	Hops   map[string]map[string]framework.Quantiles `json:"hopsBySystem"`
	// CPUSeconds and CPUShare are how busy the machine was during each system's runs (the
	// median over the pairs): CPU time on all cores, and its share of all the cores' time.
	CPUSeconds map[string]float64 `json:"cpuSecondsBySystem"`
	CPUShare   map[string]float64 `json:"cpuShareBySystem"`
	// CPUSecondsByPart splits CPUSeconds by where it was spent (framework.CPUParts), each part
	// the median over the pairs.
	CPUSecondsByPart map[string]map[string]float64 `json:"cpuSecondsByPartBySystem"`
}

// latencies are the gate's re-open latencies over the trials.
type latencies struct {
	Trials int `json:"trials"`
	// ToCreate and ToStart are from the control plane's status.versions reaching the target to
	// the engine's create and start events of the first container of the target.
	ToCreate framework.Quantiles `json:"toCreate"`
	ToStart  framework.Quantiles `json:"toStart"`
}

// costFigure is one line of the Go benchmarks of a pool's cost at scale (controllers).
type costFigure struct {
	Benchmark string             `json:"benchmark"`
	Values    map[string]float64 `json:"values"`
}

type benchResults struct {
	Date              string `json:"date"`
	Commit            string `json:"commit"`
	CPUs              int    `json:"cpus"`
	Concurrency       int    `json:"bootstrapConcurrency"`
	CreateConcurrency int    `json:"createConcurrency"`
	// Pairs is how many interleaved pairs each comparison ran.
	Pairs       int          `json:"pairs"`
	Comparisons []comparison `json:"comparisons"`
	// Hops split the scale-ups' node times by hop, over every node of every pair.
	Hops       []hopComparison `json:"hops,omitempty"`
	GateReopen *latencies      `json:"gateReopen,omitempty"`
	ScaleCost  []costFigure    `json:"scaleCost,omitempty"`
	Notes      []string        `json:"notes"`
}

// TestBench runs every comparison, prints one line per figure and writes
// _artifacts/bench/results.json and chart.svg. BENCH_SIZES (default 20,50), BENCH_ROLLOUT (20),
// BENCH_PAIRS (5: interleaved pairs per comparison), BENCH_TRIALS (20) and BENCH_COST (1: run the
// Go benchmarks of controllers) size it.
func TestBench(t *testing.T) {
	g := NewWithT(t)
	pairs := framework.BenchSetting("BENCH_PAIRS", 5)
	g.Expect(pairs).To(BeNumerically(">=", 1), "BENCH_PAIRS")
	results := benchResults{
		Date: time.Now().UTC().Format(time.RFC3339), Commit: framework.Commit(), CPUs: runtime.NumCPU(),
		Concurrency: benchConcurrency, CreateConcurrency: controllers.DefaultMaxConcurrentCreates, Pairs: pairs,
		Notes: []string{
			"upstream CAPD's DockerMachinePool is not measured on the stub tier: its DockerMachine needs a DockerCluster, " +
				"whose load balancer forwards to control-plane containers, and its nodes join over kind's network, " +
				"while the stub tier's workload API server listens on loopback with a contract-level control plane",
		},
	}
	// CABPK's default token TTL: the suite's 20 s would rotate the data during a run.
	withManager(t, managerConfig{containerSyncPeriod: defaultManager.containerSyncPeriod, tokenTTL: 15 * time.Minute, workers: benchConcurrency})

	sizes := []int{20, 50}
	if s := os.Getenv("BENCH_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			g.Expect(err).ToNot(HaveOccurred(), "BENCH_SIZES")
			sizes = append(sizes, n)
		}
	}
	rollout := framework.BenchSetting("BENCH_ROLLOUT", 20)
	for _, n := range sizes {
		t.Run(fmt.Sprintf("scale-up-%d", n), func(t *testing.T) {
			comparisons, hops := benchScaleUp(t, n, n == rollout, pairs)
			results.Comparisons = append(results.Comparisons, comparisons...)
			results.Hops = append(results.Hops, hops)
		})
	}
	t.Run("gate-reopen", func(t *testing.T) {
		results.GateReopen = benchGateReopen(t, framework.BenchSetting("BENCH_TRIALS", 20))
	})
	if framework.BenchSetting("BENCH_COST", 1) == 1 {
		t.Run("scale-cost", func(t *testing.T) { results.ScaleCost = benchScaleCost(t) })
	}
	writeBenchResults(t, results)
}

// milestones records when conditions first held, from a start; watchPool's polls, one after the
// other, fill it.
type milestones struct {
	start time.Time
	times map[string]time.Duration
}

func newMilestones() *milestones {
	return &milestones{start: time.Now(), times: map[string]time.Duration{}}
}

func (m *milestones) reached(name string) {
	if _, ok := m.times[name]; !ok {
		m.times[name] = time.Since(m.start)
	}
}

// at is when name was reached, 0 if it was not.
func (m *milestones) at(name string) time.Duration { return m.times[name] }

// Milestones of a scale-up or rollout.
const (
	containersRunning = "containers running"
	nodesRegistered   = "Nodes registered"
	poolReady         = "MachinePool ready"
)

// samples are the figures of interleaved pairs, by figure in the order first measured.
type samples struct {
	figures []string
	capdmp  map[string][]time.Duration
	engine  map[string][]time.Duration
	// hops are each system's node hops (framework.NodeTimeline), over the pairs, by hop.
	hops map[string]map[string][]time.Duration
	// cpuBusy and cpuShare are how busy the machine was during each system's runs, over the pairs.
	cpuBusy  map[string][]time.Duration
	cpuShare map[string][]float64
	// cpuParts split cpuBusy by part, over the pairs.
	cpuParts map[string]map[string][]time.Duration
}

// addCPU adds how busy the machine was during one system's run, and where.
func (s *samples) addCPU(system string, busy time.Duration, share float64, parts map[string]time.Duration) {
	if s.cpuBusy == nil {
		s.cpuBusy, s.cpuShare, s.cpuParts = map[string][]time.Duration{}, map[string][]float64{}, map[string]map[string][]time.Duration{}
	}
	s.cpuBusy[system] = append(s.cpuBusy[system], busy)
	s.cpuShare[system] = append(s.cpuShare[system], share)
	if s.cpuParts[system] == nil {
		s.cpuParts[system] = map[string][]time.Duration{}
	}
	for part, d := range parts {
		s.cpuParts[system][part] = append(s.cpuParts[system][part], d)
	}
}

// addHops adds the node hops of one system's run.
func (s *samples) addHops(system string, hops map[string][]time.Duration) {
	if s.hops == nil {
		s.hops = map[string]map[string][]time.Duration{}
	}
	if s.hops[system] == nil {
		s.hops[system] = map[string][]time.Duration{}
	}
	for hop, ds := range hops {
		s.hops[system][hop] = append(s.hops[system][hop], ds...)
	}
}

func (s *samples) add(figure string, capdmp, engine time.Duration) {
	if s.capdmp == nil {
		s.capdmp, s.engine = map[string][]time.Duration{}, map[string][]time.Duration{}
	}
	if _, ok := s.capdmp[figure]; !ok {
		s.figures = append(s.figures, figure)
	}
	s.capdmp[figure] = append(s.capdmp[figure], capdmp)
	s.engine[figure] = append(s.engine[figure], engine)
}

// benchScaleUp runs pairs rounds, each on a cluster of its own: a CAPDMP pool scales from 0 to n
// and the engine alone runs n nodes with the same image and bootstrap data; with rollout, both
// then replace their n nodes with nodes of the next version, with maxSurge 1 and then 5. In each
// figure the two systems run one after the other, and which goes first alternates from one round
// to the next, so that neither is always measured on a machine the other just warmed or loaded.
func benchScaleUp(t *testing.T, n int, rollout bool, pairs int) ([]comparison, hopComparison) {
	t.Helper()
	var all samples
	for p := range pairs {
		t.Run(fmt.Sprintf("pair-%d", p), func(t *testing.T) { benchScaleUpPair(t, n, rollout, p%2 == 1, &all) })
	}
	out := make([]comparison, 0, len(all.figures))
	for _, f := range all.figures {
		out = append(out, compare(f, all.capdmp[f], all.engine[f]))
	}
	hops := compareHops(fmt.Sprintf("scale 0->%d", n), all.hops)
	hops.CPUSeconds, hops.CPUShare = map[string]float64{}, map[string]float64{}
	for _, system := range []string{"capdmp", "engine"} {
		hops.CPUSeconds[system], hops.CPUShare[system] = median(secondsOf(all.cpuBusy[system])), median(all.cpuShare[system])
	}
	fmt.Printf("bench: %-62s capdmp %6.1f cpu-s (%3.0f%% of the cores)  engine %6.1f cpu-s (%3.0f%% of the cores)  median of %d\n",
		fmt.Sprintf("scale 0->%d: the machine's CPU busy", n), hops.CPUSeconds["capdmp"], 100*hops.CPUShare["capdmp"],
		hops.CPUSeconds["engine"], 100*hops.CPUShare["engine"], len(all.cpuBusy["capdmp"]))
	hops.CPUSecondsByPart = map[string]map[string]float64{}
	for system, byPart := range all.cpuParts {
		hops.CPUSecondsByPart[system] = map[string]float64{}
		for part, ds := range byPart {
			hops.CPUSecondsByPart[system][part] = median(secondsOf(ds))
		}
	}
	for _, part := range framework.CPUParts() {
		figure := fmt.Sprintf("scale 0->%d: CPU in %s", n, part)
		// Only the containers' part can be unread (an engine whose cgroup this bench does not
		// know); a process part that is missing had no process, which is zero.
		_, capdmpOK := hops.CPUSecondsByPart["capdmp"][part]
		_, engineOK := hops.CPUSecondsByPart["engine"][part]
		if part == framework.CPUPartContainers && (!capdmpOK || !engineOK) {
			fmt.Printf("bench: %-62s not measured (no cgroup of the engine's containers that this bench reads)\n", figure)
			continue
		}
		fmt.Printf("bench: %-62s capdmp %6.1f cpu-s  engine %6.1f cpu-s  median of %d\n",
			figure, hops.CPUSecondsByPart["capdmp"][part], hops.CPUSecondsByPart["engine"][part], len(all.cpuBusy["capdmp"]))
	}
	return out, hops
}

// compareHops prints each hop's median and p95 over the nodes, CAPDMP's beside the engine's.
func compareHops(figure string, hops map[string]map[string][]time.Duration) hopComparison {
	c := hopComparison{Figure: figure, Hops: map[string]map[string]framework.Quantiles{}}
	for system, byHop := range hops {
		c.Hops[system] = map[string]framework.Quantiles{}
		for hop, ds := range byHop {
			c.Hops[system][hop] = framework.QuantilesOf(ds)
		}
	}
	for _, hop := range framework.HopNames() {
		capdmp, engine := c.Hops["capdmp"][hop], c.Hops["engine"][hop]
		fmt.Printf("bench: %-62s capdmp median %6.0fms p95 %6.0fms  engine median %6.0fms p95 %6.0fms  (%d nodes)\n",
			figure+" hop: "+hop, capdmp.MedianMs, capdmp.P95Ms, engine.MedianMs, engine.P95Ms, len(capdmp.AllMs))
	}
	return c
}

// benchScaleUpPair is one round of benchScaleUp; engineFirst runs the engine alone first in
// each figure.
func benchScaleUpPair(t *testing.T, n int, rollout, engineFirst bool, all *samples) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 0})
	data := waitForBootstrapData(t, c)
	baseline := framework.EngineBaseline{
		Engine: engine, Network: container.HostNetwork, Concurrency: benchConcurrency,
		CreateConcurrency: controllers.DefaultMaxConcurrentCreates, Labels: map[string]string{benchLabel: "engine"},
	}
	removeBaseline := func() { g.Expect(baseline.Remove(ctx, testEnv.Workload.Client)).To(Succeed()) }
	t.Cleanup(removeBaseline)
	// inOrder runs the two systems of a figure in the round's order.
	inOrder := func(capdmp, engine func()) {
		if engineFirst {
			engine()
			capdmp()
			return
		}
		capdmp()
		engine()
	}

	old := framework.NodeNames(n)
	var engineScale framework.Milestones
	capdmpScale := newMilestones()
	// hopsOf follows the nodes of the containers with labels through run, and adds their hops to
	// system's.
	hopsOf := func(system string, labels map[string]string, run func()) {
		stop := framework.WatchNodeTimeline(ctx, benchEvents(t), testEnv.Workload.Client, labels, benchPoll)
		run()
		timeline, err := stop()
		g.Expect(err).ToNot(HaveOccurred(), "%s: the nodes' timeline", system)
		hops, err := timeline.Hops()
		g.Expect(err).ToNot(HaveOccurred(), "%s: the nodes' hops", system)
		all.addHops(system, hops)
		busy, share := timeline.CPU()
		all.addCPU(system, busy, share, timeline.CPUByPart())
	}
	inOrder(func() {
		hopsOf("capdmp", map[string]string{infrav1.ClusterNameLabel: c.name}, func() {
			capdmpScale = newMilestones()
			c.setReplicas(int32(n))
			watchPool(t, c, n, v131, capdmpScale, 5*time.Minute)
		})
	}, func() {
		hopsOf("engine", baseline.Labels, func() {
			registered := watchEngineNodes(t, old, v131)
			var err error
			engineScale, err = baseline.MakeNodes(ctx, data, stubnode.Image(v131), old, nil)
			g.Expect(err).ToNot(HaveOccurred(), "the engine alone")
			engineScale.Joined = registered()
		})
	})
	scale := fmt.Sprintf("scale 0->%d", n)
	all.add(scale+": containers running", capdmpScale.at(containersRunning), engineScale.Running)
	all.add(scale+": Nodes registered", capdmpScale.at(nodesRegistered), engineScale.Joined)
	all.add(scale+": MachinePool ready", capdmpScale.at(poolReady), 0)
	if rollout {
		// The default strategy (one at a time), then maxSurge as many as a pool creates at once.
		// The engine replaces at the same pace: no more new nodes ahead of the removals than the
		// pool's maxSurge.
		for _, step := range []struct {
			version  string
			maxSurge *intstr.IntOrString
		}{{version: v132}, {version: v133, maxSurge: ptr.To(intstr.FromInt32(controllers.DefaultMaxConcurrentCreates))}} {
			next := framework.NodeNames(n)
			baseline.MaxSurge = 1
			if step.maxSurge != nil {
				baseline.MaxSurge = step.maxSurge.IntValue()
			}
			var engineRollout framework.Milestones
			capdmpRollout := newMilestones()
			inOrder(func() {
				pool := &infrav1.DockerMachinePool{}
				c.update(c.key(), pool, func() { pool.Spec.Strategy.RollingUpdate.MaxSurge = step.maxSurge })
				capdmpRollout = newMilestones()
				c.setControlPlaneStatus(step.version)
				mp := &clusterv1.MachinePool{}
				c.update(c.key(), mp, func() { mp.Spec.Template.Spec.Version = step.version })
				watchPool(t, c, n, step.version, capdmpRollout, 10*time.Minute)
			}, func() {
				registered := watchEngineNodes(t, next, step.version)
				var err error
				engineRollout, err = baseline.MakeNodes(ctx, data, stubnode.Image(step.version), next, func(i int) error {
					return baseline.RemoveNode(ctx, testEnv.Workload.Client, old[i])
				})
				g.Expect(err).ToNot(HaveOccurred(), "the engine alone, rollout to %s", step.version)
				engineRollout.Joined = registered()
			})
			old = next
			what := fmt.Sprintf("rollout of %d, maxSurge 1 (default)", n)
			if step.maxSurge != nil {
				what = fmt.Sprintf("rollout of %d, maxSurge %s", n, step.maxSurge)
			}
			all.add(what+": Nodes registered", capdmpRollout.at(nodesRegistered), engineRollout.Joined)
			all.add(what+": old nodes removed", capdmpRollout.at(poolReady), engineRollout.Done)
		}
	}
	removeBaseline()
	// Scaled down before the Cluster goes, so that its deletion fits the cleanup's wait.
	c.setReplicas(0)
	g.Eventually(func(g Gomega) { g.Expect(c.containers()).To(BeEmpty()) }, 5*time.Minute, time.Second).Should(Succeed())
	c.cleanup()
}

// benchEvents is a client of the suite's engine for the bench's own watch of its events.
func benchEvents(t *testing.T) *dockerclient.Client {
	t.Helper()
	c, err := dockerclient.New(dockerclient.FromEnv)
	NewWithT(t).Expect(err).ToNot(HaveOccurred())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// watchEngineNodes looks, as watchPool does for CAPDMP's (every benchPoll, from now), for the
// moment every one of the engine's nodes has its Node of version registered; the returned
// function waits for it and returns how long it took. The engine's own end of a bootstrap is
// later: the stub kubeadm registers the Node before its last steps.
func watchEngineNodes(t *testing.T, names []string, version string) func() time.Duration {
	t.Helper()
	start := time.Now()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var at time.Duration
	done := make(chan error, 1)
	go func() {
		for {
			list := &corev1.NodeList{}
			if err := testEnv.Workload.Client.List(context.Background(), list); err != nil {
				done <- err
				return
			}
			registered := 0
			for _, node := range list.Items {
				if want[node.Name] && node.Status.NodeInfo.KubeletVersion == version {
					registered++
				}
			}
			if registered == len(names) {
				at = time.Since(start)
				done <- nil
				return
			}
			if time.Since(start) > 10*time.Minute {
				done <- fmt.Errorf("%d of the engine's %d Nodes of %s registered in 10m", registered, len(names), version)
				return
			}
			time.Sleep(benchPoll)
		}
	}()
	return func() time.Duration {
		NewWithT(t).Expect(<-done).To(Succeed())
		return at
	}
}

// compare is a figure of CAPDMP beside the engine's over interleaved pairs: each system's median,
// and the median and spread of the pairs' ratios. An engine time of 0 is not measured.
func compare(figure string, capdmp, engine []time.Duration) comparison {
	c := comparison{Figure: figure, Pairs: len(capdmp), Seconds: map[string]float64{}, Samples: map[string][]float64{}}
	for i, d := range capdmp {
		c.Samples["capdmp"] = append(c.Samples["capdmp"], d.Seconds())
		if i < len(engine) && engine[i] > 0 {
			c.Samples["engine"] = append(c.Samples["engine"], engine[i].Seconds())
			c.Ratios = append(c.Ratios, d.Seconds()/engine[i].Seconds())
		}
	}
	c.Seconds["capdmp"] = median(c.Samples["capdmp"])
	if len(c.Ratios) == len(capdmp) && len(c.Ratios) > 0 {
		c.Seconds["engine"] = median(c.Samples["engine"])
		c.Ratio = median(c.Ratios)
		c.RatioMin, c.RatioMax = slices.Min(c.Ratios), slices.Max(c.Ratios)
	} else {
		delete(c.Samples, "engine")
		c.Ratios = nil
	}
	printComparison(c)
	return c
}

func secondsOf(ds []time.Duration) []float64 {
	out := make([]float64, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.Seconds())
	}
	return out
}

// median is the middle value, or the mean of the two middle values.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// waitForBootstrapData waits for the MachinePool's bootstrap data and reads it.
func waitForBootstrapData(t *testing.T, c *testCluster) *bootstrap.Data {
	t.Helper()
	var data *bootstrap.Data
	NewWithT(t).Eventually(func(g Gomega) {
		var err error
		data, err = c.conformanceCluster().CurrentBootstrapData(context.Background())
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(data).ToNot(BeNil())
	}, time.Minute, benchPoll).Should(Succeed())
	return data
}

// watchPool records the milestones of the pool reaching n running containers of version, their n
// Nodes registered, and the MachinePool ready with n and nothing else (for a rollout: the old
// containers removed).
func watchPool(t *testing.T, c *testCluster, n int, version string, m *milestones, timeout time.Duration) {
	t.Helper()
	label := versionLabel(NewWithT(t), version)
	NewWithT(t).Eventually(func(g Gomega) {
		cs := c.containers()
		running := 0
		for _, ct := range cs {
			if ct.Running && ct.Labels[infrav1.KubernetesVersionLabel] == label {
				running++
			}
		}
		if running >= n {
			m.reached(containersRunning)
		}
		registered := 0
		for _, node := range c.nodes() {
			if node.Status.NodeInfo.KubeletVersion == version {
				registered++
			}
		}
		if registered >= n {
			m.reached(nodesRegistered)
		}
		mp := c.machinePool()
		if len(cs) == n && running == n && ptr.Deref(mp.Status.ReadyReplicas, 0) == int32(n) && len(mp.Status.NodeRefs) == n {
			m.reached(poolReady)
		}
		g.Expect(m.at(poolReady)).ToNot(BeZero())
		g.Expect(m.at(nodesRegistered)).ToNot(BeZero())
	}, timeout, benchPoll).Should(Succeed())
}

func versionLabel(g Gomega, version string) string {
	l, err := skew.VersionLabelValue(version)
	g.Expect(err).ToNot(HaveOccurred())
	return l
}

// printComparison prints the medians, and the median ratio with the pairs' spread.
func printComparison(c comparison) {
	line := fmt.Sprintf("bench: %-62s capdmp %7.2fs", c.Figure, c.Seconds["capdmp"])
	if e, ok := c.Seconds["engine"]; ok {
		line += fmt.Sprintf("  engine %7.2fs  capdmp/engine %.2f (%.2f-%.2f)", e, c.Ratio, c.RatioMin, c.RatioMax)
	}
	line += fmt.Sprintf("  median of %d", c.Pairs)
	fmt.Println(line)
}

// benchGateReopen measures the gate's re-open latency over trials, each on a cluster of its own
// whose pool waits for its control plane, with a container sync period longer than the run: only
// the watch on the control plane can re-open the gate.
func benchGateReopen(t *testing.T, trials int) *latencies {
	t.Helper()
	withManager(t, managerConfig{containerSyncPeriod: time.Hour, tokenTTL: 15 * time.Minute})
	var toCreate, toStart []time.Duration
	for i := range trials {
		t.Run(fmt.Sprintf("trial-%02d", i), func(t *testing.T) {
			create, start := gateReopenTrial(t)
			toCreate, toStart = append(toCreate, create), append(toStart, start)
		})
	}
	l := &latencies{Trials: len(toCreate), ToCreate: framework.QuantilesOf(toCreate), ToStart: framework.QuantilesOf(toStart)}
	fmt.Printf("bench: %-62s median %6.0fms  p95 %6.0fms  max %6.0fms  (%d trials)\n", "gate re-open: status.versions -> first create", l.ToCreate.MedianMs, l.ToCreate.P95Ms, l.ToCreate.MaxMs, l.Trials)
	fmt.Printf("bench: %-62s median %6.0fms  p95 %6.0fms  max %6.0fms  (%d trials)\n", "gate re-open: status.versions -> first start", l.ToStart.MedianMs, l.ToStart.P95Ms, l.ToStart.MaxMs, l.Trials)
	return l
}

func gateReopenTrial(t *testing.T) (toCreate, toStart time.Duration) {
	t.Helper()
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 1})
	c.waitForReady(1, v131, time.Minute)
	mp := &clusterv1.MachinePool{}
	c.update(c.key(), mp, func() { mp.Spec.Template.Spec.Version = v132 })
	g.Eventually(func() string { return c.pool().Status.VersionGate.WaitingReason }, 30*time.Second, benchPoll).Should(Equal(string(skew.ControlPlaneOlder)))

	changes, errs := engine.Watch(ctx, map[string]string{infrav1.ClusterNameLabel: c.name, infrav1.KubernetesVersionLabel: versionLabel(g, v132)}, time.Now())
	// The engine's event stream is set up when its first byte comes; give it a moment.
	time.Sleep(200 * time.Millisecond)
	reached := time.Now()
	c.setControlPlaneStatus(v132)
	deadline := time.After(30 * time.Second)
	for toStart == 0 {
		select {
		case e := <-changes:
			switch {
			case e.Action == "create" && toCreate == 0:
				toCreate = e.At.Sub(reached)
			case e.Action == "start" && toStart == 0:
				toStart = e.At.Sub(reached)
			}
		case err := <-errs:
			t.Fatalf("watching the engine: %v", err)
		case <-deadline:
			t.Fatalf("no container of %s started within 30s of the control plane reaching it", v132)
		}
	}
	t.Logf("status.versions -> create %s, -> start %s", toCreate.Round(time.Millisecond), toStart.Round(time.Millisecond))
	c.cleanup()
	return toCreate, toStart
}

// benchLine is a line of `go test -bench` output: name, iterations, then value-unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// benchScaleCost runs the Go benchmarks of a pool's cost at scale (controllers/scale_bench_test.go),
// of a manager's memory holding 1000 instances (main_bench_test.go) and of a no-change reconcile
// of 1000 on the informer cache (main_nochange_bench_test.go), and reads their figures.
func benchScaleCost(t *testing.T) []costFigure {
	t.Helper()
	var figures []costFigure
	for _, run := range []struct{ pkg, bench, benchtime string }{
		{pkg: "./controllers/", bench: "BenchmarkNoChangeReconcile|BenchmarkPoolMemory1000", benchtime: "20x"},
		{pkg: ".", bench: "BenchmarkManagerMemory1000", benchtime: "1x"},
		{pkg: ".", bench: "BenchmarkPoolReconcileNoChange", benchtime: "20x"},
	} {
		figures = append(figures, runGoBenchmarks(t, run.pkg, run.bench, run.benchtime)...)
	}
	return figures
}

// runGoBenchmarks runs the benchmarks of pkg that match bench and reads their figures.
func runGoBenchmarks(t *testing.T, pkg, bench, benchtime string) []costFigure {
	t.Helper()
	g := NewWithT(t)
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", bench, "-benchtime", benchtime, pkg)
	cmd.Dir = testenv.RepoRoot()
	out, err := cmd.CombinedOutput()
	g.Expect(err).ToNot(HaveOccurred(), "%s", out)
	var figures []costFigure
	for _, line := range strings.Split(string(out), "\n") {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		f := costFigure{Benchmark: m[1], Values: map[string]float64{}}
		fields := strings.Fields(m[2])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			g.Expect(err).ToNot(HaveOccurred(), line)
			f.Values[fields[i+1]] = v
		}
		fmt.Printf("bench: %-62s %s\n", f.Benchmark, m[2])
		figures = append(figures, f)
	}
	g.Expect(figures).ToNot(BeEmpty(), "no benchmark lines of %s in:\n%s", pkg, out)
	return figures
}

// writeBenchResults writes r. With BENCH_APPEND=1 (a run split by -run into several), the
// comparisons of the results.json already there that r does not have come first, so that the file
// and the chart hold every part, with both parts' commits where they differ; the earlier part must
// have run as many pairs.
func writeBenchResults(t *testing.T, r benchResults) {
	t.Helper()
	g := NewWithT(t)
	if framework.BenchSetting("BENCH_APPEND", 0) == 1 {
		raw, err := os.ReadFile(filepath.Join(framework.BenchDir(), "results.json"))
		g.Expect(err).ToNot(HaveOccurred(), "BENCH_APPEND=1: reading the earlier part")
		var earlier benchResults
		g.Expect(json.Unmarshal(raw, &earlier)).To(Succeed(), "BENCH_APPEND=1: reading the earlier part")
		g.Expect(earlier.Pairs).To(Equal(r.Pairs), "BENCH_APPEND=1: the earlier part ran other pairs")
		measured := map[string]bool{}
		for _, c := range r.Comparisons {
			measured[c.Figure] = true
		}
		var kept []comparison
		for _, c := range earlier.Comparisons {
			if !measured[c.Figure] {
				kept = append(kept, c)
			}
		}
		r.Comparisons = append(kept, r.Comparisons...)
		r.Date = earlier.Date
		if earlier.Commit != r.Commit {
			r.Commit = earlier.Commit + " and " + r.Commit
		}
		r.GateReopen = cmp.Or(r.GateReopen, earlier.GateReopen)
		if r.ScaleCost == nil {
			r.ScaleCost = earlier.ScaleCost
		}
	}
	out, err := framework.BenchJSON(r)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(framework.WriteBenchFile("results.json", out)).To(Succeed())
	g.Expect(framework.WriteBenchFile("chart.svg", benchChart(r))).To(Succeed())
	fmt.Printf("bench: wrote %s and chart.svg\n", filepath.Join(framework.BenchDir(), "results.json"))
}

// benchChart draws the comparisons as horizontal bars, each system's median seconds, CAPDMP's
// beside the engine's, each with its median ratio and the pairs' spread.
func benchChart(r benchResults) []byte {
	const (
		left, barHeight, gap, width = 360, 14, 12, 380
	)
	longest := 0.0
	for _, c := range r.Comparisons {
		for _, s := range c.Seconds {
			longest = max(longest, s)
		}
	}
	if longest == 0 {
		longest = 1
	}
	rowHeight := 2*barHeight + gap
	height := 60 + len(r.Comparisons)*rowHeight
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", left+width+140, height)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14">CAPDMP beside the Docker engine alone (median seconds of %d pairs, %s, %d CPUs, commit %s)</text>`+"\n", r.Pairs, r.Date[:10], r.CPUs, r.Commit)
	fmt.Fprintf(&b, `<rect x="10" y="32" width="12" height="12" fill="#326ce5"/><text x="28" y="43">CAPDMP</text><rect x="100" y="32" width="12" height="12" fill="#999"/><text x="118" y="43">engine alone</text>`+"\n")
	for i, c := range r.Comparisons {
		y := 56 + i*rowHeight
		fmt.Fprintf(&b, `<text x="10" y="%d">%s</text>`+"\n", y+barHeight+4, escapeXML(c.Figure))
		for j, system := range []string{"capdmp", "engine"} {
			s, ok := c.Seconds[system]
			if !ok {
				continue
			}
			color := map[string]string{"capdmp": "#326ce5", "engine": "#999"}[system]
			w := int(s / longest * width)
			by := y + j*barHeight
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/><text x="%d" y="%d">%.1f s</text>`+"\n",
				left, by, max(w, 1), barHeight-2, color, left+w+4, by+barHeight-3, s)
		}
		if c.Ratio > 0 {
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%.2fx</text><text x="%d" y="%d" font-size="10">%.2f-%.2f</text>`+"\n",
				left+width+80, y+barHeight, c.Ratio, left+width+80, y+2*barHeight, c.RatioMin, c.RatioMax)
		}
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

func escapeXML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
