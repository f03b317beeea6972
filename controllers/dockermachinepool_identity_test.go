package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// TestPoolRecordsItsUID: a pool records its UID in an annotation on its first reconcile, and its
// containers carry that UID and its namespace.
func TestPoolRecordsItsUID(t *testing.T) {
	g := NewWithT(t)
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
	w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}
	r, _ := newTestReconciler(g, w.objects(), rt)
	pool := reconcilePool(g, r)
	g.Expect(pool.Annotations).To(HaveKeyWithValue(infrav1.PoolUIDAnnotation, "pool-uid"))
	g.Expect(rt.Containers()).To(ConsistOf(HaveField("Labels", And(
		HaveKeyWithValue(infrav1.PoolUIDLabel, "pool-uid"), HaveKeyWithValue(infrav1.NamespaceLabel, testNamespace)))))
}

// TestMovedPoolFindsItsContainers: a pool that clusterctl move re-created under another UID
// finds its containers by the UID its annotation recorded, and bootstraps nothing again; a
// container carrying that UID in another namespace's name is not its own.
func TestMovedPoolFindsItsContainers(t *testing.T) {
	g := NewWithT(t)
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
	moved := func(name string) container.Container {
		c := nodeContainer(g, name, "v1.31.0", rt.Now().Add(-time.Hour))
		c.Labels[infrav1.NamespaceLabel] = testNamespace
		return c
	}
	first, second := moved("workers-first"), moved("workers-second")
	forged := moved("workers-forged")
	forged.Labels[infrav1.NamespaceLabel] = "elsewhere"
	for _, c := range []container.Container{first, second, forged} {
		rt.Add(c)
	}

	w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true}
	objs := w.objects()
	pool := objs[len(objs)-1].(*infrav1.DockerMachinePool)
	pool.UID = "uid-after-move"
	pool.Annotations = map[string]string{infrav1.PoolUIDAnnotation: "pool-uid"}
	var machines []client.Object
	for _, c := range []container.Container{first, second} {
		m := joinedMachine(c)
		m.OwnerReferences = []metav1.OwnerReference{poolOwnerRef(types.UID("uid-after-move"))}
		// clusterctl move does not copy status: the machine learns again that it is provisioned.
		m.Status = infrav1.DockerMachinePoolMachineStatus{Conditions: []metav1.Condition{notPaused()}}
		m.Finalizers = []string{infrav1.MachinePoolMachineFinalizer}
		machines = append(machines, m)
	}
	r, _ := newTestReconciler(g, append(objs, machines...), rt)
	reconcilePool(g, r)
	g.Expect(rt.Containers()).To(ConsistOf(HaveField("Name", first.Name), HaveField("Name", second.Name), HaveField("Name", forged.Name)),
		"nothing created, nothing removed")
	err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: forged.Name}, &infrav1.DockerMachinePoolMachine{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the container of another namespace is not one of the pool's: %v", err)

	machineReconciler := &DockerMachinePoolMachineReconciler{Client: r.Client, APIReader: r.Client, Runtime: rt}
	for _, c := range []container.Container{first, second} {
		_, err := machineReconciler.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: c.Name}})
		g.Expect(err).ToNot(HaveOccurred())
		m := &infrav1.DockerMachinePoolMachine{}
		g.Expect(r.Client.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: c.Name}, m)).To(Succeed())
		cond := conditions.Get(m, infrav1.ContainerProvisionedCondition)
		g.Expect(cond).ToNot(BeNil())
		g.Expect(cond.Reason).To(Equal(infrav1.ContainerProvisionedReason), "%s: the node's sentinel says it is bootstrapped: %s", c.Name, cond.Message)
	}
	for _, e := range rt.Execs() {
		g.Expect(e.Container).ToNot(Equal(forged.Name), "nothing runs in a container of another namespace")
	}
}

// TestCopiedPoolLeavesTheOriginal: a pool copied with `kubectl get -o yaml`, renamed and given a
// MachinePool of its own keeps the original's pool-uid annotation. Neither pool adopts the other's
// containers, neither deletes the other's Machines as excess, and deleting the copy leaves the
// original's containers, machines and Machines as they were.
func TestCopiedPoolLeavesTheOriginal(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
	w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true}
	objs := w.objects()
	original := objs[len(objs)-1].(*infrav1.DockerMachinePool)
	original.Annotations = map[string]string{infrav1.PoolUIDAnnotation: string(original.UID)}

	// The original's two containers, each with its machine and the Machine Cluster API made.
	var originalNames []string
	for i := range 2 {
		c := nodeContainer(g, fmt.Sprintf("%s-original%d", testPool, i), "v1.31.0", rt.Now().Add(-time.Hour))
		c.Labels[infrav1.NamespaceLabel] = testNamespace
		rt.Add(c)
		originalNames = append(originalNames, c.Name)
		objs = append(objs, joinedMachine(c), ownerMachine(c.Name))
	}

	// The copy: the original's metadata as `kubectl get -o yaml` shows it, another name, its own
	// MachinePool of one replica.
	const copyName, copyMachinePool = "workers-copy", "mp-copy"
	var machinePool *clusterv1.MachinePool
	for _, o := range objs {
		if mp, ok := o.(*clusterv1.MachinePool); ok {
			machinePool = mp
		}
	}
	copiedMP := machinePool.DeepCopy()
	copiedMP.Name, copiedMP.UID, copiedMP.ResourceVersion = copyMachinePool, "mp-copy-uid", ""
	copiedMP.Spec.Replicas = ptr.To[int32](1)
	copiedMP.Spec.Template.Spec.InfrastructureRef.Name = copyName
	copied := original.DeepCopy()
	copied.Name, copied.UID, copied.ResourceVersion = copyName, "copy-uid", ""
	copied.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachinePool", Name: copyMachinePool, UID: "mp-copy-uid"}}
	objs = append(objs, copiedMP, copied)

	r, _ := newTestReconciler(g, objs, rt)
	reconcileNamed := func(name string) {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: name}})
		g.Expect(err).ToNot(HaveOccurred())
	}
	containersOf := func(pool string) []string {
		var names []string
		for _, c := range rt.Containers() {
			if c.Labels[infrav1.PoolNameLabel] == pool {
				names = append(names, c.Name)
			}
		}
		return names
	}
	originalSurvives := func(when string) {
		g.Expect(containersOf(testPool)).To(ConsistOf(originalNames), "%s: the original's containers", when)
		for _, name := range originalNames {
			owner := &clusterv1.Machine{}
			g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: name}, owner)).To(Succeed(), "%s: Machine %s", when, name)
			g.Expect(owner.DeletionTimestamp.IsZero()).To(BeTrue(), "%s: Machine %s is being deleted", when, name)
			m := &infrav1.DockerMachinePoolMachine{}
			g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: name}, m)).To(Succeed(), "%s: machine %s", when, name)
			g.Expect(m.DeletionTimestamp.IsZero()).To(BeTrue(), "%s: machine %s is being deleted", when, name)
			g.Expect(ownedByPool(m, original)).To(BeTrue(), "%s: machine %s still the original's", when, name)
			g.Expect(m.OwnerReferences).To(HaveLen(1), "%s: machine %s gained an owner", when, name)
		}
	}

	for range 2 {
		reconcileNamed(copyName)
		reconcileNamed(testPool)
	}
	originalSurvives("after both reconciled")
	g.Expect(containersOf(copyName)).To(HaveLen(1), "the copy makes its own replica")
	copyContainer := containersOf(copyName)[0]

	// Deleting the copy: its own container goes, through its machine; the original's stay.
	g.Expect(r.Client.Delete(ctx, &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: copyName}})).To(Succeed())
	for range 3 {
		reconcileNamed(copyName)
		m := &infrav1.DockerMachinePoolMachine{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: copyContainer}, m); err == nil && !m.DeletionTimestamp.IsZero() {
			// What the DockerMachinePoolMachine controller does once its container is released.
			m.Finalizers = nil
			g.Expect(r.Client.Update(ctx, m)).To(Succeed())
		}
	}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: copyName}, &infrav1.DockerMachinePool{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the copy is deleted: %v", err)
	g.Expect(containersOf(copyName)).To(BeEmpty())
	originalSurvives("after the copy was deleted")
	reconcileNamed(testPool)
	originalSurvives("after the original reconciled again")
}
