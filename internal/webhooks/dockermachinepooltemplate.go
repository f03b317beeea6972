package webhooks

import (
	"context"
	"fmt"

	pkgerrors "github.com/pkg/errors"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/topology"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/hostpath"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-infrastructure-capdmp-dev-v1alpha1-dockermachinepooltemplate,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.capdmp.dev,resources=dockermachinepooltemplates,versions=v1alpha1,name=default.dockermachinepooltemplate.infrastructure.capdmp.dev,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-capdmp-dev-v1alpha1-dockermachinepooltemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.capdmp.dev,resources=dockermachinepooltemplates,versions=v1alpha1,name=validation.dockermachinepooltemplate.infrastructure.capdmp.dev,sideEffects=None,admissionReviewVersions=v1

// DockerMachinePoolTemplate defaults and validates DockerMachinePoolTemplates.
//
// The spec of a template is immutable: a ClusterClass changes its pools by pointing to a new
// template (rotation). Cluster API's topology controller computes its diffs with server-side apply
// dry-run requests marked with the topology.cluster.x-k8s.io/dry-run annotation; those are allowed
// to differ, as the InfraMachinePool contract requires ("support for SSA dry run").
type DockerMachinePoolTemplate struct {
	// HostPaths are the host paths the pools' extraMounts may mount; the zero Policy is the
	// default one.
	HostPaths hostpath.Policy
}

var (
	_ admission.Defaulter[*infrav1.DockerMachinePoolTemplate] = &DockerMachinePoolTemplate{}
	_ admission.Validator[*infrav1.DockerMachinePoolTemplate] = &DockerMachinePoolTemplate{}
)

// SetupWebhookWithManager registers the DockerMachinePoolTemplate webhooks with the manager.
func (webhook *DockerMachinePoolTemplate) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.DockerMachinePoolTemplate{}).
		WithDefaulter(webhook).
		WithValidator(webhook).
		Complete()
}

// Default fills the empty fields of the DockerMachinePool a template describes, so that the pools
// made from it and the template agree.
func (webhook *DockerMachinePoolTemplate) Default(_ context.Context, template *infrav1.DockerMachinePoolTemplate) error {
	defaultMachineTemplate(&template.Spec.Template.Spec.Template)
	return nil
}

// ValidateCreate validates a new DockerMachinePoolTemplate.
func (webhook *DockerMachinePoolTemplate) ValidateCreate(_ context.Context, template *infrav1.DockerMachinePoolTemplate) (admission.Warnings, error) {
	allErrs, warnings := validatePoolTemplate(template, webhook.HostPaths)
	return warnings, invalidTemplate(template, allErrs)
}

// ValidateUpdate rejects changes to spec.template.spec, except in the topology controller's
// dry-run requests, and validates a changed spec.
func (webhook *DockerMachinePoolTemplate) ValidateUpdate(ctx context.Context, oldTemplate, newTemplate *infrav1.DockerMachinePoolTemplate) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an admission.Request in the context: %v", err))
	}
	// The defaulting webhook fills, on every update, what a template stored before its defaults
	// existed or with webhooks off lacks: the specs are compared defaulted alike, so that this is
	// no change.
	oldSpec, newSpec, err := webhook.defaultedSpecs(ctx, oldTemplate, newTemplate)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	// A template whose spec is unchanged is not checked again, so that one admitted under an
	// earlier rule or a wider --allowed-host-paths never blocks an update of its metadata, such as
	// clusterctl move's annotations or the ClusterClass's owner references.
	if equality.Semantic.DeepEqual(oldSpec, newSpec) {
		return nil, nil
	}

	var allErrs field.ErrorList
	if !topology.IsDryRunRequest(req, newTemplate) && !equality.Semantic.DeepEqual(oldSpec.Template.Spec, newSpec.Template.Spec) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "template", "spec"),
			"DockerMachinePoolTemplate spec.template.spec is immutable: create a new template and point the ClusterClass to it. Diff: "+
				diff.Diff(oldSpec.Template.Spec, newSpec.Template.Spec)))
	}
	templateErrs, warnings := validatePoolTemplate(newTemplate, webhook.HostPaths)
	allErrs = append(allErrs, templateErrs...)
	return warnings, invalidTemplate(newTemplate, allErrs)
}

// defaultedSpecs returns the specs of both templates as the defaulting webhook leaves them.
func (webhook *DockerMachinePoolTemplate) defaultedSpecs(ctx context.Context, oldTemplate, newTemplate *infrav1.DockerMachinePoolTemplate) (oldSpec, newSpec infrav1.DockerMachinePoolTemplateSpec, err error) {
	oldDefaulted, newDefaulted := oldTemplate.DeepCopy(), newTemplate.DeepCopy()
	if err := webhook.Default(ctx, oldDefaulted); err != nil {
		return oldSpec, newSpec, pkgerrors.Wrap(err, "failed to default the stored DockerMachinePoolTemplate")
	}
	if err := webhook.Default(ctx, newDefaulted); err != nil {
		return oldSpec, newSpec, pkgerrors.Wrap(err, "failed to default the updated DockerMachinePoolTemplate")
	}
	return oldDefaulted.Spec, newDefaulted.Spec, nil
}

// ValidateDelete allows every deletion.
func (webhook *DockerMachinePoolTemplate) ValidateDelete(_ context.Context, _ *infrav1.DockerMachinePoolTemplate) (admission.Warnings, error) {
	return nil, nil
}

func validatePoolTemplate(template *infrav1.DockerMachinePoolTemplate, hostPaths hostpath.Policy) (field.ErrorList, []string) {
	resourcePath := field.NewPath("spec", "template")
	allErrs := template.Spec.Template.ObjectMeta.Validate(resourcePath.Child("metadata"))

	specPath := resourcePath.Child("spec")
	spec := template.Spec.Template.Spec
	// Provider IDs belong to the containers of one pool; a template shared by many pools cannot
	// know them.
	if spec.ProviderID != "" {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("providerID"), "is set by the controller on each DockerMachinePool and cannot be part of a template"))
	}
	if len(spec.ProviderIDList) > 0 {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("providerIDList"), "is set by the controller on each DockerMachinePool and cannot be part of a template"))
	}

	machineErrs, warnings := validateMachineTemplate(&template.Spec.Template.Spec.Template, specPath.Child("template"), hostPaths)
	allErrs = append(allErrs, validateStrategy(spec.Strategy, specPath.Child("strategy"))...)
	allErrs = append(allErrs, validateRemediation(spec.Remediation, specPath.Child("remediation"))...)
	return append(allErrs, machineErrs...), warnings
}

func invalidTemplate(template *infrav1.DockerMachinePoolTemplate, allErrs field.ErrorList) error {
	if len(allErrs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(infrav1.GroupVersion.WithKind("DockerMachinePoolTemplate").GroupKind(), template.Name, allErrs)
}
