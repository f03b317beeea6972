package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/pkg/skew"
)

var dockerMachineGVK = schema.GroupVersionKind{Group: dockerMachineGroup, Version: "v1beta2", Kind: dockerMachineKind}

// controlPlaneMachine is a control-plane Machine of the test Cluster on a CAPD DockerMachine.
func controlPlaneMachine(name, version string, deleting bool) *clusterv1.Machine {
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: testCluster, clusterv1.MachineControlPlaneLabel: ""}},
		Spec: clusterv1.MachineSpec{ClusterName: testCluster, Version: version,
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: dockerMachineGroup, Kind: dockerMachineKind, Name: name}},
	}
	if deleting {
		m.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		m.Finalizers = []string{clusterv1.MachineFinalizer}
	}
	// As Cluster API's Machine controller records it once the Machine's Node exists.
	m.Status.NodeInfo = &corev1.NodeSystemInfo{KubeletVersion: version}
	return m
}

// updatedInPlace is a live control-plane Machine of the test Cluster whose spec.version moved to
// version while its Node still runs kubelet; inProgress marks the in-place update as Cluster API
// does while it runs.
func updatedInPlace(name, version, kubelet string, inProgress bool) *clusterv1.Machine {
	m := controlPlaneMachine(name, version, false)
	m.Status.NodeInfo.KubeletVersion = kubelet
	if inProgress {
		m.Annotations = map[string]string{clusterv1.UpdateInProgressAnnotation: ""}
	}
	return m
}

func dockerMachine(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(dockerMachineGVK)
	u.SetNamespace(testNamespace)
	u.SetName(name)
	return u
}

// controlPlaneContainer is the container CAPD runs a control-plane Machine in.
func controlPlaneContainer(machine string) container.Container {
	return container.Container{Name: dockerMachineContainerName(testCluster, machine), Running: true,
		Labels: map[string]string{container.KindClusterLabel: testCluster, container.KindRoleLabel: container.KindControlPlaneRole}}
}

// TestVersionGateControlPlaneMachinesGone: a pool waiting for its control plane re-opens once
// the old control-plane Machine is proven gone, before the control plane's status says so, and
// on any doubt keeps waiting.
func TestVersionGateControlPlaneMachinesGone(t *testing.T) {
	type state struct {
		machines      []*clusterv1.Machine
		dockerMachine []string
		containers    []string
	}
	upgrading := state{
		machines:      []*clusterv1.Machine{controlPlaneMachine("old", "v1.30.0", true), controlPlaneMachine("new", "v1.31.0", false)},
		dockerMachine: []string{"new"},
		containers:    []string{"new"},
	}
	tests := []struct {
		name string
		// before is what an earlier reconcile saw, when set.
		before *state
		now    state

		wantVerdict skew.Verdict
		wantRequeue bool
	}{
		{
			name:        "the old Machine is deleting, its DockerMachine and container are gone",
			now:         upgrading,
			wantVerdict: skew.Proceed,
		},
		{
			name: "its DockerMachine is still there",
			now: state{machines: upgrading.machines, dockerMachine: []string{"old", "new"},
				containers: []string{"new"}},
			wantVerdict: skew.Wait,
			wantRequeue: true,
		},
		{
			name: "its container is still there",
			now: state{machines: upgrading.machines, dockerMachine: []string{"new"},
				containers: []string{"old", "new"}},
			wantVerdict: skew.Wait,
			wantRequeue: true,
		},
		{
			name: "the old Machine is not being deleted",
			now: state{machines: []*clusterv1.Machine{controlPlaneMachine("old", "v1.30.0", false), controlPlaneMachine("new", "v1.31.0", false)},
				dockerMachine: []string{"new"}, containers: []string{"new"}},
			wantVerdict: skew.Wait,
		},
		{
			name: "a control-plane container of the Cluster belongs to no Machine",
			now: state{machines: upgrading.machines, dockerMachine: []string{"new"},
				containers: []string{"new", "stray"}},
			wantVerdict: skew.Wait,
		},
		{
			name: "the old Machine is on another infrastructure",
			now: state{machines: []*clusterv1.Machine{func() *clusterv1.Machine {
				m := controlPlaneMachine("old", "v1.30.0", true)
				m.Spec.InfrastructureRef.Kind = "AWSMachine"
				return m
			}(), controlPlaneMachine("new", "v1.31.0", false)}, dockerMachine: []string{"new"}, containers: []string{"new"}},
			wantVerdict: skew.Wait,
		},
		{
			// KubeadmControlPlane reports each Machine's kubelet, not its spec.version: a Machine
			// updated in place runs its old kube-apiserver under a new spec.version.
			name: "the other Machine is being updated in place: spec new, its Node still old",
			now: state{machines: []*clusterv1.Machine{controlPlaneMachine("old", "v1.30.0", true), updatedInPlace("new", "v1.31.0", "v1.30.0", true)},
				dockerMachine: []string{"new"}, containers: []string{"new"}},
			wantVerdict: skew.Wait,
		},
		{
			name: "the other Machine's spec is new, its Node still old",
			now: state{machines: []*clusterv1.Machine{controlPlaneMachine("old", "v1.30.0", true), updatedInPlace("new", "v1.31.0", "v1.30.0", false)},
				dockerMachine: []string{"new"}, containers: []string{"new"}},
			wantVerdict: skew.Wait,
		},
		{
			name: "the other Machine's Node has not reported",
			now: state{machines: []*clusterv1.Machine{controlPlaneMachine("old", "v1.30.0", true), func() *clusterv1.Machine {
				m := controlPlaneMachine("new", "v1.31.0", false)
				m.Status.NodeInfo = nil
				return m
			}()}, dockerMachine: []string{"new"}, containers: []string{"new"}},
			wantVerdict: skew.Wait,
		},
		{
			name:   "the old Machine is gone too, seen deleting before",
			before: &state{machines: upgrading.machines, dockerMachine: []string{"old", "new"}, containers: []string{"old", "new"}},
			now: state{machines: []*clusterv1.Machine{controlPlaneMachine("new", "v1.31.0", false)},
				dockerMachine: []string{"new"}, containers: []string{"new"}},
			wantVerdict: skew.Proceed,
		},
		{
			name: "the old Machine is gone, never seen: the control plane's status decides",
			now: state{machines: []*clusterv1.Machine{controlPlaneMachine("new", "v1.31.0", false)},
				dockerMachine: []string{"new"}, containers: []string{"new"}},
			wantVerdict: skew.Wait,
		},
		{
			name:   "seen deleting, gone, but its container is back",
			before: &state{machines: upgrading.machines, dockerMachine: []string{"old", "new"}, containers: []string{"old", "new"}},
			now: state{machines: []*clusterv1.Machine{controlPlaneMachine("new", "v1.31.0", false)},
				dockerMachine: []string{"new"}, containers: []string{"old", "new"}},
			wantVerdict: skew.Wait,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r := &DockerMachinePoolReconciler{}
			reconcile := func(st state) (*poolScope, time.Duration) {
				objs := world{controlPlaneVersions: []string{"v1.30.0", "v1.31.0"}, machinePoolVersion: "v1.31.0"}.objects()
				objs = append(objs, dockerMachineCRD())
				for _, m := range st.machines {
					objs = append(objs, m.DeepCopy())
				}
				for _, name := range st.dockerMachine {
					objs = append(objs, dockerMachine(name))
				}
				rt := fakeruntime.NewWithNodeImages()
				for _, name := range st.containers {
					rt.Add(controlPlaneContainer(name))
				}
				base, _ := newTestReconciler(g, objs, rt)
				c := fake.NewClientBuilder().WithScheme(base.Client.Scheme()).WithRESTMapper(testRESTMapper(base.Client)).WithObjects(objs...).Build()
				r.Client, r.APIReader, r.Runtime = c, c, rt

				s := &poolScope{cluster: &clusterv1.Cluster{}, machinePool: &clusterv1.MachinePool{}, pool: &infrav1.DockerMachinePool{},
					targetVersion: "v1.31.0", targetImage: image(g, "v1.31.0")}
				ctx := context.Background()
				g.Expect(c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: testCluster}, s.cluster)).To(Succeed())
				g.Expect(c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: "mp"}, s.machinePool)).To(Succeed())
				g.Expect(c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: testPool}, s.pool)).To(Succeed())
				res, err := r.reconcileVersionGate(ctx, s)
				g.Expect(err).ToNot(HaveOccurred())
				return s, res.RequeueAfter
			}
			if tt.before != nil {
				s, _ := reconcile(*tt.before)
				g.Expect(s.decision.Verdict).To(Equal(skew.Wait), "before: %s", s.decision.Message)
			}
			s, requeue := reconcile(tt.now)
			g.Expect(s.decision.Verdict).To(Equal(tt.wantVerdict), s.decision.Message)
			if tt.wantRequeue {
				g.Expect(requeue).To(BeNumerically(">", 0))
			} else {
				g.Expect(requeue).To(BeZero())
			}
			gate := conditions.Get(s.pool, infrav1.VersionSkewCondition)
			g.Expect(gate).ToNot(BeNil())
			// The pool's kubelets are judged (reconcileKubeletSkew) against the same versions.
			if tt.wantVerdict == skew.Proceed {
				g.Expect(gate.Message).To(ContainSubstring("control-plane Machine old gone before"))
				g.Expect(s.decision.AdmittedVersions).To(ContainElement("v1.31.0"))
				g.Expect(s.controlPlaneVersions).To(Equal([]string{"v1.31.0"}))
			} else {
				g.Expect(gate.Reason).To(Equal(string(skew.ControlPlaneOlder)))
				g.Expect(s.controlPlaneVersions).To(Equal([]string{"v1.30.0", "v1.31.0"}))
			}
		})
	}
}

// dockerMachineCRD is CAPD's DockerMachine CRD as Cluster API's contract reads it: its name and
// the contract label naming the served version.
func dockerMachineCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "dockermachines." + dockerMachineGroup,
			Labels: map[string]string{clusterv1.GroupVersion.String(): "v1beta2"}},
	}
}

// testRESTMapper knows the scheme's kinds and CAPD's DockerMachine, which the scheme lacks.
func testRESTMapper(c client.Client) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for gvk := range c.Scheme().AllKnownTypes() {
		m.Add(gvk, meta.RESTScopeNamespace)
	}
	m.Add(dockerMachineGVK, meta.RESTScopeNamespace)
	return m
}

// TestHangingControlPlaneDeletionBacksOff: while a control-plane Machine's deletion hangs (a
// drain, a pre-terminate hook), a pool waiting for its control plane looks again quickly at
// first, then less and less often: over ten minutes it reconciles a few dozen times, not twice a
// second. The Machine watch and the engine's destroy events still wake it on each step.
func TestHangingControlPlaneDeletionBacksOff(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	objs := world{controlPlaneVersions: []string{"v1.30.0", "v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}.objects()
	objs = append(objs, dockerMachineCRD(),
		controlPlaneMachine("old", "v1.30.0", true), controlPlaneMachine("new", "v1.31.0", false),
		dockerMachine("old"), dockerMachine("new"))
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.30.0"), image(g, "v1.31.0"))
	rt.Add(controlPlaneContainer("old"))
	rt.Add(controlPlaneContainer("new"))
	r, _ := newTestReconciler(g, objs, rt)
	c := fake.NewClientBuilder().WithScheme(r.Client.Scheme()).WithRESTMapper(testRESTMapper(r.Client)).WithObjects(objs...).
		WithStatusSubresource(&infrav1.DockerMachinePool{}, &infrav1.DockerMachinePoolMachine{}, &clusterv1.Machine{}).Build()
	r.Client, r.APIReader = c, c
	now := time.Now()
	r.now = func() time.Time { return now }

	const hang = 10 * time.Minute
	var reconciles int
	var requeues []time.Duration
	for start := now; now.Sub(start) < hang; reconciles++ {
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: testPool}})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.RequeueAfter).To(BeNumerically(">", 0), "a pending deletion is looked at again")
		requeues = append(requeues, res.RequeueAfter)
		now = now.Add(res.RequeueAfter)
	}
	t.Logf("%d reconciles in %s; requeues %v", reconciles, hang, requeues)
	g.Expect(requeues[0]).To(Equal(goneMachineRecheck), "the first look again is quick")
	g.Expect(reconciles).To(BeNumerically("<=", 40), "reconciles of one waiting pool over a hung deletion")
	pool := &infrav1.DockerMachinePool{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: testPool}, pool)).To(Succeed())
	g.Expect(pool.Status.VersionGate.WaitingReason).To(Equal(string(skew.ControlPlaneOlder)))
}
