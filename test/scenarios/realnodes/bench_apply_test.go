//go:build e2e_local && bench

package realnodes

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/test/framework"
)

// What a user would compare (docs/benchmarks.md, "From apply to Ready"): two clusters whose
// objects are written at the same moment, one with CAPDMP's DockerMachinePool and one with
// upstream CAPD's, the same version, a one-node KubeadmControlPlane and BENCH_APPLY_NODES workers,
// timed from the write of the cluster's objects to every pool Node Ready, with the hops between.

// applyHops are the seconds from the apply to each milestone of one cluster; 0 when not reached.
type applyHops struct {
	InfrastructureReady     float64 `json:"clusterInfrastructureReadySeconds"`
	ControlPlaneInitialized float64 `json:"controlPlaneInitializedSeconds"`
	ControlPlaneReady       float64 `json:"controlPlaneReadySeconds"`
	PoolContainersRunning   float64 `json:"poolContainersRunningSeconds"`
	NodesRegistered         float64 `json:"nodesRegisteredSeconds"`
	NodesReady              float64 `json:"nodesReadySeconds"`
}

type applyResult struct {
	System string    `json:"system"`
	Nodes  int       `json:"nodes"`
	Hops   applyHops `json:"hops"`
	// Unfinished says where a system stood when it did not get there within the budget.
	Unfinished string `json:"unfinished,omitempty"`
}

type applyBenchResults struct {
	Date    string        `json:"date"`
	Commit  string        `json:"commit"`
	Version string        `json:"version"`
	Apply   []applyResult `json:"applyToReady"`
}

// applyBudget is how long a cluster may take from its apply to every pool Node Ready.
const applyBudget = clusterReady + upgradeDone

// TestBenchApply applies both clusters at once and prints one line per system and hop, and the
// ratios; it writes _artifacts/bench/results-apply.json (results-real.json is TestBenchReal's).
func TestBenchApply(t *testing.T) {
	n := framework.BenchSetting("BENCH_APPLY_NODES", 3)
	version := chain[len(chain)-2]
	results := applyBenchResults{Date: time.Now().UTC().Format(time.RFC3339), Commit: framework.Commit(), Version: version}
	var mu sync.Mutex
	// Both subtests apply when both are ready to: the same moment, on the same plane and engine.
	var ready sync.WaitGroup
	ready.Add(2)
	t.Run("group", func(t *testing.T) {
		for _, tt := range []struct {
			name     string
			upstream bool
		}{{name: "bench-apply-capdmp"}, {name: "bench-apply-capd", upstream: true}} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := benchApply(t, tt.name, tt.upstream, version, n, &ready)
				mu.Lock()
				results.Apply = append(results.Apply, r)
				mu.Unlock()
			})
		}
	})
	byName := map[string]applyResult{}
	for _, r := range results.Apply {
		byName[r.System] = r
		if r.Unfinished != "" {
			fmt.Printf("bench-apply: %s, apply to Ready, %s, 1 control-plane node, %d workers: %s\n", r.System, version, n, r.Unfinished)
		}
		h := r.Hops
		fmt.Printf("bench-apply: %-6s %d workers: infrastructure ready %6.1fs, control plane initialized %6.1fs, ready %6.1fs; pool containers running %6.1fs, Nodes registered %6.1fs, Nodes Ready %6.1fs\n",
			r.System, n, h.InfrastructureReady, h.ControlPlaneInitialized, h.ControlPlaneReady, h.PoolContainersRunning, h.NodesRegistered, h.NodesReady)
	}
	capdmp, capd := byName["capdmp"], byName["capd"]
	if capdmp.Hops.NodesReady > 0 && capd.Hops.NodesReady > 0 {
		fmt.Printf("bench-apply: capdmp/capd apply to control plane ready %.2f, to every pool Node Ready %.2f; after the control plane was ready: capdmp %.1fs, capd %.1fs\n",
			capdmp.Hops.ControlPlaneReady/capd.Hops.ControlPlaneReady, capdmp.Hops.NodesReady/capd.Hops.NodesReady,
			capdmp.Hops.NodesReady-capdmp.Hops.ControlPlaneReady, capd.Hops.NodesReady-capd.Hops.ControlPlaneReady)
	}

	g := NewWithT(t)
	out, err := framework.BenchJSON(results)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(framework.WriteBenchFile("results-apply.json", out)).To(Succeed())
}

// benchApply applies one cluster (CAPDMP's pool, or upstream CAPD's) once ready allows, and
// looks every 500 ms at each hop until every worker Node is Ready. CAPDMP not getting there fails
// the bench; upstream CAPD not getting there is recorded where it stood.
func benchApply(t *testing.T, name string, upstream bool, version string, n int, ready *sync.WaitGroup) applyResult {
	t.Helper()
	system := "capdmp"
	if upstream {
		system = "capd"
	}
	r := applyResult{System: system, Nodes: n}
	// A scenario that fails to start releases the other one, which then applies alone.
	release := sync.OnceFunc(ready.Done)
	defer release()
	s := startScenario(t, name)
	release()
	ready.Wait()
	start := time.Now()
	c := s.createCluster(framework.ClusterSpec{ControlPlaneVersion: version, ControlPlaneReplicas: 1, PoolVersion: version, PoolReplicas: n, UpstreamPool: upstream})
	s.logf("applied in %s", time.Since(start).Round(time.Millisecond))

	h := &r.Hops
	mark := func(hop *float64, what string) {
		if *hop == 0 {
			*hop = time.Since(start).Seconds()
			s.logf("%s: %s", system, what)
		}
	}
	w := &applyWatch{cluster: c, version: version, n: n, hops: h, mark: mark}
	progress := ""
	s.logf("waiting for every pool Node Ready")
	ctx, cancel := context.WithTimeout(s.ctx, applyBudget)
	defer cancel()
	err := func() error {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			var err error
			if progress, err = w.step(ctx); err != nil {
				s.logf("%v", err)
			}
			if h.NodesReady > 0 {
				return nil
			}
			if time.Since(last) > 30*time.Second {
				s.logf("%s", progress)
				last = time.Now()
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
	}()
	if err != nil {
		r.Unfinished = fmt.Sprintf("not done after %s: %s", applyBudget, progress)
		s.recordRemediation()
		s.logControlPlaneConditions()
		s.g.Expect(upstream && s.ctx.Err() == nil).To(BeTrue(), "%s: every pool Node Ready: %v (%s)", system, err, progress)
	}
	s.recordRemediation()
	return r
}

// applyWatch follows one cluster from apply to every pool Node Ready.
type applyWatch struct {
	cluster *framework.Cluster
	version string
	n       int
	hops    *applyHops
	mark    func(*float64, string)
	// workload is built once the kubeconfig Secret exists.
	workload client.Client
}

// step looks once at each hop that is not reached yet and returns where the cluster stands.
func (w *applyWatch) step(ctx context.Context) (string, error) {
	c, version, n, h, mark := w.cluster, w.version, w.n, w.hops, w.mark
	cluster := &clusterv1.Cluster{}
	if err := world.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Name}, cluster); err != nil {
		return "", fmt.Errorf("reading the Cluster: %w", err)
	}
	init := cluster.Status.Initialization
	if ptr.Deref(init.InfrastructureProvisioned, false) {
		mark(&h.InfrastructureReady, "Cluster infrastructure ready")
	}
	if ptr.Deref(init.ControlPlaneInitialized, false) {
		mark(&h.ControlPlaneInitialized, "control plane initialized")
	}
	cpDesc := ""
	if h.ControlPlaneReady == 0 {
		ok, desc, err := c.ControlPlaneAt(ctx, version, 1)
		if err != nil {
			return "", err
		}
		if cpDesc = desc; ok {
			mark(&h.ControlPlaneReady, "control plane ready: "+desc)
		}
	}
	workers, err := c.Engine.List(ctx, map[string]string{container.KindClusterLabel: c.Name, container.KindRoleLabel: container.KindWorkerRole})
	if err != nil {
		return "", err
	}
	running := 0
	for _, worker := range workers {
		if worker.Running {
			running++
		}
	}
	if running >= n {
		mark(&h.PoolContainersRunning, fmt.Sprintf("%d pool containers running", running))
	}
	desc := fmt.Sprintf("infrastructure %t, control plane initialized %t, %s; pool containers %d of %d running",
		h.InfrastructureReady > 0, h.ControlPlaneInitialized > 0, cpDesc, running, n)
	if h.ControlPlaneInitialized == 0 {
		return desc, nil
	}
	if w.workload == nil {
		cfg, err := c.WorkloadConfig(ctx)
		if err != nil {
			return desc, nil //nolint:nilerr // the kubeconfig Secret comes after the control plane's init
		}
		cfg.Timeout = 10 * time.Second
		if w.workload, err = client.New(cfg, client.Options{}); err != nil {
			return desc, err
		}
	}
	nodes := &corev1.NodeList{}
	if err := w.workload.List(ctx, nodes); err != nil {
		return desc, fmt.Errorf("listing the workload cluster's Nodes: %w", err)
	}
	registered, readyNodes := 0, 0
	var notReady []string
	for _, node := range nodes.Items {
		if _, cp := node.Labels["node-role.kubernetes.io/control-plane"]; cp {
			continue
		}
		registered++
		if util.IsNodeReady(&node) {
			readyNodes++
		} else {
			notReady = append(notReady, node.Name)
		}
	}
	if registered >= n {
		mark(&h.NodesRegistered, fmt.Sprintf("%d worker Nodes registered", registered))
	}
	if readyNodes >= n {
		mark(&h.NodesReady, fmt.Sprintf("%d worker Nodes Ready", readyNodes))
	}
	return fmt.Sprintf("%s; worker Nodes %d registered, %d Ready (not Ready: %s)", desc, registered, readyNodes, strings.Join(notReady, ",")), nil
}
