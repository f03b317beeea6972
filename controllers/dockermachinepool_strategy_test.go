package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// TestRollingUpdate rolls a pool of 4 outdated, ready containers to its target, reconcile after
// reconcile, with the world in between doing what it does (a removed machine's container goes; a
// new container becomes ready one reconcile after its creation). At every step the pool runs at
// most desired + maxSurge containers and keeps at least desired - maxUnavailable ready, and it
// uses what the strategy allows; the gate still decides every replacement.
func TestRollingUpdate(t *testing.T) {
	const desired = 4
	num, pct := intstr.FromInt32, intstr.FromString
	tests := []struct {
		name           string
		maxSurge       *intstr.IntOrString
		maxUnavailable *intstr.IntOrString
		gateWaits      bool
		// wantMost and wantLeastReady are the most containers and the fewest ready ones at once.
		wantMost, wantLeastReady int
		wantSteps                int
	}{
		{name: "default: one at a time, never below desired", wantMost: 5, wantLeastReady: 4, wantSteps: 5},
		{name: "maxSurge 2", maxSurge: ptr.To(num(2)), wantMost: 6, wantLeastReady: 4, wantSteps: 3},
		{name: "maxSurge above desired: all new at once", maxSurge: ptr.To(num(10)), wantMost: 8, wantLeastReady: 4, wantSteps: 2},
		{name: "maxSurge 0, maxUnavailable 1: remove first", maxSurge: ptr.To(num(0)), maxUnavailable: ptr.To(num(1)), wantMost: 4, wantLeastReady: 3, wantSteps: 4},
		{name: "percentages: 50% surge (2), 25% unavailable (1)", maxSurge: ptr.To(pct("50%")), maxUnavailable: ptr.To(pct("25%")), wantMost: 6, wantLeastReady: 3, wantSteps: 2},
		{name: "gate waiting: nothing replaced, whatever the strategy", maxSurge: ptr.To(num(10)), maxUnavailable: ptr.To(num(4)), gateWaits: true, wantMost: 4, wantLeastReady: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rt := fakeruntime.NewWithNodeImages()
			for _, v := range []string{"v1.30.0", "v1.31.0"} {
				rt.AddNodeImage(image(g, v))
			}
			controlPlane := "v1.31.0"
			if tt.gateWaits {
				controlPlane = "v1.30.0"
			}
			objs := world{controlPlaneVersions: []string{controlPlane}, machinePoolVersion: "v1.31.0", replicas: desired, dataSecret: true}.objects()
			for _, o := range objs {
				if pool, ok := o.(*infrav1.DockerMachinePool); ok {
					pool.Spec.Strategy.RollingUpdate = infrav1.DockerMachinePoolRollingUpdate{MaxSurge: tt.maxSurge, MaxUnavailable: tt.maxUnavailable}
				}
			}
			for i := range desired {
				c := nodeContainer(g, "old-"+itoa(i), "v1.30.0", time.Now().Add(-time.Hour))
				rt.Add(c)
				objs = append(objs, joinedMachine(c))
			}
			r, _ := newTestReconciler(g, objs, rt)

			most, leastReady, steps := 0, desired, 0
			for ; steps < 20; steps++ {
				if !tt.gateWaits && rolledOut(rt.Containers(), desired) {
					break
				}
				count, ready := rolloutStep(g, r, rt)
				most, leastReady = max(most, count), min(leastReady, ready)
				if tt.gateWaits && steps == 3 {
					break
				}
			}
			t.Logf("%d reconciles; at most %d containers, at least %d ready", steps, most, leastReady)
			g.Expect(most).To(Equal(tt.wantMost), "most containers at once")
			g.Expect(leastReady).To(Equal(tt.wantLeastReady), "fewest ready at once")
			if tt.gateWaits {
				g.Expect(versionsOf(rt.Containers())).To(HaveEach("v1.30.0"))
				return
			}
			g.Expect(rolledOut(rt.Containers(), desired)).To(BeTrue(), "rolled out: %v", versionsOf(rt.Containers()))
			g.Expect(steps).To(Equal(tt.wantSteps), "reconciles to roll out")
		})
	}
}

// rolloutStep reconciles the pool once, then does what the world does: a removed machine's
// container goes, with the machine, and a new container joins. It returns how many containers ran after the reconcile
// and how many of them were ready.
func rolloutStep(g Gomega, r *DockerMachinePoolReconciler, rt *fakeruntime.Runtime) (count, ready int) {
	ctx := context.Background()
	reconcilePool(g, r)
	machines := &infrav1.DockerMachinePoolMachineList{}
	g.Expect(r.Client.List(ctx, machines, client.InNamespace(testNamespace))).To(Succeed())
	byName := map[string]*infrav1.DockerMachinePoolMachine{}
	for i := range machines.Items {
		byName[machines.Items[i].Name] = &machines.Items[i]
	}
	for _, c := range rt.Containers() {
		m, ok := byName[c.Name]
		switch {
		case !ok:
			g.Expect(rt.Delete(ctx, c.Name)).To(Succeed())
		case !m.DeletionTimestamp.IsZero():
			// What the machine's controller does: it removes the container, then its finalizer.
			g.Expect(rt.Delete(ctx, c.Name)).To(Succeed())
			m.Finalizers = nil
			g.Expect(r.Client.Update(ctx, m)).To(Succeed())
			delete(byName, c.Name)
		case ptr.Deref(m.Status.Initialization.Provisioned, false):
			ready++
		}
	}
	count = len(rt.Containers())
	// A new container joins by the next reconcile.
	for _, m := range byName {
		if !ptr.Deref(m.Status.Initialization.Provisioned, false) {
			m.Status.Initialization.Provisioned = ptr.To(true)
			g.Expect(r.Client.Status().Update(ctx, m)).To(Succeed())
		}
	}
	return count, ready
}

// rolledOut is true when the pool runs desired containers, all of the target v1.31.0.
func rolledOut(cs []container.Container, desired int) bool {
	if len(cs) != desired {
		return false
	}
	for _, c := range cs {
		if c.Labels[infrav1.KubernetesVersionLabel] != "v1.31.0" {
			return false
		}
	}
	return true
}

// TestMovedTagRollsNothing: the engine reports a container's image by ID once its tag moved to
// another image (a rebuild); the pool compares the reference it recorded at creation, so a rebuild
// of the same version rolls nothing, while a container whose kubelet runs another release than
// the target is replaced, under the gate.
func TestMovedTagRollsNothing(t *testing.T) {
	const movedID = "sha256:4b825dc642cb6eb9a060e54bf8d69288fbee4904"
	tests := []struct {
		name         string
		withLabel    bool
		kubelet      string // the Node's kubeletVersion recorded on the machine; "" for none
		controlPlane string
		wantRolled   bool
	}{
		{name: "tag moved to a rebuild of the target version: nothing rolls", withLabel: true, kubelet: "v1.31.0", controlPlane: "v1.31.0"},
		{name: "tag moved, Node not read yet: nothing rolls", withLabel: true, controlPlane: "v1.31.0"},
		{name: "a container made before the label, tag moved: rolled as before", controlPlane: "v1.31.0", wantRolled: true},
		{name: "the Node runs another release than the target: rolled", withLabel: true, kubelet: "v1.30.0", controlPlane: "v1.31.0", wantRolled: true},
		{name: "the Node runs another release, the gate waits: not rolled", withLabel: true, kubelet: "v1.30.0", controlPlane: "v1.30.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.30.0"), image(g, "v1.31.0"))
			objs := world{controlPlaneVersions: []string{tt.controlPlane}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}.objects()
			c := nodeContainer(g, "workers-rebuilt", "v1.31.0", time.Now().Add(-time.Hour))
			c.Image = movedID
			if tt.withLabel {
				c.Labels[infrav1.ImageLabel] = image(g, "v1.31.0")
			}
			rt.Add(c)
			m := joinedMachine(c)
			m.Status.NodeKubeletVersion = tt.kubelet
			objs = append(objs, m)
			r, _ := newTestReconciler(g, objs, rt)
			reconcilePool(g, r)

			var created []container.Container
			for _, other := range rt.Containers() {
				if other.Name != c.Name {
					created = append(created, other)
				}
			}
			if !tt.wantRolled {
				g.Expect(created).To(BeEmpty(), "no replacement")
				return
			}
			g.Expect(created).To(HaveLen(1), "one replacement (maxSurge 1)")
			g.Expect(created[0].Labels).To(HaveKeyWithValue(infrav1.ImageLabel, image(g, "v1.31.0")), "the reference is recorded")
		})
	}
}

// TestNoRolloutWithoutReplicas: without the MachinePool's spec.replicas (Cluster API's webhook
// defaults it; a MachinePool written with webhooks off has none) the pool's desired count is its
// own size, which every surge container would raise. The pool then replaces nothing, neither
// creating nor removing, and says why in ReplicasReady.
func TestNoRolloutWithoutReplicas(t *testing.T) {
	g := NewWithT(t)
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.30.0"), image(g, "v1.31.0"))
	objs := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", dataSecret: true}.objects()
	for _, o := range objs {
		if mp, ok := o.(*clusterv1.MachinePool); ok {
			mp.Spec.Replicas = nil
		}
	}
	for i := range 2 {
		c := nodeContainer(g, "old-"+itoa(i), "v1.30.0", time.Now().Add(-time.Hour))
		rt.Add(c)
		objs = append(objs, joinedMachine(c))
	}
	r, _ := newTestReconciler(g, objs, rt)

	for step := range 5 {
		count, ready := rolloutStep(g, r, rt)
		g.Expect(count).To(Equal(2), "containers after reconcile %d", step+1)
		g.Expect(ready).To(Equal(2), "ready containers after reconcile %d", step+1)
	}
	g.Expect(versionsOf(rt.Containers())).To(ConsistOf("v1.30.0", "v1.30.0"), "nothing replaced")
	pool := &infrav1.DockerMachinePool{}
	g.Expect(r.Client.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: testPool}, pool)).To(Succeed())
	replicasReady := conditions.Get(pool, infrav1.ReplicasReadyCondition)
	g.Expect(replicasReady).ToNot(BeNil())
	g.Expect(replicasReady.Message).To(ContainSubstring("spec.replicas"))
}
