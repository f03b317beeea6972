package stubnodes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/clusterops"
	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/test/framework"
)

// skewViolationsTotal counts, over the whole suite, the samples in which a monitor saw a kubelet
// break the skew policy; TestMain prints it.
var (
	skewViolationsTotal int
	skewViolationsMu    sync.Mutex
)

// chain is the stub node images' chain for the table: a scenario starts at the oldest of the
// newest versions it needs.
var chain = []string{v131, v132, v133}

// budgets are the table's waits here: the contract-level control plane replaces a machine in
// seconds, and stub nodes join in about one.
var budgets = conformance.Budgets{
	ClusterReady: 2 * time.Minute, ControlPlaneMachine: 30 * time.Second, ControlPlaneUpgrade: time.Minute,
	PoolUpgrade: 2 * time.Minute, Gate: 30 * time.Second, Settle: 3 * time.Second,
}

// TestScenarios runs every scenario of pkg/conformance's table with the control plane driven at
// the contract level (controlPlaneProvider) and stub nodes, all at once, with a container sync
// period longer than the suite: only the watch on the control plane can re-open the gate, and a
// broken watch shows as a scenario that never completes.
func TestScenarios(t *testing.T) {
	withLongSyncPeriod(t)
	for _, sc := range conformance.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			report, _ := runScenario(t, sc, budgets)
			for _, l := range report.Latencies {
				// Generous for a loaded machine (about 1 s quiet), far below the hour-long sync period
				// and the pool's 30 s retries: only the watch can have re-opened it.
				NewWithT(t).Expect(l.FromStatus).To(BeNumerically("<", 10*time.Second), "gate re-open latency to %s", l.Target)
			}
		})
	}
}

// monitorInterval is how often each scenario's monitor samples. A stub node's version shows as
// a Node that stays, so a violation lasts at least until the control plane's next step, seconds;
// eleven monitors at once each list the workload's Nodes and the engine's containers, and more
// often they would starve the joins they watch on a 2-core machine.
const monitorInterval = 100 * time.Millisecond

// runScenario makes a cluster of the scenario's shape, runs the scenario on it with the
// contract-level control plane provider, and fails the test on an error or a skew violation. The
// cluster is deleted at the end of the test, or earlier by its cleanup.
func runScenario(t *testing.T, sc conformance.Scenario, budgets conformance.Budgets) (conformance.Report, *testCluster) {
	t.Helper()
	return runScenarioWith(t, sc, budgets, nil, nil)
}

// runScenarioWith is runScenario that passes the cluster to onCluster once made, and each line
// of the scenario's progress to progress; either may be nil.
func runScenarioWith(t *testing.T, sc conformance.Scenario, budgets conformance.Budgets, onCluster func(*testCluster), progress func(string)) (conformance.Report, *testCluster) {
	t.Helper()
	g := NewWithT(t)
	from, err := sc.From(chain)
	g.Expect(err).NotTo(HaveOccurred())
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: from, controlPlaneReplicas: sc.Shape.ControlPlaneReplicas,
		poolVersion: from, replicas: sc.Shape.PoolReplicas})
	if onCluster != nil {
		onCluster(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.controlPlaneProvider(ctx, sc.Shape.ControlPlaneReplicas)
	pool := c.conformanceCluster()
	if sc.Shape.CustomImage {
		g.Expect(pool.SetImage(ctx, from)).To(Succeed())
	}
	start := time.Now()
	report, err := sc.Run(ctx, pool, conformance.Options{
		Versions: chain, Interval: monitorInterval, Budgets: budgets, TokenTTL: tokenTTL,
		Logf: func(format string, args ...any) {
			line := fmt.Sprintf(format, args...)
			t.Logf("%6.1fs %s", time.Since(start).Seconds(), line)
			if progress != nil {
				progress(line)
			}
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	m := report
	skewViolationsMu.Lock()
	skewViolationsTotal += len(m.Violations)
	skewViolationsMu.Unlock()
	t.Logf("monitor: %s; gate re-open latencies %v", m.Coverage, report.Latencies)
	for _, v := range m.Violations {
		t.Errorf("VIOLATION %s", v)
	}
	return report, c
}

// stubCluster is a scenario's cluster as pkg/conformance drives it: CAPDMP's pool, its manager
// restarted in-process, and a monitor that reads the contract-level control plane's status (what
// runs, here) before the pool's containers and their Nodes on the workload API server.
type stubCluster struct {
	*framework.CAPDMPPool
}

func (c *testCluster) conformanceCluster() stubCluster {
	return stubCluster{&framework.CAPDMPPool{Management: c.management, Engine: c.engine, Key: c.key(), ClusterName: c.name}}
}

// RestartProvider restarts the in-process manager.
func (c stubCluster) RestartProvider(context.Context) error {
	managerMu.Lock()
	defer managerMu.Unlock()
	managerStop()
	return startManager(currentManager)
}

// Source implements conformance.Observer.
func (c stubCluster) Source() conformance.Source {
	return &stubSource{cluster: c, controlPlane: clusterops.ControlPlaneReader{Cluster: c}}
}

// stubSource reads the control plane's status.versions first, as the kit does through the
// contract (what runs, here): a pool read after it can only look newer than it was, and a
// sample errs toward a violation. The kubelets are those of the Nodes named as the pool's
// containers.
type stubSource struct {
	cluster      stubCluster
	controlPlane clusterops.ControlPlaneReader
}

func (s *stubSource) Observe(ctx context.Context) (conformance.Sample, error) {
	status, err := s.controlPlane.Read(ctx)
	if err != nil {
		return conformance.Sample{}, err
	}
	sample := conformance.Sample{APIServers: status.Versions, ControlPlaneStatus: status.Versions}
	instances, err := s.cluster.Instances(ctx)
	if err != nil {
		return sample, err
	}
	for _, i := range instances {
		sample.Instances = append(sample.Instances, i.Version)
	}
	// The gate's word is for the timeline only: a failed read of it leaves the sample whole.
	sample.Gate, _, _ = s.cluster.Gate(ctx)
	nodes := &corev1.NodeList{}
	if err := testEnv.Workload.Client.List(ctx, nodes); err != nil {
		return sample, err
	}
	for _, n := range nodes.Items {
		if slices.ContainsFunc(instances, func(i conformance.Instance) bool { return i.Name == n.Name }) {
			sample.Kubelets = append(sample.Kubelets, n.Status.NodeInfo.KubeletVersion)
		}
	}
	return sample, nil
}

// controlPlaneProvider plays a control plane provider at the contract level until ctx ends: when
// spec.version changes, it rolls its machines one at a time as KubeadmControlPlane does (one
// surge): a machine of the new version joins (it takes a while to make the first), then an old
// one goes, each step reported in status.versions.
func (c *testCluster) controlPlaneProvider(ctx context.Context, replicas int32) {
	const machineStartup, machineReplacement = 3 * time.Second, 2 * time.Second
	key := client.ObjectKey{Namespace: c.namespace, Name: c.name + "-cp"}
	machines := []string{}
	for ctx.Err() == nil {
		kcp := &controlplanev1.KubeadmControlPlane{}
		if err := c.management.Get(ctx, key, kcp); err != nil {
			// Gone with its deleted cluster, or the test is over.
			if !apierrors.IsNotFound(err) && !errors.Is(ctx.Err(), context.Canceled) {
				c.t.Errorf("control plane provider: %v", err)
			}
			return
		}
		if len(machines) == 0 {
			for _, v := range kcp.Status.Versions {
				for range v.Replicas {
					machines = append(machines, v.Version)
				}
			}
		}
		target := kcp.Spec.Version
		old := slices.IndexFunc(machines, func(v string) bool { return v != target })
		switch {
		case old < 0:
			time.Sleep(100 * time.Millisecond)
			continue
		case len(machines) == int(replicas):
			delay := machineReplacement
			if !slices.Contains(machines, target) {
				delay = machineStartup
			}
			time.Sleep(delay)
			machines = append(machines, target)
		default:
			time.Sleep(machineReplacement)
			machines = slices.Delete(machines, old, old+1)
		}
		if ctx.Err() != nil {
			return
		}
		if err := writeControlPlaneStatus(ctx, c.management, key, machines); err != nil && ctx.Err() == nil {
			c.t.Errorf("control plane provider: %v", err)
		}
	}
}
