//go:build e2e_local && bench

package realnodes

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/clusterops"
	"github.com/capdmp/capdmp/internal/nodeimage"
	"github.com/capdmp/capdmp/test/framework"
)

// The real variant of the bench driver (`make bench-real`, docs/benchmarks.md): on the real node
// images, CAPDMP beside upstream CAPD's DockerMachinePool (sigs.k8s.io/cluster-api/test v1.14.2)
// and the Docker engine alone, and the headline figure: the skew violations each pool produces in
// the same upgrade-both-at-once run. It times and never fails on time.

// realScaleUp is one system's scale-up from 0 to n.
type realScaleUp struct {
	System string `json:"system"`
	Nodes  int    `json:"nodes"`
	// Joined is when the last Node registered; Ready when the MachinePool reported all ready
	// (not measured for the engine alone).
	JoinedSeconds float64 `json:"nodesRegisteredSeconds"`
	ReadySeconds  float64 `json:"machinePoolReadySeconds,omitempty"`
	// Unfinished says where a system stood when it did not get there within the budget.
	Unfinished string `json:"unfinished,omitempty"`
}

type realBenchResults struct {
	Date    string        `json:"date"`
	Commit  string        `json:"commit"`
	Skew    []kitOutcome  `json:"skew"`
	ScaleUp []realScaleUp `json:"scaleUp"`
}

// managerBootstrapConcurrency is the manager's default --dockermachinepoolmachine-concurrency.
const managerBootstrapConcurrency = 10

// TestBenchReal runs the skew comparison (BENCH_REAL_POOL workers, 3 by default, both pools at
// once) and then the scale-up comparison (BENCH_REAL_NODES, 3 by default, one system at a time),
// prints one line per figure and writes _artifacts/bench/results-real.json.
func TestBenchReal(t *testing.T) {
	results := realBenchResults{Date: time.Now().UTC().Format(time.RFC3339), Commit: framework.Commit()}
	pool := int32(framework.BenchSetting("BENCH_REAL_POOL", 3))
	t.Run("skew", func(t *testing.T) {
		var mu sync.Mutex
		t.Run("group", func(t *testing.T) {
			for _, tt := range []struct {
				name     string
				upstream bool
			}{{name: "bench-skew-capdmp"}, {name: "bench-skew-capd", upstream: true}} {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					k := runKit(t, tt.name, tt.upstream, pool)
					mu.Lock()
					results.Skew = append(results.Skew, k)
					mu.Unlock()
				})
			}
		})
		for _, k := range results.Skew {
			fmt.Printf("bench-real: skew, upgrade both at once, %d workers: %-18s %s\n", k.Pool, k.Name, k)
		}
	})
	n := framework.BenchSetting("BENCH_REAL_NODES", 3)
	t.Run("scale-up", func(t *testing.T) {
		results.ScaleUp = append(results.ScaleUp, benchRealScaleUp(t, n, false)...)
		results.ScaleUp = append(results.ScaleUp, benchRealScaleUp(t, n, true)...)
		for _, r := range results.ScaleUp {
			line := fmt.Sprintf("bench-real: scale 0->%d real nodes: %-7s Nodes registered %6.1fs", r.Nodes, r.System, r.JoinedSeconds)
			if r.ReadySeconds > 0 {
				line += fmt.Sprintf("  MachinePool ready %6.1fs", r.ReadySeconds)
			}
			if r.Unfinished != "" {
				line = fmt.Sprintf("bench-real: scale 0->%d real nodes: %-7s %s", r.Nodes, r.System, r.Unfinished)
			}
			fmt.Println(line)
		}
		byName := map[string]realScaleUp{}
		for _, r := range results.ScaleUp {
			byName[r.System] = r
		}
		capdmp, engine, capd := byName["capdmp"], byName["engine"], byName["capd"]
		line := fmt.Sprintf("bench-real: Nodes registered capdmp/engine %.2f", capdmp.JoinedSeconds/engine.JoinedSeconds)
		switch {
		case capd.System == "":
			line += "; capd not run"
		case capd.Unfinished == "":
			line += fmt.Sprintf(", capdmp/capd %.2f; MachinePool ready capdmp/capd %.2f", capdmp.JoinedSeconds/capd.JoinedSeconds, capdmp.ReadySeconds/capd.ReadySeconds)
		default:
			line += "; capd did not finish"
		}
		fmt.Println(line)
	})

	g := NewWithT(t)
	out, err := framework.BenchJSON(results)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(framework.WriteBenchFile("results-real.json", out)).To(Succeed())
}

// benchRealScaleUp scales a pool of real nodes from 0 to n: CAPDMP's, then the engine alone with
// the same image and bootstrap data against the same control plane; or upstream CAPD's.
func benchRealScaleUp(t *testing.T, n int, upstream bool) []realScaleUp {
	t.Helper()
	name := "bench-scale-capdmp"
	if upstream {
		name = "bench-scale-capd"
	}
	var out []realScaleUp
	t.Run(name, func(t *testing.T) {
		s := startScenario(t, name)
		// The older of the blocking tier's two images.
		version := chain[len(chain)-2]
		c := s.createCluster(framework.ClusterSpec{ControlPlaneVersion: version, ControlPlaneReplicas: 1, PoolVersion: version, PoolReplicas: 0, UpstreamPool: upstream})
		s.wait("the control plane", budgets.ClusterReady, func(ctx context.Context) (bool, string, error) {
			return clusterops.ControlPlaneAt(ctx, c.KitCluster(), version)
		})
		cfg, err := c.WorkloadConfig(s.ctx)
		s.g.Expect(err).NotTo(HaveOccurred())
		workload, err := client.New(cfg, client.Options{})
		s.g.Expect(err).NotTo(HaveOccurred())
		kit := c.KitCluster()

		if !upstream {
			data := waitForPoolData(s, c)
			// Bootstrapped as the manager does (one staged exec per node, its end awaited), as many
			// started at once as the manager runs (--dockermachinepoolmachine-concurrency) and
			// containers created at once as a pool does by default (--container-create-concurrency).
			baseline := world.EngineBaseline(min(n, managerBootstrapConcurrency), map[string]string{"test.capdmp.dev/bench": "engine"})
			// A failed baseline leaves none of its nodes behind (before the cluster goes).
			s.t.Cleanup(func() { _ = baseline.Remove(context.Background(), workload) })
			image, err := nodeimage.ImageForVersion(version, "")
			s.g.Expect(err).NotTo(HaveOccurred())
			m, err := baseline.MakeNodes(s.ctx, data, image, framework.NodeNames(n), nil)
			s.g.Expect(err).NotTo(HaveOccurred(), "the engine alone")
			s.logf("engine alone: %d nodes registered in %s", n, m.Joined.Round(100*time.Millisecond))
			out = append(out, realScaleUp{System: "engine", Nodes: n, JoinedSeconds: m.Joined.Seconds()})
			s.g.Expect(baseline.Remove(s.ctx, workload)).To(Succeed())
		}

		start := time.Now()
		var joined time.Duration
		s.g.Expect(clusterops.SetMachinePool(s.ctx, kit, "scale", func(mp *clusterv1.MachinePool) { mp.Spec.Replicas = ptr.To(int32(n)) })).To(Succeed())
		registered, progress := 0, ""
		s.logf("waiting for the pool at %d", n)
		err = clusterops.WaitFor(s.ctx, budgets.PoolUpgrade, func(p string) { s.logf("%s", p) }, func(ctx context.Context) (bool, string, error) {
			if joined == 0 {
				var err error
				if registered, err = registeredNodes(ctx, kit, workload); err != nil {
					return false, "", err
				}
				if registered == n {
					joined = time.Since(start)
				}
			}
			done, p, err := framework.PoolAt(ctx, kit, version, int32(n))
			progress = p
			return done, p, err
		})
		system := "capdmp"
		if upstream {
			system = "capd"
		}
		r := realScaleUp{System: system, Nodes: n, JoinedSeconds: joined.Seconds(), ReadySeconds: time.Since(start).Seconds()}
		if err != nil {
			// Upstream CAPD not getting there is a figure of the comparison; CAPDMP not getting
			// there fails the bench.
			s.g.Expect(upstream && s.ctx.Err() == nil).To(BeTrue(), "the pool at %d: %v", n, err)
			r.JoinedSeconds, r.ReadySeconds = 0, 0
			r.Unfinished = fmt.Sprintf("not done after %s: %d of %d Nodes registered, %s", budgets.PoolUpgrade, registered, n, progress)
			s.logf("%s: %s", system, r.Unfinished)
		}
		out = append(out, r)
	})
	return out
}

// registeredNodes counts the pool's instances that have a Node.
func registeredNodes(ctx context.Context, kit framework.KitCluster, workload client.Client) (int, error) {
	instances, err := kit.Instances(ctx)
	if err != nil {
		return 0, err
	}
	nodes := &corev1.NodeList{}
	if err := workload.List(ctx, nodes); err != nil {
		return 0, err
	}
	have := map[string]bool{}
	for _, n := range nodes.Items {
		have[n.Name] = true
	}
	count := 0
	for _, i := range instances {
		if have[i.Name] {
			count++
		}
	}
	return count, nil
}

// waitForPoolData waits for the MachinePool's bootstrap data and reads it.
func waitForPoolData(s *scenario, c *framework.Cluster) *bootstrap.Data {
	var data *bootstrap.Data
	s.wait("the pool's bootstrap data", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		var err error
		data, err = c.CurrentBootstrapData(ctx)
		return data != nil, "no data Secret yet", err
	})
	return data
}
