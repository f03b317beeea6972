package controllers

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// take returns the object and status writes counted since the last take.
func (a *apiCounter) take() (object, status int) {
	status = int(a.statusWrites.Load())
	object = int(a.writes.Load()) - status
	a.reset()
	return object, status
}

// TestMachineWritesOneStatusPerStep: a machine goes from the pool's create to Ready in two
// reconciles that each write its whole status once (Paused, the bootstrap and the addresses;
// then provisioned, the Node's providerID and kubelet, Ready), and its deletion writes only the
// finalizer's removal: the writes a pool of thousands makes per instance.
func TestMachineWritesOneStatusPerStep(t *testing.T) {
	g := NewWithT(t)
	const name = "workers-steps"
	w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}
	writes := &apiCounter{}
	c := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(w.objects()...).
		WithStatusSubresource(&infrav1.DockerMachinePoolMachine{}).WithInterceptorFuncs(writes.funcs()).Build()
	data, err := bootstrap.Read(context.Background(), c, testNamespace, "mp-data")
	g.Expect(err).ToNot(HaveOccurred())
	configuration, err := data.Configuration(context.Background())
	g.Expect(err).ToNot(HaveOccurred())
	// As the pool creates it: labels (with the data it created the container for), owner,
	// finalizer and providerID; no status.
	machine := &infrav1.DockerMachinePoolMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNamespace, Name: name,
			Labels: map[string]string{
				clusterv1.ClusterNameLabel: testCluster, infrav1.KubernetesVersionLabel: "v1.31.0",
				infrav1.BootstrapDataHashLabel: bootstrap.HashLabelValue(data.Hash), infrav1.BootstrapConfigurationLabel: configuration,
			},
			OwnerReferences: []metav1.OwnerReference{poolOwnerRef("pool-uid")},
			Finalizers:      []string{infrav1.MachinePoolMachineFinalizer},
		},
		Spec: infrav1.DockerMachinePoolMachineSpec{ProviderID: providerID(name)},
	}
	g.Expect(c.Create(context.Background(), machine)).To(Succeed())
	rt := fakeruntime.NewWithNodeImages()
	rt.Add(nodeContainer(g, name, "v1.31.0", time.Now()))
	workload := fake.NewClientBuilder().Build()
	bootstrapped := false
	rt.ExecHandler = func(_ container.Container, cmd []string, _ []byte) (container.ExecResult, error) {
		switch {
		case !slices.Equal(cmd, bootstrap.StatusCommand().Argv):
			return container.ExecResult{}, nil
		case bootstrapped:
			return container.ExecResult{ExitCode: 0}, nil
		default:
			return container.ExecResult{ExitCode: 80}, nil // not started
		}
	}
	r := &DockerMachinePoolMachineReconciler{Client: c, APIReader: c, Runtime: rt,
		ClusterCache: clustercache.NewFakeClusterCache(workload, client.ObjectKey{Namespace: testNamespace, Name: testCluster})}
	key := client.ObjectKey{Namespace: testNamespace, Name: name}
	reconcile := func() *infrav1.DockerMachinePoolMachine {
		_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
		g.Expect(err).ToNot(HaveOccurred())
		m := &infrav1.DockerMachinePoolMachine{}
		if err := c.Get(context.Background(), key, m); err != nil {
			return nil
		}
		return m
	}
	writes.take()

	m := reconcile()
	object, status := writes.take()
	g.Expect([]int{object, status}).To(Equal([]int{0, 1}), "the bootstrap's start: one status write, nothing else")
	g.Expect(conditions.GetReason(m, infrav1.ContainerProvisionedCondition)).To(Equal(infrav1.BootstrappingReason))
	g.Expect(conditions.GetReason(m, clusterv1.PausedCondition)).To(Equal(clusterv1.NotPausedReason))
	g.Expect(m.Status.Addresses).ToNot(BeEmpty())
	g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))

	bootstrapped = true
	g.Expect(workload.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.31.0"}}})).To(Succeed())
	m = reconcile()
	object, status = writes.take()
	g.Expect([]int{object, status}).To(Equal([]int{0, 1}), "the bootstrap's end with its Node: one status write, nothing else")
	g.Expect(ptr.Deref(m.Status.Initialization.Provisioned, false)).To(BeTrue())
	g.Expect(m.Status.NodeKubeletVersion).To(Equal("v1.31.0"))
	g.Expect(conditions.IsTrue(m, infrav1.ReadyCondition)).To(BeTrue())
	g.Expect(m.Status.Addresses).ToNot(BeEmpty(), "the earlier status is kept")

	reconcile()
	object, status = writes.take()
	g.Expect([]int{object, status}).To(Equal([]int{0, 0}), "a Ready machine with nothing new writes nothing")

	g.Expect(c.Delete(context.Background(), m)).To(Succeed())
	writes.take()
	g.Expect(reconcile()).To(BeNil(), "the machine is gone once its finalizer is removed")
	object, status = writes.take()
	g.Expect([]int{object, status}).To(Equal([]int{1, 0}), "the deletion: the finalizer's removal, no status for an object that goes")
	g.Expect(rt.Containers()).To(BeEmpty())
}

// TestMachineChangedBeyondStatus: a machine's own status writes do not wake it again; anything
// else about it does (a deletion, a label or annotation, an owner, its finalizers).
func TestMachineChangedBeyondStatus(t *testing.T) {
	machine := func() *infrav1.DockerMachinePoolMachine {
		return &infrav1.DockerMachinePoolMachine{ObjectMeta: metav1.ObjectMeta{
			Namespace: testNamespace, Name: "workers-watched", ResourceVersion: "1",
			Labels: map[string]string{clusterv1.ClusterNameLabel: testCluster},
		}}
	}
	tests := []struct {
		name   string
		change func(m *infrav1.DockerMachinePoolMachine)
		want   bool
	}{
		{name: "its status and resourceVersion: not passed", want: false, change: func(m *infrav1.DockerMachinePoolMachine) {
			m.ResourceVersion = "2"
			m.Status.Initialization.Provisioned = ptr.To(true)
			m.Status.Conditions = []metav1.Condition{notPaused()}
		}},
		{name: "being deleted: passed", want: true, change: func(m *infrav1.DockerMachinePoolMachine) { m.DeletionTimestamp = ptr.To(metav1.Now()) }},
		{name: "marked for deletion: passed", want: true, change: func(m *infrav1.DockerMachinePoolMachine) {
			m.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: ""}
		}},
		{name: "a label: passed", want: true, change: func(m *infrav1.DockerMachinePoolMachine) { m.Labels["x"] = "y" }},
		{name: "its finalizer removed: passed", want: true, change: func(m *infrav1.DockerMachinePoolMachine) { m.Finalizers = nil }},
		{name: "an owner added: passed", want: true, change: func(m *infrav1.DockerMachinePoolMachine) {
			m.OwnerReferences = append(m.OwnerReferences, poolOwnerRef("pool-uid"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			old := machine()
			old.Finalizers = []string{infrav1.MachinePoolMachineFinalizer}
			updated := old.DeepCopy()
			tt.change(updated)
			g.Expect(machineChangedBeyondStatus{}.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: updated})).To(Equal(tt.want))
		})
	}
}
