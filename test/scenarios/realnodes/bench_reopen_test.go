//go:build e2e_local && bench

package realnodes

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capdv1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/pkg/skew"
	"github.com/capdmp/capdmp/test/framework"
)

// The gate's re-open on real nodes (docs/benchmarks.md, "Gate re-open latency"): the table's
// both-at-once/machinepool-first, BENCH_REAL_TRIALS times, each on a cluster of its own, timed on
// the engine's own events from the destroy of the old control plane's last container (its
// kube-apiserver gone) to the create and start of the pool's first container of the new version.

// reopenRealTrial is one trial's moments, in milliseconds from the destroy of the old control
// plane's last container.
type reopenRealTrial struct {
	Cluster string `json:"cluster"`
	// StatusMs is when the monitor first saw KubeadmControlPlane's status.versions at the target
	// alone (sampled every 50 ms).
	StatusMs float64 `json:"statusMs"`
	// DockerMachineGoneMs and MachineGoneMs are when the old control plane's DockerMachine and
	// Machine were first seen gone (polled every 50 ms): the gate's proof needs both.
	DockerMachineGoneMs float64 `json:"dockerMachineGoneMs"`
	MachineGoneMs       float64 `json:"machineGoneMs"`
	CreateMs            float64 `json:"createMs"`
	StartMs             float64 `json:"startMs"`
	// FromLastOldAPIServerMs is the monitor's figure for the same re-open: from the first sample
	// without an old kube-apiserver to the first with a new pool instance.
	FromLastOldAPIServerMs float64 `json:"fromLastOldAPIServerMs"`
	// BeforeStatus says the pool created before the control plane's status moved: the gate
	// re-opened on the proof that the old machines are gone.
	BeforeStatus bool `json:"beforeStatus"`
}

type reopenRealResults struct {
	Date     string              `json:"date"`
	Commit   string              `json:"commit"`
	From     string              `json:"from"`
	To       string              `json:"to"`
	Parallel string              `json:"trialsAtOnce"`
	ToCreate framework.Quantiles `json:"toCreate"`
	ToStart  framework.Quantiles `json:"toStart"`
	ToStatus framework.Quantiles `json:"toStatus"`
	// ToDockerMachineGone and ToMachineGone: when the old control-plane objects were gone.
	ToDockerMachineGone framework.Quantiles `json:"toDockerMachineGone"`
	ToMachineGone       framework.Quantiles `json:"toMachineGone"`
	Trials              []reopenRealTrial   `json:"trials"`
	Failed              []string            `json:"failedTrials,omitempty"`
	mu                  sync.Mutex
}

// TestBenchReopenReal runs the trials (as many at once as go test's -parallel, make's
// E2E_LOCAL_PARALLEL), prints the median, p95 and max of each hop and writes
// _artifacts/bench/results-reopen-real.json. A pool container of the new version created before
// the old control plane's last container is destroyed fails the trial, as does a violation the
// monitor sees.
func TestBenchReopenReal(t *testing.T) {
	trials := framework.BenchSetting("BENCH_REAL_TRIALS", 10)
	sc, ok := conformance.Lookup("both-at-once/machinepool-first")
	if !ok {
		t.Fatal("the table has no both-at-once/machinepool-first")
	}
	from, err := sc.From(chain)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	to := chain[slices.Index(chain, from)+1]
	results := &reopenRealResults{Date: time.Now().UTC().Format(time.RFC3339), Commit: framework.Commit(), From: from, To: to,
		Parallel: flagValue("test.parallel")}
	t.Run("group", func(t *testing.T) {
		for i := range trials {
			name := fmt.Sprintf("bench-reopen-%02d", i)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				trial := reopenTrial(t, name, sc, from, to)
				results.mu.Lock()
				defer results.mu.Unlock()
				if t.Failed() {
					results.Failed = append(results.Failed, name)
					return
				}
				results.Trials = append(results.Trials, trial)
			})
		}
	})
	var toCreate, toStart, toStatus, toDockerMachineGone, toMachineGone []time.Duration
	for _, tr := range results.Trials {
		toCreate = append(toCreate, msDuration(tr.CreateMs))
		toStart = append(toStart, msDuration(tr.StartMs))
		toStatus = append(toStatus, msDuration(tr.StatusMs))
		toDockerMachineGone = append(toDockerMachineGone, msDuration(tr.DockerMachineGoneMs))
		toMachineGone = append(toMachineGone, msDuration(tr.MachineGoneMs))
	}
	results.ToCreate, results.ToStart, results.ToStatus = framework.QuantilesOf(toCreate), framework.QuantilesOf(toStart), framework.QuantilesOf(toStatus)
	results.ToDockerMachineGone, results.ToMachineGone = framework.QuantilesOf(toDockerMachineGone), framework.QuantilesOf(toMachineGone)
	for _, q := range []struct {
		hop string
		q   framework.Quantiles
	}{
		{"old DockerMachine gone", results.ToDockerMachineGone}, {"old Machine gone", results.ToMachineGone},
		{"first new pool container created", results.ToCreate}, {"first new pool container started", results.ToStart},
		{"KCP status.versions at the target", results.ToStatus},
	} {
		fmt.Printf("bench-real: gate re-open %s->%s, old control plane's last container destroyed -> %-34s median %6.0fms  p95 %6.0fms  max %6.0fms  (%d trials)\n",
			from, to, q.hop, q.q.MedianMs, q.q.P95Ms, q.q.MaxMs, len(results.Trials))
	}
	before := 0
	for _, tr := range results.Trials {
		if tr.BeforeStatus {
			before++
		}
	}
	fmt.Printf("bench-real: gate re-open: %d of %d trials created before KCP's status moved; failed trials: %v\n", before, len(results.Trials), results.Failed)
	out, err := framework.BenchJSON(results)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(framework.WriteBenchFile("results-reopen-real.json", out)).To(Succeed())
}

// reopenTrial runs the scenario on a cluster of its own, recording every change of its
// containers on the engine from before the cluster's objects are written.
func reopenTrial(t *testing.T, name string, sc conformance.Scenario, from, to string) reopenRealTrial {
	t.Helper()
	sc.Shape.PoolReplicas = 1
	s := startScenario(t, name)
	since := time.Now()
	c := s.createCluster(framework.ClusterSpec{ControlPlaneVersion: from, ControlPlaneReplicas: int(sc.Shape.ControlPlaneReplicas), PoolVersion: from, PoolReplicas: int(sc.Shape.PoolReplicas)})
	ctx, cancel := context.WithCancel(s.ctx)
	var (
		mu        sync.Mutex
		events    []container.Event
		streamErr error
	)
	changes, errs := c.Engine.Watch(ctx, map[string]string{container.KindClusterLabel: c.Name}, since)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for e := range changes {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
		if err := <-errs; err != nil && ctx.Err() == nil {
			mu.Lock()
			streamErr = err
			mu.Unlock()
		}
	}()
	controlPlaneGone := watchControlPlaneDeletions(ctx, c)
	report, runErr := s.run(sc, c)
	s.check(report, runErr)
	cancel()
	<-watched
	s.g.Expect(streamErr).NotTo(HaveOccurred(), "the engine's event stream ended: a trial that cannot see the destroy proves nothing")
	gone, err := controlPlaneGone()
	s.g.Expect(err).NotTo(HaveOccurred(), "watching the control plane's DockerMachines and Machines")

	newLabel, err := skew.VersionLabelValue(to)
	s.g.Expect(err).NotTo(HaveOccurred())
	var lastOldDestroy, firstCreate, firstStart time.Time
	for _, e := range events {
		switch role := e.Attributes[container.KindRoleLabel]; {
		case role == container.KindControlPlaneRole && e.Action == "destroy" && !strings.HasSuffix(e.Attributes["image"], ":"+to):
			if e.At.After(lastOldDestroy) {
				lastOldDestroy = e.At
			}
		case role == container.KindWorkerRole && e.Attributes[infrav1.KubernetesVersionLabel] == newLabel:
			switch {
			case e.Action == "create" && (firstCreate.IsZero() || e.At.Before(firstCreate)):
				firstCreate = e.At
			case e.Action == "start" && (firstStart.IsZero() || e.At.Before(firstStart)):
				firstStart = e.At
			}
		}
	}
	s.g.Expect(lastOldDestroy.IsZero()).To(BeFalse(), "no destroy of a %s control-plane container in %d engine events", from, len(events))
	s.g.Expect(firstCreate.IsZero() || firstStart.IsZero()).To(BeFalse(), "no %s pool container created and started in %d engine events", to, len(events))
	// Never early: no new kubelet while an old kube-apiserver's container is there.
	s.g.Expect(firstCreate).To(BeTemporally(">", lastOldDestroy), "a %s pool container was created before the old control plane's last container was destroyed", to)

	// The upgrade of a control plane of one replaces one Machine: the old one is what went.
	s.g.Expect(gone.dockerMachines).To(HaveLen(1), "control-plane DockerMachines deleted in the trial")
	s.g.Expect(gone.machines).To(HaveLen(1), "control-plane Machines deleted in the trial")
	trial := reopenRealTrial{
		Cluster: c.Name, CreateMs: msSince(firstCreate, lastOldDestroy), StartMs: msSince(firstStart, lastOldDestroy), StatusMs: -1,
		DockerMachineGoneMs: msSince(gone.dockerMachines[0], lastOldDestroy), MachineGoneMs: msSince(gone.machines[0], lastOldDestroy),
	}
	for _, x := range report.Timeline {
		if len(x.ControlPlaneStatus) > 0 && x.ControlPlaneStatus[0] == to {
			trial.StatusMs = msSince(x.At, lastOldDestroy)
			trial.BeforeStatus = firstCreate.Before(x.At)
			break
		}
	}
	s.g.Expect(trial.StatusMs).NotTo(Equal(-1.0), "the monitor never saw KCP's status.versions at %s alone", to)
	for _, l := range report.Latencies {
		if l.Target == to {
			trial.FromLastOldAPIServerMs = float64(l.FromAPIServers.Microseconds()) / 1000
		}
	}
	s.logf("gate re-open from the old control plane's last container destroyed: DockerMachine gone %.0fms, Machine gone %.0fms, KCP status %.0fms, create %.0fms, start %.0fms (monitor: %.0fms from the last old kube-apiserver)",
		trial.DockerMachineGoneMs, trial.MachineGoneMs, trial.StatusMs, trial.CreateMs, trial.StartMs, trial.FromLastOldAPIServerMs)
	return trial
}

// controlPlaneDeletions are when each control-plane DockerMachine and Machine that went during a
// trial was first seen gone.
type controlPlaneDeletions struct {
	dockerMachines, machines []time.Time
}

// watchControlPlaneDeletions lists the cluster's control-plane DockerMachines and Machines every
// 50 ms until ctx ends; the function it returns waits for that and says when each one seen was
// first missing. A failed list ends the watch with its error: gaps would move the figures.
func watchControlPlaneDeletions(ctx context.Context, c *framework.Cluster) func() (controlPlaneDeletions, error) {
	ofControlPlane := []client.ListOption{client.InNamespace(c.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: c.Name}, client.HasLabels{clusterv1.MachineControlPlaneLabel}}
	lastSeen := map[string]map[string]bool{"DockerMachine": {}, "Machine": {}}
	goneAt := map[string]map[string]time.Time{"DockerMachine": {}, "Machine": {}}
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			dms, ms := &capdv1.DockerMachineList{}, &clusterv1.MachineList{}
			for kind, list := range map[string]client.ObjectList{"DockerMachine": dms, "Machine": ms} {
				if listErr := c.Management.List(ctx, list, ofControlPlane...); listErr != nil {
					if ctx.Err() == nil {
						err = fmt.Errorf("listing control-plane %ss: %w", kind, listErr)
					}
					return
				}
			}
			now, present := time.Now(), map[string]map[string]bool{"DockerMachine": {}, "Machine": {}}
			for i := range dms.Items {
				present["DockerMachine"][dms.Items[i].Name] = true
			}
			for i := range ms.Items {
				present["Machine"][ms.Items[i].Name] = true
			}
			for kind, names := range lastSeen {
				for name := range names {
					if _, recorded := goneAt[kind][name]; !present[kind][name] && !recorded {
						goneAt[kind][name] = now
					}
				}
				for name := range present[kind] {
					names[name] = true
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() (controlPlaneDeletions, error) {
		<-done
		return controlPlaneDeletions{
			dockerMachines: slices.SortedFunc(maps.Values(goneAt["DockerMachine"]), time.Time.Compare),
			machines:       slices.SortedFunc(maps.Values(goneAt["Machine"]), time.Time.Compare),
		}, err
	}
}

func msSince(t, from time.Time) float64 { return float64(t.Sub(from).Microseconds()) / 1000 }

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// flagValue is a go test flag's value as given, for results to say how they were run.
func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}
