//go:build bench

package stubnodes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/controllers"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/test/framework"
	"github.com/capdmp/capdmp/test/stubnode"
)

// Ten pools scaling at once (docs/benchmarks.md, "Ten pools at once"): the create limit is per
// pool (--container-create-concurrency, controllers.DefaultMaxConcurrentCreates), so ten pools
// ask the engine for ten times the creates at once. The manager runs the shipped workers
// (shippedWorkers pools and DockerMachinePoolMachines at once), so that ten pools do create at
// once. First the engine alone creates BENCH_POOLS x BENCH_POOLS_NODES containers, one pool's
// limit at once and then ten pools' limits at once; then one pool alone, then BENCH_POOLS pools
// (10) at once, each scaled from 0 to BENCH_POOLS_NODES (10), each pool on a cluster of its own
// (as users' pools are, and so that each pool's Nodes and containers are told apart by name), in
// the same run: time to all running, registered and Ready per pool and overall, the create rate,
// and the engine's CPU (dockerd and its containerd).

// shippedWorkers is the shipped manager's --dockermachinepool-concurrency and
// --dockermachinepoolmachine-concurrency (main.go).
const shippedWorkers = 10

type poolsRun struct {
	Pools int `json:"pools"`
	Nodes int `json:"nodesPerPool"`
	// Per pool and overall, seconds from the replicas write to every container running, every
	// Node registered, every Node Ready.
	PerPool []poolMilestones `json:"perPool"`
	Overall poolMilestones   `json:"overall"`
	// ContainersPerSecond is containers running over the time to all running.
	ContainersPerSecond float64 `json:"containersPerSecond"`
	// DockerdCPUSeconds is the engine's (dockerd's and its containerd's) user+system CPU over the
	// run; DockerdCores that over the wall time to every Node Ready.
	DockerdCPUSeconds float64 `json:"dockerdCPUSeconds"`
	DockerdCores      float64 `json:"dockerdCores"`
}

// engineCreates is the engine alone creating and starting containers, so many at once.
type engineCreates struct {
	Containers int `json:"containers"`
	AtOnce     int `json:"atOnce"`
	// Seconds to every container running; ContainersPerSecond Containers over it.
	Seconds             float64 `json:"seconds"`
	ContainersPerSecond float64 `json:"containersPerSecond"`
	// DockerdCPUSeconds is dockerd's and its containerd's CPU over the creates; DockerdCores that
	// over Seconds.
	DockerdCPUSeconds float64 `json:"dockerdCPUSeconds"`
	DockerdCores      float64 `json:"dockerdCores"`
}

type poolMilestones struct {
	Running    float64 `json:"runningSeconds"`
	Registered float64 `json:"registeredSeconds"`
	Ready      float64 `json:"readySeconds"`
}

type poolsResults struct {
	Date        string `json:"date"`
	Commit      string `json:"commit"`
	CPUs        int    `json:"cpus"`
	CreateLimit int    `json:"createLimitPerPool"`
	// Workers is the manager's pool and DockerMachinePoolMachine workers.
	Workers int `json:"workers"`
	// Engine is the engine alone: one pool's create limit at once, then the pools' limits.
	Engine         []engineCreates `json:"engineAlone"`
	Alone          poolsRun        `json:"onePoolAlone"`
	Many           poolsRun        `json:"poolsAtOnce"`
	RateRatio      float64         `json:"containersPerSecondManyOverAlone"`
	ReadyTimeRatio float64         `json:"readySecondsManyOverAlone"`
}

// TestBenchPools runs one pool alone and then the pools at once, prints bench: lines and writes
// _artifacts/bench/results-pools.json.
func TestBenchPools(t *testing.T) {
	pools := framework.BenchSetting("BENCH_POOLS", 10)
	n := framework.BenchSetting("BENCH_POOLS_NODES", 10)
	r := poolsResults{
		Date: time.Now().UTC().Format(time.RFC3339), Commit: framework.Commit(), CPUs: runtime.NumCPU(),
		CreateLimit: controllers.DefaultMaxConcurrentCreates, Workers: shippedWorkers,
	}
	// CABPK's default token TTL: the suite's 20 s would rotate the data during a run.
	withManager(t, managerConfig{containerSyncPeriod: defaultManager.containerSyncPeriod, tokenTTL: 15 * time.Minute, workers: shippedWorkers})
	t.Run("engine-alone", func(t *testing.T) {
		for _, atOnce := range []int{r.CreateLimit, pools * r.CreateLimit} {
			e := benchEngineCreates(t, pools*n, atOnce)
			fmt.Printf("bench: engine alone, %d containers, %2d at once: running %6.2fs; %.2f containers/s; dockerd %.1f CPU s (%.2f cores)\n",
				e.Containers, e.AtOnce, e.Seconds, e.ContainersPerSecond, e.DockerdCPUSeconds, e.DockerdCores)
			r.Engine = append(r.Engine, e)
		}
	})
	t.Run("alone", func(t *testing.T) { r.Alone = benchPools(t, 1, n) })
	t.Run("at-once", func(t *testing.T) { r.Many = benchPools(t, pools, n) })
	for _, run := range []poolsRun{r.Alone, r.Many} {
		for i, p := range run.PerPool {
			fmt.Printf("bench: %2d pools x %d: pool %2d: running %6.2fs  registered %6.2fs  Ready %6.2fs\n", run.Pools, n, i, p.Running, p.Registered, p.Ready)
		}
		o := run.Overall
		fmt.Printf("bench: %2d pools x %d: all: running %6.2fs  registered %6.2fs  Ready %6.2fs; %.2f containers/s; dockerd %.1f CPU s (%.2f cores)\n",
			run.Pools, n, o.Running, o.Registered, o.Ready, run.ContainersPerSecond, run.DockerdCPUSeconds, run.DockerdCores)
	}
	if r.Alone.ContainersPerSecond > 0 && r.Alone.Overall.Ready > 0 {
		r.RateRatio = r.Many.ContainersPerSecond / r.Alone.ContainersPerSecond
		r.ReadyTimeRatio = r.Many.Overall.Ready / r.Alone.Overall.Ready
	}
	fmt.Printf("bench: %d pools at once / 1 pool alone (create limit %d per pool): containers/s %.2f, time to all Ready %.2f (%dx the nodes)\n",
		pools, r.CreateLimit, r.RateRatio, r.ReadyTimeRatio, pools)
	g := NewWithT(t)
	out, err := framework.BenchJSON(r)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(framework.WriteBenchFile("results-pools.json", out)).To(Succeed())
}

// benchPools makes pools clusters with an empty pool each, scales every pool to n at the same
// moment and records when each gets there.
func benchPools(t *testing.T, pools, n int) poolsRun {
	t.Helper()
	g := NewWithT(t)
	cs := make([]*testCluster, pools)
	for i := range cs {
		cs[i] = newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 0})
	}
	for _, c := range cs {
		waitForBootstrapData(t, c)
	}
	run := poolsRun{Pools: pools, Nodes: n, PerPool: make([]poolMilestones, pools)}
	cpuBefore, err := dockerdCPU()
	g.Expect(err).ToNot(HaveOccurred(), "reading dockerd's CPU")
	start := time.Now()
	// Every pool's replicas written at once; a failed write fails the run from the test's goroutine.
	var writes errgroup.Group
	for _, c := range cs {
		writes.Go(func() error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				mp := &clusterv1.MachinePool{}
				if err := c.management.Get(context.Background(), c.key(), mp); err != nil {
					return err
				}
				mp.Spec.Replicas = ptr.To(int32(n))
				return c.management.Update(context.Background(), mp)
			})
		})
	}
	g.Expect(writes.Wait()).To(Succeed(), "scaling the pools")
	label := versionLabel(g, v131)
	g.Eventually(func(g Gomega) {
		done := 0
		for i, c := range cs {
			p := &run.PerPool[i]
			if p.Ready > 0 {
				done++
				continue
			}
			since := time.Since(start).Seconds()
			running := 0
			for _, ct := range c.containers() {
				if ct.Running && ct.Labels[infrav1.KubernetesVersionLabel] == label {
					running++
				}
			}
			if running >= n && p.Running == 0 {
				p.Running = since
			}
			registered, ready := 0, 0
			for _, node := range c.nodes() {
				registered++
				for _, cond := range node.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if registered >= n && p.Registered == 0 {
				p.Registered = since
			}
			if ready >= n && p.Running > 0 {
				p.Ready = since
				done++
			}
		}
		g.Expect(done).To(Equal(pools))
	}, 10*time.Minute, benchPoll).Should(Succeed())
	cpuAfter, err := dockerdCPU()
	g.Expect(err).ToNot(HaveOccurred(), "reading dockerd's CPU")
	// Each pool reports what it was timed doing: its ready replicas, each with its Node.
	for _, c := range cs {
		c.waitForReady(n, label, time.Minute)
	}
	for _, p := range run.PerPool {
		run.Overall.Running = max(run.Overall.Running, p.Running)
		run.Overall.Registered = max(run.Overall.Registered, p.Registered)
		run.Overall.Ready = max(run.Overall.Ready, p.Ready)
	}
	run.ContainersPerSecond = float64(pools*n) / run.Overall.Running
	run.DockerdCPUSeconds = cpuAfter - cpuBefore
	run.DockerdCores = run.DockerdCPUSeconds / run.Overall.Ready
	// Scaled down before the Clusters go, so that their deletion fits the cleanup's wait.
	for _, c := range cs {
		c.setReplicas(0)
	}
	for _, c := range cs {
		g.Eventually(func(g Gomega) { g.Expect(c.containers()).To(BeEmpty()) }, 5*time.Minute, time.Second).Should(Succeed())
	}
	return run
}

// benchEngineCreates has the engine alone create and start count stub node containers, atOnce at
// a time, with the pools' run options and no controller, and removes them.
func benchEngineCreates(t *testing.T, count, atOnce int) engineCreates {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	labels := map[string]string{benchLabel: "pools-engine"}
	remove := func() {
		left, err := engine.List(ctx, labels)
		g.Expect(err).ToNot(HaveOccurred())
		var removals errgroup.Group
		removals.SetLimit(atOnce)
		for _, c := range left {
			removals.Go(func() error { return engine.Delete(ctx, c.Name) })
		}
		g.Expect(removals.Wait()).To(Succeed(), "removing the engine's containers")
	}
	t.Cleanup(remove)
	image := stubnode.Image(v131)
	cpuBefore, err := dockerdCPU()
	g.Expect(err).ToNot(HaveOccurred(), "reading dockerd's CPU")
	start := time.Now()
	var creates errgroup.Group
	creates.SetLimit(atOnce)
	for _, name := range framework.NodeNames(count) {
		creates.Go(func() error {
			_, err := engine.Create(ctx, container.NodeSpec(container.NodeSpecInput{
				Name: name, Image: image, ClusterName: "capdmp-baseline", Network: container.HostNetwork, Labels: labels,
			}))
			return err
		})
	}
	g.Expect(creates.Wait()).To(Succeed(), "the engine alone creating %d containers, %d at once", count, atOnce)
	e := engineCreates{Containers: count, AtOnce: atOnce, Seconds: time.Since(start).Seconds()}
	cpuAfter, err := dockerdCPU()
	g.Expect(err).ToNot(HaveOccurred(), "reading dockerd's CPU")
	// What was timed: every container there and running.
	list, err := engine.List(ctx, labels)
	g.Expect(err).ToNot(HaveOccurred())
	running := 0
	for _, c := range list {
		if c.Running {
			running++
		}
	}
	g.Expect(running).To(Equal(count), "containers running after the engine's creates")
	e.ContainersPerSecond = float64(count) / e.Seconds
	e.DockerdCPUSeconds = cpuAfter - cpuBefore
	e.DockerdCores = e.DockerdCPUSeconds / e.Seconds
	remove()
	return e
}

// dockerdCPU is the engine's CPU seconds (user and system): dockerd's, from /proc/<pid>/stat (its
// pid file beside DOCKER_HOST's socket, where hack/docker-engine.sh writes it), and its children's
// (the containerd it runs). Containers' shims and processes are not counted.
func dockerdCPU() (float64, error) {
	host := os.Getenv("DOCKER_HOST")
	sock, ok := strings.CutPrefix(host, "unix://")
	if !ok || !strings.HasSuffix(sock, "/docker.sock") {
		return 0, fmt.Errorf("DOCKER_HOST %q is not the socket of hack/docker-engine.sh's dockerd (unix://<dir>/docker.sock)", host)
	}
	pidFile := filepath.Join(filepath.Dir(sock), "dockerd.pid")
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("reading dockerd's pid (DOCKER_HOST %q): %w", host, err)
	}
	pid := strings.TrimSpace(string(raw))
	total, _, err := procCPU(pid)
	if err != nil {
		return 0, fmt.Errorf("dockerd (pid %s): %w", pid, err)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil || p.Name() == pid {
			continue
		}
		cpu, ppid, err := procCPU(p.Name())
		if err != nil {
			continue // gone since the listing
		}
		if ppid == pid {
			total += cpu
		}
	}
	return total, nil
}

// procCPU is a process's user+system CPU seconds and its parent's pid, from /proc/<pid>/stat.
func procCPU(pid string) (float64, string, error) {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, "", err
	}
	// The fields after the command's closing parenthesis: state, ppid, ...; utime and stime are
	// the 12th and 13th.
	i := strings.LastIndex(string(stat), ") ")
	if i < 0 {
		return 0, "", fmt.Errorf("unexpected /proc/%s/stat: %q", pid, stat)
	}
	fields := strings.Fields(string(stat)[i+2:])
	if len(fields) < 13 {
		return 0, "", fmt.Errorf("unexpected /proc/%s/stat: %q", pid, stat)
	}
	var ticks float64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, "", err
		}
		ticks += v
	}
	// USER_HZ is 100 on Linux.
	return ticks / 100, fields[1], nil
}
