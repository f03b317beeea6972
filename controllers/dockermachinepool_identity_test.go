package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	rt := fakeruntime.New(image(g, "v1.31.0"))
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
	rt := fakeruntime.New(image(g, "v1.31.0"))
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
