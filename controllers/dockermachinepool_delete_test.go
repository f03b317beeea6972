package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// TestDockerMachinePoolDeleteWithoutMachinePool deletes pools whose MachinePool is gone or never
// adopted them: deletion matches containers and machines by the pool's identity, so it must not
// wait for an owner that will not come (issue 15, item 2).
func TestDockerMachinePoolDeleteWithoutMachinePool(t *testing.T) {
	tests := []struct {
		name string
		// ownerRef is set on the pool; the MachinePool it names never exists in these tests.
		ownerRef bool
		// cluster is whether the Cluster still exists.
		cluster bool
		// machines is how many of the pool's two containers have a DockerMachinePoolMachine, which
		// goes first; the others' are already gone.
		machines int
	}{
		{name: "MachinePool never set its owner reference", cluster: true},
		{name: "MachinePool already gone", ownerRef: true, cluster: true},
		{name: "MachinePool and Cluster already gone", ownerRef: true},
		{name: "MachinePool gone, the pool's machines go first", ownerRef: true, cluster: true, machines: 2},
		{name: "one machine already gone: its container goes all the same", ownerRef: true, cluster: true, machines: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			now := time.Now()

			objs := []client.Object{}
			for _, o := range (world{}).objects() {
				switch o.(type) {
				case *clusterv1.MachinePool, *infrav1.DockerMachinePool:
					continue
				case *clusterv1.Cluster:
					if !tt.cluster {
						continue
					}
				}
				objs = append(objs, o)
			}
			pool := &infrav1.DockerMachinePool{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: testNamespace, Name: testPool, UID: "pool-uid",
					Labels:            map[string]string{clusterv1.ClusterNameLabel: testCluster},
					DeletionTimestamp: &metav1.Time{Time: now},
					Finalizers:        []string{infrav1.MachinePoolFinalizer},
				},
				Status: infrav1.DockerMachinePoolStatus{Conditions: []metav1.Condition{notPaused()}},
			}
			if tt.ownerRef {
				pool.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachinePool", Name: "mp", UID: "mp-uid"}}
			}
			objs = append(objs, pool)

			rt := fakeruntime.NewWithNodeImages()
			own := []string{"workers-a", "workers-b"}
			for i, name := range own {
				rt.Add(nodeContainer(g, name, "v1.31.0", now.Add(time.Duration(i)*time.Second)))
			}
			// Another pool's container, named like ours: never touched.
			foreign := nodeContainer(g, "workers-other", "v1.31.0", now)
			foreign.Labels[infrav1.PoolUIDLabel] = "other-pool-uid"
			rt.Add(foreign)

			if tt.machines > 0 {
				for _, name := range own[:tt.machines] {
					objs = append(objs, &infrav1.DockerMachinePoolMachine{ObjectMeta: metav1.ObjectMeta{
						Namespace: testNamespace, Name: name,
						Labels: map[string]string{
							clusterv1.ClusterNameLabel:     testCluster,
							clusterv1.MachinePoolNameLabel: format.MustFormatValue("mp"),
						},
						OwnerReferences: []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: "DockerMachinePool", Name: testPool, UID: "pool-uid"}},
						Finalizers:      []string{infrav1.MachinePoolMachineFinalizer},
					}})
				}
			}
			r, _ := newTestReconciler(g, objs, rt)
			req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: testPool}}

			if tt.machines > 0 {
				_, err := r.Reconcile(ctx, req)
				g.Expect(err).ToNot(HaveOccurred())
				// Containers go through their machines first, so that Cluster API removes the Nodes.
				g.Expect(rt.Containers()).To(HaveLen(3))
				for _, name := range own[:tt.machines] {
					m := &infrav1.DockerMachinePoolMachine{}
					g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: name}, m)).To(Succeed())
					g.Expect(m.DeletionTimestamp.IsZero()).To(BeFalse(), "DockerMachinePoolMachine %s is not being deleted", name)
					// What the DockerMachinePoolMachine controller does once its container is released.
					m.Finalizers = nil
					g.Expect(r.Client.Update(ctx, m)).To(Succeed())
				}
			}

			_, err := r.Reconcile(ctx, req)
			g.Expect(err).ToNot(HaveOccurred())

			var left []string
			for _, c := range rt.Containers() {
				left = append(left, c.Name)
			}
			g.Expect(left).To(ConsistOf("workers-other"))
			// The finalizer is gone, so the API server (here the fake client) removed the pool.
			err = r.Client.Get(ctx, req.NamespacedName, &infrav1.DockerMachinePool{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "DockerMachinePool still exists: %v", err)
		})
	}
}
