package stubnodes

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/controllers"
	"github.com/capdmp/capdmp/internal/container"
)

// TestPoolLifecycle scales a pool 0 -> 3 -> 1 -> 0 with real containers that join a real API
// server, and reports how long 0 -> 3 takes and how many engine calls a no-change reconcile makes.
func TestPoolLifecycle(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 0})
	g.Eventually(func(g Gomega) {
		g.Expect(conditions.IsTrue(c.pool(), infrav1.ReplicasReadyCondition)).To(BeTrue())
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	start := time.Now()
	c.setReplicas(3)
	c.waitForReady(3, v131, 2*time.Minute)
	t.Logf("scale 0 -> 3: %s (containers created, bootstrapped, Nodes registered, MachinePool ready)", time.Since(start).Round(time.Millisecond))

	// MachinePool Machines: one Machine per container, with its Node.
	g.Eventually(func(g Gomega) {
		machines := &clusterv1.MachineList{}
		g.Expect(mgmt.List(context.Background(), machines, client.InNamespace(c.namespace))).To(Succeed())
		g.Expect(machines.Items).To(HaveLen(3))
		for _, m := range machines.Items {
			g.Expect(m.Spec.InfrastructureRef.Kind).To(Equal("DockerMachinePoolMachine"))
			g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), m.Name)
		}
	}, 30*time.Second, 250*time.Millisecond).Should(Succeed())
	pool := c.pool()
	g.Expect(conditions.IsTrue(pool, infrav1.ReadyCondition)).To(BeTrue())
	g.Expect(pool.Status.ObservedGeneration).To(Equal(pool.Generation))
	g.Expect(conditions.Get(pool, infrav1.ReplicasReadyCondition).Reason).To(Equal(infrav1.ReplicasReadyReason), "never stuck in ScalingUp")

	calls := noChangeReconcileCalls(t, c)
	t.Logf("engine calls per no-change reconcile: %d", calls)
	g.Expect(calls).To(BeEquivalentTo(1), "a no-change reconcile makes one engine call, a List")

	c.setReplicas(1)
	c.waitForReady(1, v131, time.Minute)
	c.setReplicas(0)
	g.Eventually(func(g Gomega) {
		g.Expect(c.containers()).To(BeEmpty())
		g.Expect(c.nodes()).To(BeEmpty())
		g.Expect(conditions.IsTrue(c.pool(), infrav1.ReplicasReadyCondition)).To(BeTrue())
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
}

// noChangeReconcileCalls reconciles a settled pool once more with a counting engine client. The
// reconciler's first reconcile reads the engine's machine for the pool's capacity, which it then
// keeps for all pools for controllers.DefaultHostPeriod: the second is the one counted.
func noChangeReconcileCalls(t *testing.T, c *testCluster) int64 {
	t.Helper()
	counting, err := container.NewDocker()
	NewWithT(t).Expect(err).ToNot(HaveOccurred())
	r := &controllers.DockerMachinePoolReconciler{Client: mgmt, APIReader: mgmt, Runtime: counting, Network: container.HostNetwork}
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: c.key()})
	NewWithT(t).Expect(err).ToNot(HaveOccurred())
	NewWithT(t).Expect(counting.Calls()).To(HaveKeyWithValue("Info", BeEquivalentTo(1)), "the first reconcile reads the engine's machine")
	counting.ResetCalls()
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: c.key()})
	NewWithT(t).Expect(err).ToNot(HaveOccurred())
	return counting.Calls().Total()
}

// TestDeleteOneMachine removes the Machine marked with cluster.x-k8s.io/delete-machine on a
// scale-down, and replaces a Machine deleted outright.
func TestDeleteOneMachine(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	// One container first, the two others after it is ready: the engine lists creation times in
	// whole seconds, and three created in one reconcile can share a second.
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 1})
	c.waitForReady(1, v131, 2*time.Minute)
	time.Sleep(time.Second)
	c.setReplicas(3)
	c.waitForReady(3, v131, 2*time.Minute)

	machines := &clusterv1.MachineList{}
	g.Eventually(func(g Gomega) {
		g.Expect(mgmt.List(ctx, machines, client.InNamespace(c.namespace))).To(Succeed())
		g.Expect(machines.Items).To(HaveLen(3))
	}, 30*time.Second, 250*time.Millisecond).Should(Succeed())
	// Mark the oldest container's Machine: without the annotation a scale-down removes the
	// newest, so only the annotation can make this one go.
	containers := c.containers()
	oldest := slices.MinFunc(containers, func(a, b container.Container) int { return a.CreatedAt.Compare(b.CreatedAt) })
	newest := slices.MaxFunc(containers, func(a, b container.Container) int { return a.CreatedAt.Compare(b.CreatedAt) })
	g.Expect(oldest.CreatedAt.Before(newest.CreatedAt)).To(BeTrue(), "containers created one after another")
	i := slices.IndexFunc(machines.Items, func(m clusterv1.Machine) bool { return m.Spec.InfrastructureRef.Name == oldest.Name })
	g.Expect(i).ToNot(Equal(-1), "the Machine of container %s", oldest.Name)
	marked := machines.Items[i]
	g.Expect(mgmt.Patch(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: marked.Namespace, Name: marked.Name,
		Annotations: map[string]string{clusterv1.DeleteMachineAnnotation: ""}}}, client.Merge)).To(Succeed())
	c.setReplicas(2)
	c.waitForReady(2, v131, time.Minute)
	var names []string
	for _, ct := range c.containers() {
		names = append(names, ct.Name)
	}
	g.Expect(names).ToNot(ContainElement(oldest.Name), "the marked machine goes first")
	g.Expect(names).To(ContainElement(newest.Name), "the newest stays: the default order did not pick")

	// Deleting a Machine outright: Cluster API drains and deletes it, the pool replaces it.
	victim := c.containers()[0].Name
	g.Expect(mgmt.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: victim}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		names := map[string]bool{}
		for _, ct := range c.containers() {
			names[ct.Name] = true
		}
		g.Expect(names).ToNot(HaveKey(victim))
		g.Expect(names).To(HaveLen(2))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	c.waitForReady(2, v131, time.Minute)
}

// TestContainerRemovedBehindTheControllersBack: a container removed by hand is noticed, its
// Machine and Node go, and a new container replaces it.
func TestContainerRemovedBehindTheControllersBack(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 2})
	c.waitForReady(2, v131, 2*time.Minute)
	victim := c.containers()[0].Name
	g.Expect(engine.Delete(context.Background(), victim)).To(Succeed())
	g.Eventually(func(g Gomega) {
		names := map[string]bool{}
		for _, ct := range c.containers() {
			names[ct.Name] = true
		}
		g.Expect(names).ToNot(HaveKey(victim))
		g.Expect(names).To(HaveLen(2))
		g.Expect(c.nodes()).ToNot(HaveKey(victim))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	c.waitForReady(2, v131, time.Minute)
}

// TestBootstrapFails reports a failing bootstrap on the machine and the pool, with the output of
// the step that failed, and never marks the container ready.
func TestBootstrapFails(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 1,
		preKubeadmCommands: []string{"echo disk full >&2; exit 3"}})
	g.Eventually(func(g Gomega) {
		created := conditions.Get(c.pool(), infrav1.MachinesCreatedCondition)
		g.Expect(created).ToNot(BeNil())
		g.Expect(created.Reason).To(Equal(infrav1.BootstrapFailedReason))
		machines := &infrav1.DockerMachinePoolMachineList{}
		g.Expect(mgmt.List(context.Background(), machines, client.InNamespace(c.namespace))).To(Succeed())
		g.Expect(machines.Items).To(HaveLen(1))
		cond := conditions.Get(&machines.Items[0], infrav1.ContainerProvisionedCondition)
		g.Expect(cond).ToNot(BeNil())
		g.Expect(cond.Reason).To(Equal(infrav1.BootstrapFailedReason))
		g.Expect(cond.Message).To(ContainSubstring("disk full"))
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(c.pool().Status.ReadyReplicas).To(HaveValue(BeEquivalentTo(0)))
	g.Expect(c.containers()).To(HaveLen(1), "a failed container is not replaced in a loop")
}

// TestManagerRestartMidBootstrap: bootstraps run in their containers, detached from the
// controller. More containers than the manager has workers bootstrap at once, and a manager
// restarted in the middle finds them running, waits, and sees each finish; none is failed and
// none bootstraps twice.
func TestManagerRestartMidBootstrap(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const replicas = 7 // the manager has 5 workers per controller
	const runs = "/var/lib/capdmp-test-bootstrap-runs"
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: replicas,
		preKubeadmCommands: []string{"echo run >> " + runs, "while [ ! -f /tmp/go-on ]; do sleep 0.2; done"}})
	allBootstrapping := func(g Gomega) {
		machines := &infrav1.DockerMachinePoolMachineList{}
		g.Expect(mgmt.List(ctx, machines, client.InNamespace(c.namespace))).To(Succeed())
		g.Expect(machines.Items).To(HaveLen(replicas))
		for i := range machines.Items {
			m := &machines.Items[i]
			g.Expect(conditions.GetReason(m, infrav1.ContainerProvisionedCondition)).To(Equal(infrav1.BootstrappingReason), m.Name)
		}
	}
	g.Eventually(allBootstrapping, 2*time.Minute, 250*time.Millisecond).Should(Succeed())

	restartManager(t)
	g.Consistently(allBootstrapping, 5*time.Second, 500*time.Millisecond).Should(Succeed())

	for _, ct := range c.containers() {
		res, err := engine.Exec(ctx, ct.Name, []string{"touch", "/tmp/go-on"}, nil)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(BeZero())
	}
	c.waitForReady(replicas, v131, 2*time.Minute)
	for _, ct := range c.containers() {
		res, err := engine.Exec(ctx, ct.Name, []string{"cat", runs}, nil)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(string(res.Stdout)).To(Equal("run\n"), "container %s bootstrapped once", ct.Name)
	}
}

// TestMissingImage: an image that is not on the engine is reported by name and never pulled.
func TestMissingImage(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: "v1.31.99", poolVersion: "v1.31.99", replicas: 1})
	g.Eventually(func(g Gomega) {
		created := conditions.Get(c.pool(), infrav1.MachinesCreatedCondition)
		g.Expect(created).ToNot(BeNil())
		g.Expect(created.Reason).To(Equal(infrav1.ImageNotFoundReason))
		g.Expect(created.Message).To(ContainSubstring("kindest/node:v1.31.99"))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(c.containers()).To(BeEmpty())
}

// TestPoolDeletion: deleting the MachinePool removes every container.
func TestPoolDeletion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 2})
	c.waitForReady(2, v131, 2*time.Minute)
	pool := c.pool()
	g.Expect(mgmt.Delete(ctx, c.machinePool())).To(Succeed())
	g.Eventually(func(g Gomega) {
		list, err := engine.List(ctx, map[string]string{infrav1.PoolUIDLabel: string(pool.UID)})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(list).To(BeEmpty())
		err = mgmt.Get(ctx, c.key(), &infrav1.DockerMachinePool{})
		g.Expect(err).To(HaveOccurred())
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
}
