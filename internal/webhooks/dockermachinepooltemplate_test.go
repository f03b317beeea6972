package webhooks

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

func templateWith(spec infrav1.DockerMachinePoolSpec) *infrav1.DockerMachinePoolTemplate {
	return &infrav1.DockerMachinePoolTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: "default"},
		Spec: infrav1.DockerMachinePoolTemplateSpec{
			Template: infrav1.DockerMachinePoolTemplateResource{Spec: spec},
		},
	}
}

func TestDockerMachinePoolTemplateDefault(t *testing.T) {
	g := NewWithT(t)
	template := templateWith(infrav1.DockerMachinePoolSpec{})
	g.Expect((&DockerMachinePoolTemplate{}).Default(context.Background(), template)).To(Succeed())
	g.Expect(template.Spec.Template.Spec.Template.BootstrapTimeout).To(Equal(&metav1.Duration{Duration: 3 * time.Minute}))

	// Defaulting is idempotent and keeps what the user set.
	template.Spec.Template.Spec.Template.BootstrapTimeout = &metav1.Duration{Duration: time.Minute}
	g.Expect((&DockerMachinePoolTemplate{}).Default(context.Background(), template)).To(Succeed())
	g.Expect(template.Spec.Template.Spec.Template.BootstrapTimeout).To(Equal(&metav1.Duration{Duration: time.Minute}))
}

func TestDockerMachinePoolTemplateValidateCreate(t *testing.T) {
	tests := []struct {
		name     string
		template *infrav1.DockerMachinePoolTemplate
		wantErrs []string
	}{
		{
			name: "valid template",
			template: templateWith(infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{
				CustomImage:   "kindest/node:v1.35.0",
				PreLoadImages: []string{"nginx:1.27"},
				ExtraMounts:   []infrav1.Mount{{ContainerPath: "/data", HostPath: "/srv/data"}},
			}}),
		},
		{
			name: "the machine template is validated under spec.template.spec.template",
			template: templateWith(infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{
				CustomImage: "kindest/node:latest",
				ExtraMounts: []infrav1.Mount{{ContainerPath: "/a", HostPath: "/x"}, {ContainerPath: "/a", HostPath: "/y"}},
			}}),
			wantErrs: []string{"spec.template.spec.template.customImage", "spec.template.spec.template.extraMounts[1].containerPath"},
		},
		{
			name: "extraMounts Docker would read differently or refuse are refused under spec.template.spec.template",
			template: templateWith(infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{
				ExtraMounts: []infrav1.Mount{
					{ContainerPath: "/data:rshared", HostPath: "/srv/a"},
					{ContainerPath: "/b", HostPath: "/srv/a:/b"},
					{ContainerPath: "/tmp", HostPath: "/srv/tmp"},
				},
			}}),
			wantErrs: []string{
				"spec.template.spec.template.extraMounts[0].containerPath: Invalid value",
				"spec.template.spec.template.extraMounts[1].hostPath: Invalid value",
				"spec.template.spec.template.extraMounts[2].containerPath: Forbidden",
			},
		},
		{
			name:     "provider IDs cannot be part of a template",
			template: templateWith(infrav1.DockerMachinePoolSpec{ProviderID: "docker:////pool", ProviderIDList: []string{"docker:////pool-1"}}),
			wantErrs: []string{"spec.template.spec.providerID: Forbidden", "spec.template.spec.providerIDList: Forbidden"},
		},
		{
			name:     "invalid metadata",
			template: withMetadata(templateWith(infrav1.DockerMachinePoolSpec{}), map[string]string{"/invalid-key": "x"}),
			wantErrs: []string{"spec.template.metadata.labels"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			warnings, err := (&DockerMachinePoolTemplate{HostPaths: testHostPaths}).ValidateCreate(context.Background(), tt.template)
			expectInvalid(g, err, tt.wantErrs)
			g.Expect(warnings).To(BeEmpty())
		})
	}
}

func TestDockerMachinePoolTemplateValidateUpdate(t *testing.T) {
	oldTemplate := templateWith(infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node:v1.34.1"}})

	changed := oldTemplate.DeepCopy()
	changed.Spec.Template.Spec.Template.CustomImage = "kindest/node:v1.35.0"

	changedDryRunAnnotation := changed.DeepCopy()
	changedDryRunAnnotation.SetAnnotations(map[string]string{clusterv1.TopologyDryRunAnnotation: ""})

	changedDryRunAnnotationInvalid := changedDryRunAnnotation.DeepCopy()
	changedDryRunAnnotationInvalid.Spec.Template.Spec.Template.CustomImage = "kindest/node:latest"

	metadataOnly := withMetadata(oldTemplate.DeepCopy(), map[string]string{"pool-role": "workers"})
	invalidMetadataOnly := withMetadata(oldTemplate.DeepCopy(), map[string]string{"bad": strings.Repeat("a", 64)})

	notDryRun := &admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{DryRun: ptr.To(false)}}
	dryRun := &admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{DryRun: ptr.To(true)}}

	tests := []struct {
		name        string
		oldTemplate *infrav1.DockerMachinePoolTemplate
		newTemplate *infrav1.DockerMachinePoolTemplate
		req         *admission.Request
		wantErrs    []string
	}{
		{
			name:        "no change",
			oldTemplate: oldTemplate, newTemplate: oldTemplate, req: notDryRun,
		},
		{
			name:        "spec change is rejected",
			oldTemplate: oldTemplate, newTemplate: changed, req: notDryRun,
			wantErrs: []string{"spec.template.spec: Forbidden", "immutable", "v1.35.0"},
		},
		{
			name:        "spec change with the dry-run annotation but not in a dry run is rejected",
			oldTemplate: oldTemplate, newTemplate: changedDryRunAnnotation, req: notDryRun,
			wantErrs: []string{"spec.template.spec: Forbidden"},
		},
		{
			name:        "spec change in a dry run without the annotation is rejected",
			oldTemplate: oldTemplate, newTemplate: changed, req: dryRun,
			wantErrs: []string{"spec.template.spec: Forbidden"},
		},
		{
			name:        "spec change in the topology controller's dry run is allowed",
			oldTemplate: oldTemplate, newTemplate: changedDryRunAnnotation, req: dryRun,
		},
		{
			name:        "the topology controller's dry run is still validated",
			oldTemplate: oldTemplate, newTemplate: changedDryRunAnnotationInvalid, req: dryRun,
			wantErrs: []string{"spec.template.spec.template.customImage"},
		},
		{
			name:        "metadata may change",
			oldTemplate: oldTemplate, newTemplate: metadataOnly, req: notDryRun,
		},
		{
			name:        "invalid metadata is rejected",
			oldTemplate: oldTemplate, newTemplate: invalidMetadataOnly, req: notDryRun,
			wantErrs: []string{"spec.template.metadata.labels"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := admission.NewContextWithRequest(context.Background(), *tt.req)
			warnings, err := (&DockerMachinePoolTemplate{}).ValidateUpdate(ctx, tt.oldTemplate, tt.newTemplate)
			expectInvalid(g, err, tt.wantErrs)
			g.Expect(warnings).To(BeEmpty())
		})
	}
}

// TestDockerMachinePoolTemplateMetadataUpdate: an update that leaves the spec as it is stored
// (clusterctl move's annotations, the ClusterClass's owner references) is allowed even when the
// template would no longer be admitted, e.g. its host path after --allowed-host-paths narrowed;
// a change of the spec is still checked.
func TestDockerMachinePoolTemplateMetadataUpdate(t *testing.T) {
	// Admitted while the manager allowed /data; the webhook below allows only /srv.
	stored := templateWith(infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{
		CustomImage:      "kindest/node:v1.34.1",
		ExtraMounts:      []infrav1.Mount{{ContainerPath: "/data", HostPath: "/data/pool"}},
		BootstrapTimeout: &metav1.Duration{Duration: infrav1.DefaultBootstrapTimeout},
	}})
	withAnnotation := func(key string) *infrav1.DockerMachinePoolTemplate {
		t := stored.DeepCopy()
		t.Annotations = map[string]string{key: ""}
		return t
	}
	ownedByClusterClass := stored.DeepCopy()
	ownedByClusterClass.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: clusterv1.GroupVersion.String(), Kind: "ClusterClass", Name: "capdmp", UID: "cc-uid",
	}}
	specChangedInDryRun := withAnnotation(clusterv1.TopologyDryRunAnnotation)
	specChangedInDryRun.Spec.Template.Spec.Template.CustomImage = "kindest/node:v1.35.0"
	poolLabelsChanged := stored.DeepCopy()
	poolLabelsChanged.Spec.Template.ObjectMeta.Labels = map[string]string{"pool-role": "workers"}

	notDryRun := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{DryRun: ptr.To(false)}}
	dryRun := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{DryRun: ptr.To(true)}}

	tests := []struct {
		name        string
		newTemplate *infrav1.DockerMachinePoolTemplate
		req         admission.Request
		wantErrs    []string
	}{
		{name: "clusterctl move's block-move annotation", newTemplate: withAnnotation(clusterctlv1.BlockMoveAnnotation), req: notDryRun},
		{name: "clusterctl move's delete-for-move annotation", newTemplate: withAnnotation(clusterctlv1.DeleteForMoveAnnotation), req: notDryRun},
		{name: "the ClusterClass's owner reference", newTemplate: ownedByClusterClass, req: notDryRun},
		{
			name:        "a spec change in the topology controller's dry run is still checked",
			newTemplate: specChangedInDryRun, req: dryRun,
			wantErrs: []string{`spec.template.spec.template.extraMounts[0].hostPath: Forbidden: host path "/data/pool"`},
		},
		{
			name:        "a change of the pools' metadata is still checked",
			newTemplate: poolLabelsChanged, req: notDryRun,
			wantErrs: []string{`spec.template.spec.template.extraMounts[0].hostPath: Forbidden: host path "/data/pool"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := admission.NewContextWithRequest(context.Background(), tt.req)
			warnings, err := (&DockerMachinePoolTemplate{HostPaths: testHostPaths}).ValidateUpdate(ctx, stored, tt.newTemplate)
			expectInvalid(g, err, tt.wantErrs)
			g.Expect(warnings).To(BeEmpty())
		})
	}
}

// TestDockerMachinePoolTemplateStoredWithoutDefaults: a template stored before its defaults
// existed, or while webhooks were off, lacks bootstrapTimeout. The defaulting webhook adds it to
// every update; that is not a change of the immutable spec, any other value is.
func TestDockerMachinePoolTemplateStoredWithoutDefaults(t *testing.T) {
	stored := templateWith(infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{
		CustomImage: "kindest/node:v1.34.1",
	}})
	annotated := stored.DeepCopy()
	annotated.Annotations = map[string]string{clusterctlv1.BlockMoveAnnotation: ""}
	otherTimeout := annotated.DeepCopy()
	otherTimeout.Spec.Template.Spec.Template.BootstrapTimeout = &metav1.Duration{Duration: 5 * time.Minute}

	tests := []struct {
		name        string
		newTemplate *infrav1.DockerMachinePoolTemplate
		wantErrs    []string
	}{
		{name: "an annotation, with the default the webhook adds", newTemplate: annotated},
		{name: "the same spec, with the default the webhook adds", newTemplate: stored.DeepCopy()},
		{
			name:        "a bootstrapTimeout other than the default",
			newTemplate: otherTimeout,
			wantErrs:    []string{"spec.template.spec: Forbidden", "immutable"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			webhook := &DockerMachinePoolTemplate{HostPaths: testHostPaths}
			ctx := admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{DryRun: ptr.To(false)}})
			// The API server calls the defaulting webhook on the update before the validating one.
			newTemplate := tt.newTemplate.DeepCopy()
			g.Expect(webhook.Default(ctx, newTemplate)).To(Succeed())
			warnings, err := webhook.ValidateUpdate(ctx, stored, newTemplate)
			expectInvalid(g, err, tt.wantErrs)
			g.Expect(warnings).To(BeEmpty())
		})
	}
}

func TestDockerMachinePoolTemplateValidateUpdateWithoutRequest(t *testing.T) {
	g := NewWithT(t)
	template := templateWith(infrav1.DockerMachinePoolSpec{})
	_, err := (&DockerMachinePoolTemplate{}).ValidateUpdate(context.Background(), template, template)
	g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "got %v", err)
}

func withMetadata(template *infrav1.DockerMachinePoolTemplate, labels map[string]string) *infrav1.DockerMachinePoolTemplate {
	template.Spec.Template.ObjectMeta = clusterv1.ObjectMeta{Labels: labels}
	return template
}
