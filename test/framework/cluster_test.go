package framework

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capdv1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// TestSetControlPlaneVersion: the control plane moves to a version with a copy of its machine
// template that runs that version's image, named as Template applied at that version names it;
// the template it ran stays as it was.
func TestSetControlPlaneVersion(t *testing.T) {
	const from, to = "v1.36.4", "v1.37.0"
	g := NewWithT(t)
	ctx := context.Background()
	objs, err := renderCluster(ClusterSpec{Name: "c1", ControlPlaneVersion: from, ControlPlaneReplicas: 1, PoolVersion: from, PoolReplicas: 2})
	g.Expect(err).NotTo(HaveOccurred())
	builder := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{
		Name: "dockermachinetemplates.infrastructure.cluster.x-k8s.io", Labels: map[string]string{clusterv1.GroupVersion.String(): "v1beta2"}}})
	for _, kind := range []string{"KubeadmControlPlane", "DockerMachineTemplate"} {
		for _, o := range objs {
			if o.GetKind() == kind {
				builder = builder.WithObjects(o.DeepCopy())
			}
		}
	}
	c := &Cluster{Namespace: "c1", ControlPlane: "c1-control-plane", w: &World{Client: builder.Build()}}

	g.Expect(c.SetControlPlaneVersion(ctx, to)).To(Succeed())

	kcp, err := c.ControlPlaneStatus(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kcp.Spec.Version).To(Equal(to))
	g.Expect(kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Name).To(Equal("c1-control-plane-" + to))
	rendered, err := renderCluster(ClusterSpec{Name: "c1", ControlPlaneVersion: to, ControlPlaneReplicas: 1, PoolVersion: to, PoolReplicas: 2})
	g.Expect(err).NotTo(HaveOccurred())
	want := &capdv1.DockerMachineTemplate{} //nolint:staticcheck // the kind the template uses
	g.Expect(fromObjects(rendered, "DockerMachineTemplate", want)).To(Succeed())
	for version, image := range map[string]string{from: "kindest/node:" + from, to: "kindest/node:" + to} {
		dmt := &capdv1.DockerMachineTemplate{} //nolint:staticcheck // the kind the template uses
		g.Expect(c.w.Client.Get(ctx, client.ObjectKey{Namespace: "c1", Name: "c1-control-plane-" + version}, dmt)).To(Succeed())
		g.Expect(dmt.Spec.Template.Spec.CustomImage).To(Equal(image))
		if version == to {
			g.Expect(dmt.Spec).To(Equal(want.Spec), "the copy is what the template makes at %s", to)
		}
	}

	// Written again (a retried step): the same template, nothing new.
	g.Expect(c.SetControlPlaneVersion(ctx, to)).To(Succeed())
	list := &capdv1.DockerMachineTemplateList{}
	g.Expect(c.w.Client.List(ctx, list)).To(Succeed())
	g.Expect(list.Items).To(HaveLen(2))
}

func TestMachineTemplateAt(t *testing.T) {
	template := func(name, image string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{}}}}}
		u.SetAPIVersion(capdv1.GroupVersion.String())
		u.SetKind("DockerMachineTemplate")
		u.SetNamespace("ns")
		u.SetName(name)
		if image != "" {
			g := NewWithT(t)
			g.Expect(unstructured.SetNestedField(u.Object, image, "spec", "template", "spec", "customImage")).To(Succeed())
		}
		return u
	}
	tests := []struct {
		name      string
		template  *unstructured.Unstructured
		wantName  string
		wantImage string
		wantErr   string
	}{
		{name: "named for its version", template: template("c-cp-v1.36.4", "kindest/node:v1.36.4"), wantName: "c-cp-v1.37.0", wantImage: "kindest/node:v1.37.0"},
		{name: "named otherwise", template: template("c-cp", "localhost:5000/kindest/node:v1.36.4"), wantName: "c-cp-v1.37.0", wantImage: "localhost:5000/kindest/node:v1.37.0"},
		{name: "no image: CAPD picks it", template: template("c-cp", "")},
		{name: "an image of another version", template: template("c-cp", "kindest/node:v1.35.8"), wantErr: "not one tagged with the control plane's version v1.36.4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			next, err := machineTemplateAt(tt.template, "v1.36.4", "v1.37.0")
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tt.wantName == "" {
				g.Expect(next).To(BeNil())
				return
			}
			g.Expect(next.GetName()).To(Equal(tt.wantName))
			g.Expect(next.GetNamespace()).To(Equal("ns"))
			image, _, _ := unstructured.NestedString(next.Object, "spec", "template", "spec", "customImage")
			g.Expect(image).To(Equal(tt.wantImage))
			original, _, _ := unstructured.NestedString(tt.template.Object, "spec", "template", "spec", "customImage")
			g.Expect(original).NotTo(Equal(tt.wantImage), "the template it was copied from is unchanged")
		})
	}
}
