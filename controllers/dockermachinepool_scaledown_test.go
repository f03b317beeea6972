package controllers

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/pkg/skew"
)

// TestScaleDownRemovesTheChosenInstances: a scale-down removes the instances whose Machine (or
// DockerMachinePoolMachine) carries cluster.x-k8s.io/delete-machine first, as an autoscaler that
// chose a node expects, even where the default order (the newest first) picks another; with
// more marked than removed, the newest of the marked; with fewer, the marked and then the
// default order. A mark the cache does not show yet, written before the count was lowered, counts.
func TestScaleDownRemovesTheChosenInstances(t *testing.T) {
	// Four ready instances, the oldest first; the default order removes w3 first.
	names := []string{"w0", "w1", "w2", "w3"}
	tests := []struct {
		name     string
		replicas int32
		// markedMachines and markedInfra carry the annotation on their Machine or their
		// DockerMachinePoolMachine; liveOnly carry it on the API server, not yet in the cache.
		markedMachines, markedInfra, liveOnly []string
		wantRemoved                           []string
	}{
		{name: "nothing marked: the newest goes", replicas: 3, wantRemoved: []string{"w3"}},
		{name: "a marked Machine goes, not the newest", replicas: 3, markedMachines: []string{"w0"}, wantRemoved: []string{"w0"}},
		{name: "a marked DockerMachinePoolMachine goes", replicas: 3, markedInfra: []string{"w1"}, wantRemoved: []string{"w1"}},
		{name: "several marked: those go", replicas: 2, markedMachines: []string{"w0", "w1"}, wantRemoved: []string{"w0", "w1"}},
		{name: "more marked than removed: the newest of the marked", replicas: 3, markedMachines: []string{"w0", "w1"}, wantRemoved: []string{"w1"}},
		{name: "fewer marked than removed: the marked, then the newest", replicas: 2, markedMachines: []string{"w0"}, wantRemoved: []string{"w0", "w3"}},
		{name: "marked, no scale-down: nothing goes", replicas: 4, markedMachines: []string{"w0"}},
		{name: "marked before the count was lowered, the cache not showing it yet", replicas: 3, liveOnly: []string{"w0"}, wantRemoved: []string{"w0"}},
		{name: "to zero", replicas: 0, markedMachines: []string{"w0"}, wantRemoved: names},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
			objs := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: tt.replicas, dataSecret: true}.objects()
			// live is what the API server holds, where the cache (objs) may lag.
			live := make([]client.Object, 0, len(objs)+2*len(names))
			for _, o := range objs {
				live = append(live, o.DeepCopyObject().(client.Object))
			}
			mark := func(o client.Object) {
				o.SetAnnotations(map[string]string{clusterv1.DeleteMachineAnnotation: time.Now().String()})
			}
			for i, name := range names {
				c := nodeContainer(g, name, "v1.31.0", time.Now().Add(time.Duration(i-len(names))*time.Hour))
				c.Labels[infrav1.ImageLabel] = image(g, "v1.31.0")
				rt.Add(c)
				infra, owner := joinedMachine(c), ownerMachine(name)
				infra.UID, owner.UID = types.UID("infra-"+name), types.UID("machine-"+name)
				owner.Spec.Version = "v1.31.0"
				if slices.Contains(tt.markedMachines, name) {
					mark(owner)
				}
				if slices.Contains(tt.markedInfra, name) {
					mark(infra)
				}
				liveOwner := owner.DeepCopy()
				if slices.Contains(tt.liveOnly, name) {
					mark(liveOwner)
				}
				objs = append(objs, infra, owner)
				live = append(live, infra.DeepCopy(), liveOwner)
			}
			r, _ := newTestReconciler(g, objs, rt)
			r.APIReader = fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(live...).Build()

			reconcilePool(g, r)
			var removed []string
			for _, name := range names {
				m := &clusterv1.Machine{}
				g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: name}, m)).To(Succeed())
				if !m.DeletionTimestamp.IsZero() {
					removed = append(removed, name)
				}
			}
			g.Expect(removed).To(ConsistOf(stringsToAny(tt.wantRemoved)...))
			g.Expect(rt.Containers()).To(HaveLen(len(names)), "a container goes with its Machine, by the machines' controller")
		})
	}
}

// TestReplicasManagedBy: with cluster.x-k8s.io/replicas-managed-by on the MachinePool (whatever
// its value), the pool follows the MachinePool's replicas, whoever sets them, exactly as without:
// nothing but the pool creates its containers, so there is no count of its own to derive the
// MachinePool's from. Cluster API only reports such a MachinePool's phase as Scaling.
func TestReplicasManagedBy(t *testing.T) {
	for _, value := range []*string{nil, ptr.To("cluster-autoscaler"), ptr.To(""), ptr.To("false")} {
		name := "no annotation"
		if value != nil {
			name = "replicas-managed-by=" + *value
		}
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
			objs := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 3, dataSecret: true}.objects()
			for _, o := range objs {
				if mp, ok := o.(*clusterv1.MachinePool); ok && value != nil {
					mp.Annotations = map[string]string{clusterv1.ReplicasManagedByAnnotation: *value}
				}
			}
			r, _ := newTestReconciler(g, objs, rt)
			setReplicas := func(n *int32) {
				mp := &clusterv1.MachinePool{}
				g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: "mp"}, mp)).To(Succeed())
				mp.Spec.Replicas = n
				g.Expect(r.Client.Update(ctx, mp)).To(Succeed())
			}
			deleting := func() int {
				machines := &infrav1.DockerMachinePoolMachineList{}
				g.Expect(r.Client.List(ctx, machines)).To(Succeed())
				n := 0
				for _, m := range machines.Items {
					if !m.DeletionTimestamp.IsZero() {
						n++
					}
				}
				return n
			}

			reconcilePool(g, r)
			g.Expect(rt.Containers()).To(HaveLen(3), "scaled up to the MachinePool's replicas")
			setReplicas(ptr.To[int32](1))
			reconcilePool(g, r)
			g.Expect(deleting()).To(Equal(2), "scaled down to the MachinePool's replicas")
			setReplicas(nil)
			reconcilePool(g, r)
			g.Expect(rt.Containers()).To(HaveLen(3))
			g.Expect(deleting()).To(Equal(2), "no replicas yet: the pool stays as it is")
		})
	}
}

// TestScaleDownWithUnreadableControlPlaneVersion: a control plane that reports a version that
// does not parse stops creation only (InvalidVersion), as docs/contract.md promises: the pool
// still scales down, and the judgement of its kubelets becomes Unknown, naming the version.
func TestScaleDownWithUnreadableControlPlaneVersion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
	objs := world{controlPlaneVersions: []string{"v1.31"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}.objects()
	names := []string{"w0", "w1", "w2"}
	for i, name := range names {
		c := nodeContainer(g, name, "v1.31.0", time.Now().Add(time.Duration(i-len(names))*time.Hour))
		c.Labels[infrav1.ImageLabel] = image(g, "v1.31.0")
		rt.Add(c)
		owner := ownerMachine(name)
		owner.Spec.Version = "v1.31.0"
		objs = append(objs, joinedMachine(c), owner)
	}
	r, _ := newTestReconciler(g, objs, rt)

	pool := reconcilePool(g, r)
	deleting := 0
	for _, name := range names {
		m := &clusterv1.Machine{}
		g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: name}, m)).To(Succeed())
		if !m.DeletionTimestamp.IsZero() {
			deleting++
		}
	}
	g.Expect(deleting).To(Equal(2), "a pool of 3 asked for 1 scales down")
	gate := conditions.Get(pool, infrav1.VersionSkewCondition)
	g.Expect(gate).ToNot(BeNil())
	g.Expect(gate.Reason).To(Equal(string(skew.InvalidVersion)))
	kubelets := conditions.Get(pool, infrav1.KubeletSkewCondition)
	g.Expect(kubelets).ToNot(BeNil())
	g.Expect(kubelets.Status).To(Equal(metav1.ConditionUnknown))
	g.Expect(kubelets.Message).To(ContainSubstring(`"v1.31"`))
}
