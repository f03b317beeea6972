package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/pkg/skew"
)

// ownerMachine is the Machine Cluster API makes for a DockerMachinePoolMachine of the pool, with
// the given conditions; a finalizer keeps it readable once deleted.
func ownerMachine(name string, conds ...metav1.Condition) *clusterv1.Machine {
	return &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, Finalizers: []string{clusterv1.MachineFinalizer},
			Labels: map[string]string{clusterv1.ClusterNameLabel: testCluster, clusterv1.MachinePoolNameLabel: "mp"}},
		Spec: clusterv1.MachineSpec{ClusterName: testCluster, InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "DockerMachinePoolMachine", Name: name,
		}},
		Status: clusterv1.MachineStatus{Conditions: conds},
	}
}

func machineCondition(conditionType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: status, Reason: reason, LastTransitionTime: metav1.Now()}
}

// TestDockerMachinePoolRemediation: a Machine a MachineHealthCheck hands to the pool is deleted
// and replaced under the gate, as a MachineSet does; one found healthy again loses the condition;
// while the gate admits no version, remediation waits instead of only removing capacity.
func TestDockerMachinePoolRemediation(t *testing.T) {
	unhealthy := []metav1.Condition{
		machineCondition(clusterv1.MachineHealthCheckSucceededCondition, metav1.ConditionFalse, clusterv1.MachineHealthCheckNodeStartupTimeoutReason),
		machineCondition(clusterv1.MachineOwnerRemediatedCondition, metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason),
	}
	healthyAgain := []metav1.Condition{
		machineCondition(clusterv1.MachineHealthCheckSucceededCondition, metav1.ConditionTrue, clusterv1.MachineHealthCheckSucceededReason),
		machineCondition(clusterv1.MachineOwnerRemediatedCondition, metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason),
	}
	admittedV131 := infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.31.0", AdmittedImage: "kindest/node:v1.31.0",
		WaitingReason: string(skew.ControlPlaneOlder), WaitingSince: &metav1.Time{Time: time.Now().Add(-time.Hour)}}

	tests := []struct {
		name  string
		world world
		conds []metav1.Condition
		// wantReason is the Machine's OwnerRemediated reason after the reconcile; "" for none.
		wantReason      string
		wantDeleted     bool
		wantNewVersions []string // versions of the containers created by the reconcile
		// images are on the engine; v1.31.0 and v1.32.0 when nil.
		images []string
		// wantMessage is a substring of the OwnerRemediated message.
		wantMessage string
	}{
		{
			name:            "unhealthy: deleted and replaced at the target",
			world:           world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true},
			conds:           unhealthy,
			wantReason:      infrav1.MachineRemediationMachineDeletingReason,
			wantDeleted:     true,
			wantNewVersions: []string{"v1.31.0"},
		},
		{
			name: "unhealthy while the gate waits: replaced at the last admitted version",
			world: world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.32.0", replicas: 2, dataSecret: true,
				gate: admittedV131},
			conds:           unhealthy,
			wantReason:      infrav1.MachineRemediationMachineDeletingReason,
			wantDeleted:     true,
			wantNewVersions: []string{"v1.31.0"},
		},
		{
			name:       "unhealthy and the gate admits no version: deferred, kept",
			world:      world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.32.0", replicas: 2, dataSecret: true},
			conds:      unhealthy,
			wantReason: infrav1.MachineRemediationDeferredReason,
		},
		{
			name:        "unhealthy and no bootstrap data to replace it with: deferred, kept",
			world:       world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 2},
			conds:       unhealthy,
			wantReason:  infrav1.MachineRemediationDeferredReason,
			wantMessage: "data secret",
		},
		{
			name: "unhealthy while the data waits for a refresh: deferred, kept",
			world: world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.32.0", replicas: 2, dataSecret: true,
				gate: func() infrav1.DockerMachinePoolVersionGateStatus {
					gate := *admittedV131.DeepCopy()
					gate.BootstrapDataHashAtPause = testDataHash(t)
					return gate
				}()},
			conds:       unhealthy,
			wantReason:  infrav1.MachineRemediationDeferredReason,
			wantMessage: "newer than the pause",
		},
		{
			name:        "unhealthy and the image of its replacement is missing: deferred, kept",
			world:       world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.32.0", replicas: 2, dataSecret: true, gate: admittedV131},
			images:      []string{"v1.32.0"},
			conds:       unhealthy,
			wantReason:  infrav1.MachineRemediationDeferredReason,
			wantMessage: "kindest/node:v1.31.0 is not present",
		},
		{
			name:  "healthy again: the condition is removed, the Machine kept",
			world: world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true},
			conds: healthyAgain,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			images := tt.images
			if images == nil {
				images = []string{"v1.31.0", "v1.32.0"}
			}
			rt := fakeruntime.NewWithNodeImages()
			for _, v := range images {
				rt.AddNodeImage(image(g, v))
			}
			healthy := nodeContainer(g, "workers-healthy", "v1.31.0", rt.Now().Add(-time.Hour))
			sick := nodeContainer(g, "workers-sick", "v1.31.0", rt.Now().Add(-time.Hour))
			rt.Add(healthy)
			rt.Add(sick)
			objs := append(tt.world.objects(), joinedMachine(healthy), joinedMachine(sick), ownerMachine(healthy.Name), ownerMachine(sick.Name, tt.conds...))
			r, _ := newTestReconciler(g, objs, rt)
			reconcilePool(g, r)

			machine := &clusterv1.Machine{}
			g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: sick.Name}, machine)).To(Succeed())
			g.Expect(machine.DeletionTimestamp.IsZero()).To(Equal(!tt.wantDeleted))
			remediated := conditions.Get(machine, clusterv1.MachineOwnerRemediatedCondition)
			if tt.wantReason == "" {
				g.Expect(remediated).To(BeNil())
			} else {
				g.Expect(remediated).ToNot(BeNil())
				g.Expect(remediated.Reason).To(Equal(tt.wantReason), remediated.Message)
				g.Expect(remediated.Message).To(ContainSubstring(tt.wantMessage))
			}

			other := &clusterv1.Machine{}
			g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: healthy.Name}, other)).To(Succeed())
			g.Expect(other.DeletionTimestamp.IsZero()).To(BeTrue(), "a healthy Machine is never remediated")

			var created []string
			for _, c := range rt.Containers() {
				if c.Name != healthy.Name && c.Name != sick.Name {
					created = append(created, c.Labels[infrav1.KubernetesVersionLabel])
				}
			}
			g.Expect(created).To(ConsistOf(labelValues(g, tt.wantNewVersions)))
		})
	}
}

func labelValues(g Gomega, versions []string) []string {
	out := []string{}
	for _, v := range versions {
		l, err := skew.VersionLabelValue(v)
		g.Expect(err).ToNot(HaveOccurred())
		out = append(out, l)
	}
	return out
}

// testDataHash is the hash of the test's bootstrap data, as the pool records it.
func testDataHash(t *testing.T) string {
	t.Helper()
	data, err := bootstrap.NewData([]byte(cloudConfig), bootstrap.FormatCloudConfig)
	if err != nil {
		t.Fatal(err)
	}
	return data.Hash
}

// TestRemediationMaxInFlight: with spec.remediation.maxInFlight set, the pool deletes no more
// unhealthy Machines than it allows, counting those still being deleted; the others wait, and
// say why.
func TestRemediationMaxInFlight(t *testing.T) {
	unhealthy := []metav1.Condition{
		machineCondition(clusterv1.MachineHealthCheckSucceededCondition, metav1.ConditionFalse, clusterv1.MachineHealthCheckNodeStartupTimeoutReason),
		machineCondition(clusterv1.MachineOwnerRemediatedCondition, metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason),
	}
	tests := []struct {
		name        string
		maxInFlight *intstr.IntOrString
		wantDeleted int
	}{
		{name: "no limit: every unhealthy Machine at once", wantDeleted: 3},
		{name: "one at a time", maxInFlight: ptr.To(intstr.FromInt32(1)), wantDeleted: 1},
		{name: "a percentage of the desired count, rounded up", maxInFlight: ptr.To(intstr.FromString("40%")), wantDeleted: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 4, dataSecret: true}
			objs := w.objects()
			objs[len(objs)-1].(*infrav1.DockerMachinePool).Spec.Remediation.MaxInFlight = tt.maxInFlight
			var sick []string
			for i := range 4 {
				c := nodeContainer(g, "workers-"+itoa(i), "v1.31.0", rt.Now().Add(-time.Hour))
				rt.Add(c)
				conds := unhealthy
				if i == 0 {
					conds = nil
				} else {
					sick = append(sick, c.Name)
				}
				objs = append(objs, joinedMachine(c), ownerMachine(c.Name, conds...))
			}
			r, _ := newTestReconciler(g, objs, rt)
			deleted := func() (n int) {
				for _, name := range sick {
					m := &clusterv1.Machine{}
					g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: name}, m)).To(Succeed())
					if !m.DeletionTimestamp.IsZero() {
						n++
					} else if tt.maxInFlight != nil {
						g.Expect(conditions.GetReason(m, clusterv1.MachineOwnerRemediatedCondition)).To(Equal(infrav1.MachineRemediationDeferredReason))
						g.Expect(conditions.GetMessage(m, clusterv1.MachineOwnerRemediatedCondition)).To(ContainSubstring("remediations in flight"))
					}
				}
				return n
			}
			reconcilePool(g, r)
			g.Expect(deleted()).To(Equal(tt.wantDeleted))
			// The deleted ones are in flight until they are gone: nothing more is deleted.
			reconcilePool(g, r)
			g.Expect(deleted()).To(Equal(tt.wantDeleted))
		})
	}
}

// TestPatchOwnerRemediatedLeavesItsMachine: the inventory's Machines share their conditions with
// the manager's cache, so the patch is made on a copy and the Machine handed in is left as it was.
func TestPatchOwnerRemediatedLeavesItsMachine(t *testing.T) {
	g := NewWithT(t)
	unhealthy := machineCondition(clusterv1.MachineOwnerRemediatedCondition, metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason)
	machine := ownerMachine("workers-remediated", unhealthy)
	c := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(machine.DeepCopy()).
		WithStatusSubresource(&clusterv1.Machine{}).Build()
	r := &DockerMachinePoolReconciler{Client: c}
	cached := machine.DeepCopy()

	deleting := machineCondition(clusterv1.MachineOwnerRemediatedCondition, metav1.ConditionFalse, "Deleting")
	g.Expect(r.patchOwnerRemediated(context.Background(), machine, &deleting, nil)).To(Succeed())

	g.Expect(machine).To(Equal(cached), "the Machine handed in is unchanged")
	patched := &clusterv1.Machine{}
	g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(machine), patched)).To(Succeed())
	g.Expect(conditions.GetReason(patched, clusterv1.MachineOwnerRemediatedCondition)).To(Equal("Deleting"))
}
