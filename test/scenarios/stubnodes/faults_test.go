package stubnodes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/test/dockerengine"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/test/devtools/managementplane"
	"github.com/capdmp/capdmp/test/stubnode"
)

// faultBudgets are the table's budgets doubled: every fault costs the pool a retry or a restart.
var faultBudgets = conformance.Budgets{
	ClusterReady: 2 * budgets.ClusterReady, ControlPlaneMachine: 2 * budgets.ControlPlaneMachine,
	ControlPlaneUpgrade: 2 * budgets.ControlPlaneUpgrade, PoolUpgrade: 2 * budgets.PoolUpgrade,
	Gate: 2 * budgets.Gate, Settle: budgets.Settle,
}

// conflictInjector fails every other write (the first, the third...) of each DockerMachinePool
// and DockerMachinePoolMachine, per operation and subresource, with a conflict, as a concurrent
// writer would make the API server answer.
type conflictInjector struct {
	mu       sync.Mutex
	writes   map[string]int
	injected map[string]int // by kind and operation
}

func newConflictInjector() *conflictInjector {
	return &conflictInjector{writes: map[string]int{}, injected: map[string]int{}}
}

// withoutWatch lets controller-runtime's interceptor wrap a manager's client, which cannot watch.
type withoutWatch struct{ client.Client }

func (withoutWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("the manager's client does not watch")
}

func (c *conflictInjector) wrap(cl client.Client) client.Client {
	return interceptor.NewClient(withoutWatch{cl}, interceptor.Funcs{
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := c.conflict(obj, "update", ""); err != nil {
				return err
			}
			return cl.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := c.conflict(obj, "patch", ""); err != nil {
				return err
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := c.conflict(obj, "update", sub); err != nil {
				return err
			}
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := c.conflict(obj, "patch", sub); err != nil {
				return err
			}
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
}

// conflict returns a conflict for every other write of a pool or a machine.
func (c *conflictInjector) conflict(obj client.Object, op, sub string) error {
	var kind string
	switch obj.(type) {
	case *infrav1.DockerMachinePool:
		kind = "DockerMachinePool"
	case *infrav1.DockerMachinePoolMachine:
		kind = "DockerMachinePoolMachine"
	default:
		return nil
	}
	what := strings.TrimSuffix(kind+" "+op+" "+sub, " ")
	c.mu.Lock()
	defer c.mu.Unlock()
	key := what + " " + client.ObjectKeyFromObject(obj).String()
	c.writes[key]++
	if c.writes[key]%2 == 0 {
		return nil
	}
	c.injected[what]++
	return apierrors.NewConflict(schema.GroupResource{Group: infrav1.GroupVersion.Group, Resource: strings.ToLower(kind) + "s"},
		obj.GetName(), errors.New("injected by the test: the object has been modified"))
}

func (c *conflictInjector) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.injected)
}

// TestFaultUpdateConflicts: every write of a pool and of its machines, status included, fails
// once with a conflict before it succeeds. A scale-up, an upgrade of both at once, then a
// scale-up and a scale-down converge, with no skew violation.
func TestFaultUpdateConflicts(t *testing.T) {
	g := NewWithT(t)
	conflicts := newConflictInjector()
	withManager(t, managerConfig{containerSyncPeriod: defaultManager.containerSyncPeriod, wrapClient: conflicts.wrap})
	sc, ok := conformance.Lookup("both-at-once/machinepool-first")
	g.Expect(ok).To(BeTrue())

	_, c := runScenario(t, sc, faultBudgets)
	target := chain[len(chain)-1]
	for _, replicas := range []int32{4, 1} {
		c.setReplicas(replicas)
		c.waitForReady(int(replicas), target, faultBudgets.PoolUpgrade)
	}

	injected := conflicts.counts()
	t.Logf("conflicts injected: %v", injected)
	for _, what := range []string{"DockerMachinePool patch", "DockerMachinePool patch status", "DockerMachinePoolMachine patch status"} {
		g.Expect(injected).To(HaveKeyWithValue(what, BeNumerically(">", 0)), "the writes the controllers make were all tried")
	}
	c.cleanup()
}

// startManagerProcess builds the manager and runs it as a process of its own, as a management
// cluster's Pod would, with the ServiceAccount and RBAC CAPDMP ships (a missing permission fails)
// and CAPDMP's reconcilers out of the in-process manager for the rest of the test; it is killed
// at the end. With metrics it serves its metrics (Manager.MetricsURL).
func startManagerProcess(t *testing.T, metrics bool) *managementplane.Manager {
	t.Helper()
	g := NewWithT(t)
	dir := filepath.Join(testenv.RepoRoot(), "_artifacts", "faults")
	g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	binary := filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Dir = testenv.RepoRoot()
	out, err := build.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "building the manager: %s", out)
	log, err := os.Create(filepath.Join(dir, "manager.log"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = log.Close() })

	withManager(t, managerConfig{containerSyncPeriod: defaultManager.containerSyncPeriod, capdmpOutOfProcess: true})
	m, err := managementplane.StartManager(context.Background(), testEnv.Management.APIServer, managementplane.ManagerOptions{
		Binary: binary, DockerNetwork: container.HostNetwork, Log: log, NoWebhooks: true,
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
		Args:       []string{"--container-sync-period=" + defaultManager.containerSyncPeriod.String()},
		Metrics:    metrics,
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(m.Kill)
	return m
}

// faultMoment is one kill: when, the scenario's step and the last state it saw, and what the
// pool had then.
type faultMoment struct {
	at          time.Duration
	step, state string
	containers  int
	machines    int
	provisioned int
}

func (m faultMoment) String() string {
	return fmt.Sprintf("%6.1fs %s; pool: %d containers, %d machines (%d provisioned); last seen: %s",
		m.at.Seconds(), m.step, m.containers, m.machines, m.provisioned, m.state)
}

// isState says whether a line of a scenario's progress is a state it saw rather than a step.
func isState(line string) bool {
	return strings.HasPrefix(line, "MachinePool ") || strings.HasPrefix(line, "control plane ")
}

// TestFaultManagerKilled kills the manager process (SIGKILL) at random moments, 20 in all, while
// scenarios of the table run one after the other: scale-ups and bootstraps, upgrades of both at
// once with the gate closed and then open, and the deletion of each cluster. The manager is
// started again after each kill, as a Pod would be. Every scenario completes without a skew
// violation, each deleted cluster leaves no container and no Machine, and every moment is
// reported. CAPDMP_FAULTS_SEED replays a run's timing.
func TestFaultManagerKilled(t *testing.T) {
	const kills = 20
	g := NewWithT(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CAPDMP_FAULTS_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		g.Expect(err).NotTo(HaveOccurred())
	}
	t.Logf("seed %d (CAPDMP_FAULTS_SEED=%d replays the timing of the kills)", seed, seed)
	random := rand.New(rand.NewPCG(seed, seed)) //nolint:gosec // moments of a test, not secrets
	p := startManagerProcess(t, false)

	var (
		mu          sync.Mutex
		step, state string
		current     *testCluster
		moments     []faultMoment
	)
	setDoing := func(c *testCluster, line string) {
		mu.Lock()
		defer mu.Unlock()
		current = c
		if isState(line) {
			state = line
		} else {
			step, state = line, ""
		}
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	killerDone := make(chan error, 1)
	killed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(moments)
	}
	go func() {
		for killed() < kills {
			select {
			case <-ctx.Done():
				killerDone <- nil
				return
			// From 3 to 10 s after the manager is ready: a restart costs it a few seconds (caches,
			// the workload cluster's connection), and kills closer together would hold the pool
			// in its first step.
			case <-time.After(time.Duration(3000+random.IntN(7000)) * time.Millisecond):
			}
			mu.Lock()
			m := faultMoment{at: time.Since(start), step: step, state: state}
			c := current
			mu.Unlock()
			p.Kill()
			if c != nil {
				m.containers, m.machines, m.provisioned = c.inventory()
			}
			mu.Lock()
			moments = append(moments, m)
			mu.Unlock()
			if err := p.Start(context.Background()); err != nil {
				killerDone <- err
				return
			}
		}
		killerDone <- nil
	}()

	// Not the scenarios that hold the pool's bootstrap data through a pause: with this suite's
	// 20-second token TTL, a manager down for seconds at the wrong moment lets a token expire
	// before its container joins, a failure of the test's TTL rather than of the pool.
	scenarios := []string{"both-at-once/machinepool-first", "both-at-once/controlplane-first", "both-at-once/image-first"}
	for i := 0; killed() < kills; i++ {
		sc, ok := conformance.Lookup(scenarios[i%len(scenarios)])
		g.Expect(ok).To(BeTrue())
		t.Run(sc.Name, func(t *testing.T) {
			_, c := runScenarioWhile(t, sc, func(c *testCluster, line string) {
				if !isState(line) {
					line = sc.Name + ": " + line
				}
				setDoing(c, line)
			})
			setDoing(c, sc.Name+": deleting the cluster")
			c.cleanup()
			machines := &clusterv1.MachineList{}
			NewWithT(t).Expect(mgmt.List(context.Background(), machines, client.InNamespace(c.namespace))).To(Succeed())
			NewWithT(t).Expect(machines.Items).To(BeEmpty(), "no Machine is left with its deleted cluster")
			setDoing(nil, "between scenarios")
		})
		if t.Failed() {
			break
		}
	}
	cancel()
	g.Expect(<-killerDone).To(Succeed())
	t.Logf("%d kills (seed %d):", len(moments), seed)
	for i, m := range moments {
		t.Logf("%2d %s", i+1, m)
	}
	g.Expect(len(moments)).To(BeNumerically(">=", kills))
}

// runScenarioWhile is runScenario that tells progress what the scenario is doing at each step.
func runScenarioWhile(t *testing.T, sc conformance.Scenario, progress func(*testCluster, string)) (conformance.Report, *testCluster) {
	t.Helper()
	var c *testCluster
	onCluster := func(created *testCluster) { c = created; progress(c, "creating the cluster") }
	return runScenarioWith(t, sc, faultBudgets, onCluster, func(line string) { progress(c, line) })
}

// inventory counts the pool's containers, its machines and those provisioned.
func (c *testCluster) inventory() (containers, machines, provisioned int) {
	ctx := context.Background()
	pool := &infrav1.DockerMachinePool{}
	if err := mgmt.Get(ctx, c.key(), pool); err == nil {
		if list, err := c.engine.List(ctx, map[string]string{infrav1.PoolUIDLabel: string(pool.UID)}); err == nil {
			containers = len(list)
		}
	}
	list := &infrav1.DockerMachinePoolMachineList{}
	if err := mgmt.List(ctx, list, client.InNamespace(c.namespace)); err == nil {
		machines = len(list.Items)
		for _, m := range list.Items {
			if ptr.Deref(m.Status.Initialization.Provisioned, false) {
				provisioned++
			}
		}
	}
	return containers, machines, provisioned
}

// apiServerFreeze is how long TestFaultManagementAPIServerFrozen holds the API server.
const apiServerFreeze = 30 * time.Second

// TestFaultManagementAPIServerFrozen freezes the management kube-apiserver (SIGSTOP: connections
// hang, as with a wedged server) for 30 s once the pool has begun to scale up, then lets it go on.
// The scale-up, then an upgrade of both at once, complete with no skew violation: samples the
// monitor cannot read meanwhile are counted apart, never as "no violation".
func TestFaultManagementAPIServerFrozen(t *testing.T) {
	g := NewWithT(t)
	sc, ok := conformance.Lookup("both-at-once/machinepool-first")
	g.Expect(ok).To(BeTrue())
	apiServer, err := testEnv.Management.Process()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = apiServer.Signal(syscall.SIGCONT) })

	frozen := make(chan time.Duration, 1)
	freezeOnce := sync.Once{}
	freeze := func(c *testCluster) {
		// Once the pool has a container: the scale-up is under way.
		for deadline := time.Now().Add(faultBudgets.ClusterReady); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if list, err := c.engine.List(context.Background(), map[string]string{infrav1.ClusterNameLabel: c.name}); err == nil && len(list) > 0 {
				break
			}
		}
		start := time.Now()
		if err := apiServer.Signal(syscall.SIGSTOP); err != nil {
			t.Errorf("freezing the management API server: %v", err)
			return
		}
		time.Sleep(apiServerFreeze)
		if err := apiServer.Signal(syscall.SIGCONT); err != nil {
			t.Errorf("resuming the management API server: %v", err)
		}
		frozen <- time.Since(start)
	}
	report, _ := runScenarioWith(t, sc, faultBudgets, func(c *testCluster) {
		freezeOnce.Do(func() { go freeze(c) })
	}, nil)
	select {
	case d := <-frozen:
		t.Logf("management API server frozen for %s during the scale-up", d.Round(time.Millisecond))
	default:
		t.Fatal("the scenario ended before the freeze did")
	}
	g.Expect(report.Coverage.Unknown).To(BeNumerically(">", 0), "the monitor counted the samples it could not read")
}

// TestFaultHungBootstrap: a bootstrap step that never exits is stopped at the pool's bootstrap
// timeout and the machine says which step hung, while another pool scales up meanwhile: a hung
// bootstrap holds no controller worker.
func TestFaultHungBootstrap(t *testing.T) {
	g := NewWithT(t)
	const timeout = 15 * time.Second
	hung := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 2,
		preKubeadmCommands: []string{"sleep 3600"}, bootstrapTimeout: timeout})
	healthy := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 3})

	start := time.Now()
	healthy.waitForReady(3, v131, 2*time.Minute)
	t.Logf("the other pool scaled 0 -> 3 in %s beside the hung bootstraps", time.Since(start).Round(time.Millisecond))
	g.Eventually(func(g Gomega) {
		machines := &infrav1.DockerMachinePoolMachineList{}
		g.Expect(mgmt.List(context.Background(), machines, client.InNamespace(hung.namespace))).To(Succeed())
		g.Expect(machines.Items).To(HaveLen(2))
		for i := range machines.Items {
			cond := conditions.Get(&machines.Items[i], infrav1.ContainerProvisionedCondition)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(infrav1.BootstrapFailedReason))
			g.Expect(cond.Message).To(And(ContainSubstring("did not finish within "+timeout.String()), ContainSubstring("Bootstrap step runcmd[0] was stopped")))
		}
	}, timeout+time.Minute, 250*time.Millisecond).Should(Succeed())
	t.Logf("both hung bootstraps stopped and reported %s after the pools were made", time.Since(start).Round(time.Millisecond))
	g.Expect(hung.pool().Status.ReadyReplicas).To(HaveValue(BeEquivalentTo(0)))

	// A MachineHealthCheck, as the machinepool template ships one (with the shortest startup
	// timeout it accepts), hands both Machines to the pool, which replaces them. The replacements
	// run the same data and hang in turn: only their creation is asserted.
	failed := map[string]bool{}
	for _, ct := range hung.containers() {
		failed[ct.Name] = true
	}
	hung.createHealthCheck(clusterv1.MachineHealthCheckChecks{NodeStartupTimeoutSeconds: ptr.To[int32](30)})
	g.Eventually(func(g Gomega) {
		cs := hung.containers()
		g.Expect(cs).To(HaveLen(2))
		for _, ct := range cs {
			g.Expect(failed).NotTo(HaveKey(ct.Name), "a failed container still runs")
		}
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	t.Logf("both replaced %s after the pools were made; remediations: %d", time.Since(start).Round(time.Millisecond), hung.remediationEvents())
	g.Expect(hung.remediationEvents()).To(BeNumerically(">=", 2))
}

// engineRestart is how long TestFaultEngineRestarted keeps its engine stopped.
const engineRestart = 5 * time.Second

// TestFaultEngineRestarted stops and starts the pool's Docker engine (a private one: the suite's
// is shared with other tests) once during a scale-up and once during an upgrade. Containers with
// their restart policy come back or are replaced, no machine ever gets a second container
// (each container name is seen with one container ID), the pool ends at its replicas with no
// container left over, and no skew violation is seen.
func TestFaultEngineRestarted(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "capdmp-engine-")
	g.Expect(err).NotTo(HaveOccurred())
	private, err := dockerengine.StartPrivate(ctx, dir)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := private.Remove(context.Background()); err != nil {
			t.Errorf("removing the private engine: %v", err)
		}
	})
	g.Expect(stubnode.Build(ctx, stubnode.Options{Versions: []string{v131, v132}, DockerHost: private.Host})).To(Succeed())
	rt, err := container.NewDocker(dockerclient.WithHost(private.Host))
	g.Expect(err).NotTo(HaveOccurred())
	withManager(t, managerConfig{containerSyncPeriod: defaultManager.containerSyncPeriod, engine: rt})

	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 0, engine: rt})
	// As the machinepool template ships one, with the shortest startup timeout it accepts: a
	// container whose bootstrap the restart cut short is replaced.
	c.createHealthCheck(clusterv1.MachineHealthCheckChecks{NodeStartupTimeoutSeconds: ptr.To[int32](30)})
	providerCtx, stopProvider := context.WithCancel(ctx)
	t.Cleanup(stopProvider)
	go c.controlPlaneProvider(providerCtx, 1)
	seen := watchContainerIDs(t, c)
	monitor := conformance.Watch(ctx, c.conformanceCluster(), conformance.Options{Interval: 50 * time.Millisecond})

	// The samples the monitor cannot read while the engine is stopped on purpose: blind by
	// design, they do not count against its coverage.
	stoppedUnreadable := 0
	restartWhen := func(what string, ready func([]container.Container) bool) {
		t.Helper()
		g.Eventually(func() bool { return ready(c.containers()) }, 2*time.Minute, 100*time.Millisecond).Should(BeTrue(), what)
		before := c.containers()
		start := time.Now()
		unreadable := monitor.Report().Coverage.Unknown
		g.Expect(private.Stop(ctx)).To(Succeed())
		time.Sleep(engineRestart)
		g.Expect(private.Start(ctx)).To(Succeed())
		stoppedUnreadable += monitor.Report().Coverage.Unknown - unreadable
		t.Logf("engine restarted %s in %s with %d containers: %s", what, time.Since(start).Round(time.Millisecond), len(before), describeContainers(before))
	}

	c.setReplicas(3)
	restartWhen("during the scale-up", func(cs []container.Container) bool { return len(cs) > 0 })
	c.waitForReady(3, v131, faultBudgets.PoolUpgrade)
	t.Logf("after the scale-up: %s", describeContainers(c.containers()))

	mp := &clusterv1.MachinePool{}
	c.update(c.key(), mp, func() { mp.Spec.Template.Spec.Version = v132 })
	kcp := &controlplanev1.KubeadmControlPlane{}
	c.update(client.ObjectKey{Namespace: c.namespace, Name: c.name + "-cp"}, kcp, func() { kcp.Spec.Version = v132 })
	restartWhen("during the upgrade", func(cs []container.Container) bool {
		return slices.ContainsFunc(cs, func(ct container.Container) bool { return ct.Labels[infrav1.KubernetesVersionLabel] == v132 })
	})
	c.waitForReady(3, v132, faultBudgets.PoolUpgrade)
	t.Logf("after the upgrade: %s", describeContainers(c.containers()))

	report := monitor.Stop()
	running := report.Coverage
	running.Samples -= stoppedUnreadable
	running.Unknown -= stoppedUnreadable
	t.Logf("monitor: %s; while the engine ran: %s", report.Coverage, running)
	t.Logf("containers seen: %d; Machines the pool remediated: %d", len(seen()), c.remediationEvents())
	g.Expect(running.Blind()).To(BeEmpty())
	g.Expect(report.Violations).To(BeEmpty())
	for name, ids := range seen() {
		g.Expect(ids).To(HaveLen(1), "container %s was created more than once", name)
	}
	g.Expect(c.containers()).To(HaveEach(HaveField("Running", BeTrue())))
	c.cleanup()
}

// watchContainerIDs records, until the test ends, every container ID seen under each container
// name of the cluster's pool; the returned function reads the record.
func watchContainerIDs(t *testing.T, c *testCluster) func() map[string][]string {
	t.Helper()
	var mu sync.Mutex
	ids := map[string][]string{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// The engine is down at times: a failed list is tried again.
			if list, err := c.engine.List(ctx, map[string]string{infrav1.ClusterNameLabel: c.name}); err == nil {
				mu.Lock()
				for _, ct := range list {
					if !slices.Contains(ids[ct.Name], ct.ID) {
						ids[ct.Name] = append(ids[ct.Name], ct.ID)
					}
				}
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string][]string, len(ids))
		for k, v := range ids {
			out[k] = slices.Clone(v)
		}
		return out
	}
}

func describeContainers(cs []container.Container) string {
	out := make([]string, 0, len(cs))
	for _, ct := range cs {
		state := "running"
		if !ct.Running {
			state = "stopped"
		}
		out = append(out, ct.Name+" ("+ct.Labels[infrav1.KubernetesVersionLabel]+", "+state+")")
	}
	return strings.Join(out, ", ")
}
