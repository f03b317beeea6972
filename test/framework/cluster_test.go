package framework

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capdv1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/capdmp/capdmp/internal/test/testenv"
)

func TestRenderCluster(t *testing.T) {
	base := ClusterSpec{Name: "c1", ControlPlaneVersion: "v1.36.3", ControlPlaneReplicas: 1, PoolVersion: "v1.35.4", PoolReplicas: 2}
	withKnobs := base
	withKnobs.SkipAddons = true
	withKnobs.KubeadmTimeout = 10 * time.Minute
	withKnobs.ControlPlaneBootstrapTimeout = 15 * time.Minute
	withKnobs.ControlPlaneNodeStartupTimeout = 12 * time.Minute

	tests := []struct {
		name                   string
		spec                   ClusterSpec
		wantBootstrapTimeout   *metav1.Duration
		wantKubeadmSeconds     *int32
		wantSkippedAddons      bool
		wantNodeStartupTimeout int32
	}{
		{name: "the template as it is", spec: base, wantNodeStartupTimeout: 600},
		{
			name:                   "the suite's knobs",
			spec:                   withKnobs,
			wantBootstrapTimeout:   &metav1.Duration{Duration: 15 * time.Minute},
			wantKubeadmSeconds:     ptr.To[int32](600),
			wantSkippedAddons:      true,
			wantNodeStartupTimeout: 720,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := renderCluster(tt.spec)
			g.Expect(err).NotTo(HaveOccurred())

			dmt := &capdv1.DockerMachineTemplate{} //nolint:staticcheck // the kind the template uses
			g.Expect(fromObjects(objs, "DockerMachineTemplate", dmt)).To(Succeed())
			g.Expect(dmt.Spec.Template.Spec.BootstrapTimeout).To(Equal(tt.wantBootstrapTimeout))

			kcp := &controlplanev1.KubeadmControlPlane{}
			g.Expect(fromObjects(objs, "KubeadmControlPlane", kcp)).To(Succeed())
			g.Expect(kcp.Spec.Version).To(Equal(tt.spec.ControlPlaneVersion))
			g.Expect(kcp.Spec.KubeadmConfigSpec.JoinConfiguration.Timeouts.EtcdAPICallSeconds).To(Equal(tt.wantKubeadmSeconds))
			g.Expect(kcp.Spec.KubeadmConfigSpec.InitConfiguration.Timeouts.ControlPlaneComponentHealthCheckSeconds).To(Equal(tt.wantKubeadmSeconds))
			g.Expect(kcp.Spec.KubeadmConfigSpec.JoinConfiguration.Timeouts.TLSBootstrapSeconds).To(Equal(tt.wantKubeadmSeconds))
			g.Expect(kcp.Spec.Remediation.MaxRetry).To(HaveValue(BeEquivalentTo(3)))

			mhc := &clusterv1.MachineHealthCheck{}
			g.Expect(fromObjects(withName(objs, tt.spec.Name+"-control-plane"), "MachineHealthCheck", mhc)).To(Succeed())
			g.Expect(mhc.Spec.Checks.NodeStartupTimeoutSeconds).To(HaveValue(Equal(tt.wantNodeStartupTimeout)))
			var wantSkipPhases []string
			if tt.wantSkippedAddons {
				wantSkipPhases = []string{"addon/coredns", "addon/kube-proxy"}
			}
			g.Expect(kcp.Spec.KubeadmConfigSpec.InitConfiguration.SkipPhases).To(Equal(wantSkipPhases))
			_, skipsCoreDNS := kcp.Annotations[controlplanev1.SkipCoreDNSAnnotation]
			g.Expect(skipsCoreDNS).To(Equal(tt.wantSkippedAddons))
			if tt.wantSkippedAddons {
				g.Expect(kcp.Spec.KubeadmConfigSpec.JoinConfiguration.NodeRegistration.IgnorePreflightErrors).To(ContainElement("ImagePull"),
					"a control-plane join pulls CoreDNS's image in preflight unless told not to")
			} else {
				g.Expect(kcp.Spec.KubeadmConfigSpec.JoinConfiguration.NodeRegistration.IgnorePreflightErrors).NotTo(ContainElement("ImagePull"))
			}

			mp := &clusterv1.MachinePool{}
			g.Expect(fromObjects(objs, "MachinePool", mp)).To(Succeed())
			g.Expect(mp.Spec.Template.Spec.Version).To(Equal(tt.spec.PoolVersion))
			g.Expect(mp.Spec.Replicas).To(Equal(ptr.To(int32(tt.spec.PoolReplicas))))
		})
	}
}

// withName returns the objects of that name.
func withName(objs []unstructured.Unstructured, name string) []unstructured.Unstructured {
	var out []unstructured.Unstructured
	for _, o := range objs {
		if o.GetName() == name {
			out = append(out, o)
		}
	}
	return out
}

// fromObjects converts the one object of kind in objs into into.
func fromObjects(objs []unstructured.Unstructured, kind string, into runtime.Object) error {
	var found []unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		return fmt.Errorf("want one %s, found %d", kind, len(found))
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(found[0].Object, into)
}

func TestNotHealthy(t *testing.T) {
	long := strings.Repeat("x", 250)
	tests := []struct {
		name       string
		conditions []metav1.Condition
		want       []string
	}{
		{
			name: "all healthy",
			conditions: []metav1.Condition{
				{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"},
				{Type: "Paused", Status: metav1.ConditionFalse, Reason: "NotPaused"},
				{Type: "Deleting", Status: metav1.ConditionFalse, Reason: "NotDeleting"},
				{Type: "Updating", Status: metav1.ConditionFalse, Reason: "NotUpdating"},
			},
		},
		{
			name:       "healthy when False, but True",
			conditions: []metav1.Condition{{Type: "Deleting", Status: metav1.ConditionTrue, Reason: "Deleting", Message: "Drain not completed"}},
			want:       []string{"Machine m1 Deleting=True Deleting: Drain not completed"},
		},
		{
			name: "False and Unknown, True left out",
			conditions: []metav1.Condition{
				{Type: "Ready", Status: metav1.ConditionFalse, Reason: "NotReady", Message: "* NodeHealthy: Node not found"},
				{Type: "InfrastructureReady", Status: metav1.ConditionTrue, Reason: "Ready"},
				{Type: "NodeHealthy", Status: metav1.ConditionUnknown, Reason: "NodeInspectionFailed"},
			},
			want: []string{
				"Machine m1 Ready=False NotReady: * NodeHealthy: Node not found",
				"Machine m1 NodeHealthy=Unknown NodeInspectionFailed: ",
			},
		},
		{
			name: "a command's output: its first line",
			conditions: []metav1.Condition{{Type: "BootstrapExecSucceeded", Status: metav1.ConditionFalse, Reason: "BootstrapFailed",
				Message: "Running boostrap command [ kubeadm join ]\nERROR: context deadline exceeded\nSTDOUT: ..."}},
			want: []string{"Machine m1 BootstrapExecSucceeded=False BootstrapFailed: Running boostrap command [ kubeadm join ] / ERROR: context deadline exceeded"},
		},
		{
			name:       "a long line, cut",
			conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "NotReady", Message: long}},
			want:       []string{"Machine m1 Ready=False NotReady: " + long[:200] + "..."},
		},
		{
			name: "a long command: its error stays",
			conditions: []metav1.Condition{{Type: "BootstrapCompleted", Status: metav1.ConditionFalse, Reason: "Failed",
				Message: long + "\nERROR: context deadline exceeded\nSTDOUT: ..."}},
			want: []string{"Machine m1 BootstrapCompleted=False Failed: " + long[:200] + "... / ERROR: context deadline exceeded"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(notHealthy("Machine m1", tt.conditions)).To(Equal(tt.want))
		})
	}
}

func TestControlPlaneMachineConditions(t *testing.T) {
	g := NewWithT(t)
	const ns = "c1"
	machine := func(name, controlPlane string, conditions ...metav1.Condition) *clusterv1.Machine {
		return &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.MachineControlPlaneNameLabel: controlPlane}},
			Spec: clusterv1.MachineSpec{ClusterName: ns, InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: capdv1.GroupVersion.Group, Kind: "DockerMachine", Name: name}},
			Status: clusterv1.MachineStatus{Conditions: conditions},
		}
	}
	notReady := metav1.Condition{Type: clusterv1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "NotReady", Message: "* InfrastructureReady: not ready"}
	stalled := machine("c1-control-plane-a", "c1-control-plane", notReady)
	ready := machine("c1-control-plane-b", "c1-control-plane", metav1.Condition{Type: clusterv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready"})
	noDockerMachine := machine("c1-control-plane-c", "c1-control-plane")
	otherControlPlane := machine("c2-control-plane-a", "c2-control-plane", notReady)
	dockerMachine := func(name string, conditions ...metav1.Condition) *capdv1.DockerMachine { //nolint:staticcheck // the kind the template uses
		return &capdv1.DockerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: capdv1.DockerMachineStatus{Conditions: conditions}} //nolint:staticcheck // the kind the template uses
	}
	bootstrapFailed := metav1.Condition{Type: "BootstrapExecSucceeded", Status: metav1.ConditionFalse, Reason: "BootstrapFailed",
		Message: "Running boostrap command [ kubeadm join ]\nERROR: context deadline exceeded"}

	c := &Cluster{Namespace: ns, ControlPlane: "c1-control-plane", w: &World{Client: fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(
		stalled, ready, noDockerMachine, otherControlPlane,
		dockerMachine(stalled.Name, bootstrapFailed), dockerMachine(ready.Name), dockerMachine(otherControlPlane.Name, bootstrapFailed),
	).Build()}}

	lines, err := c.ControlPlaneMachineConditions(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lines).To(ConsistOf(
		"Machine c1-control-plane-a Ready=False NotReady: * InfrastructureReady: not ready",
		"DockerMachine c1-control-plane-a BootstrapExecSucceeded=False BootstrapFailed: Running boostrap command [ kubeadm join ] / ERROR: context deadline exceeded",
		ContainSubstring("DockerMachine c1-control-plane-c: "),
	))
}

func TestRenderClusterWithUpstreamPool(t *testing.T) {
	g := NewWithT(t)
	objs, err := renderCluster(ClusterSpec{Name: "c1", ControlPlaneVersion: "v1.36.3", ControlPlaneReplicas: 1, PoolVersion: "v1.36.3", PoolReplicas: 2, UpstreamPool: true})
	g.Expect(err).NotTo(HaveOccurred())
	mp := &clusterv1.MachinePool{}
	g.Expect(fromObjects(objs, "MachinePool", mp)).To(Succeed())
	g.Expect(mp.Spec.Template.Spec.InfrastructureRef.APIGroup).To(Equal(capdv1.GroupVersion.Group))
	var pools []string
	for _, o := range objs {
		if o.GetKind() == "DockerMachinePool" {
			pools = append(pools, o.GetAPIVersion())
		}
	}
	g.Expect(pools).To(Equal([]string{capdv1.GroupVersion.String()}))
	config := &bootstrapv1.KubeadmConfig{}
	g.Expect(fromObjects(objs, "KubeadmConfig", config)).To(Succeed())
	g.Expect(config.Spec.JoinConfiguration.NodeRegistration.Name).To(BeEmpty(), "kubeadm names CAPD's nodes")
}
