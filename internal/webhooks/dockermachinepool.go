package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/hostpath"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-infrastructure-capdmp-dev-v1alpha1-dockermachinepool,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.capdmp.dev,resources=dockermachinepools,versions=v1alpha1,name=default.dockermachinepool.infrastructure.capdmp.dev,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-capdmp-dev-v1alpha1-dockermachinepool,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.capdmp.dev,resources=dockermachinepools,versions=v1alpha1,name=validation.dockermachinepool.infrastructure.capdmp.dev,sideEffects=None,admissionReviewVersions=v1

// DockerMachinePool defaults and validates DockerMachinePools.
//
// The spec of a pool stays mutable: the MachinePool contract rolls a pool out by updating its
// InfraMachinePool in place (the topology controller does the same from a ClusterClass).
type DockerMachinePool struct {
	// HostPaths are the host paths the pool's extraMounts may mount; the zero Policy is the
	// default one.
	HostPaths hostpath.Policy
}

var (
	_ admission.Defaulter[*infrav1.DockerMachinePool] = &DockerMachinePool{}
	_ admission.Validator[*infrav1.DockerMachinePool] = &DockerMachinePool{}
)

// SetupWebhookWithManager registers the DockerMachinePool webhooks with the manager.
func (webhook *DockerMachinePool) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.DockerMachinePool{}).
		WithDefaulter(webhook).
		WithValidator(webhook).
		Complete()
}

// Default fills the empty fields of a DockerMachinePool.
func (webhook *DockerMachinePool) Default(_ context.Context, pool *infrav1.DockerMachinePool) error {
	defaultMachineTemplate(&pool.Spec.Template)
	return nil
}

// ValidateCreate validates a new DockerMachinePool.
func (webhook *DockerMachinePool) ValidateCreate(_ context.Context, pool *infrav1.DockerMachinePool) (admission.Warnings, error) {
	return webhook.validate(nil, pool)
}

// ValidateUpdate validates a changed DockerMachinePool.
func (webhook *DockerMachinePool) ValidateUpdate(_ context.Context, oldPool, newPool *infrav1.DockerMachinePool) (admission.Warnings, error) {
	return webhook.validate(oldPool, newPool)
}

// ValidateDelete allows every deletion.
func (webhook *DockerMachinePool) ValidateDelete(_ context.Context, _ *infrav1.DockerMachinePool) (admission.Warnings, error) {
	return nil, nil
}

func (webhook *DockerMachinePool) validate(oldPool, newPool *infrav1.DockerMachinePool) (admission.Warnings, error) {
	// The pool's containers carry the UID recorded there: changed or removed, the pool would lose
	// them. A new pool may bring one (clusterctl move creates the pool with its annotations), and
	// the pool clusterctl move deletes from its source loses it: move marks it by replacing every
	// annotation with its own, the pool on the target keeps the UID.
	if _, deletedForMove := newPool.Annotations[clusterctlv1.DeleteForMoveAnnotation]; oldPool != nil && !deletedForMove {
		if uid, ok := oldPool.Annotations[infrav1.PoolUIDAnnotation]; ok && newPool.Annotations[infrav1.PoolUIDAnnotation] != uid {
			return nil, apierrors.NewInvalid(infrav1.GroupVersion.WithKind("DockerMachinePool").GroupKind(), newPool.Name, field.ErrorList{
				field.Forbidden(field.NewPath("metadata", "annotations").Key(infrav1.PoolUIDAnnotation),
					"the pool's containers carry the UID recorded here ("+uid+"); it cannot change or be removed"),
			})
		}
	}
	// A pool whose template is unchanged is not checked again, so that a pool admitted before a
	// rule existed never blocks unrelated updates, such as the controller writing providerIDList.
	if oldPool != nil && equality.Semantic.DeepEqual(oldPool.Spec.Template, newPool.Spec.Template) &&
		equality.Semantic.DeepEqual(oldPool.Spec.Strategy, newPool.Spec.Strategy) {
		return nil, nil
	}
	allErrs, warnings := validateMachineTemplate(&newPool.Spec.Template, field.NewPath("spec", "template"), webhook.HostPaths)
	allErrs = append(allErrs, validateStrategy(newPool.Spec.Strategy, field.NewPath("spec", "strategy"))...)
	if len(allErrs) > 0 {
		return warnings, apierrors.NewInvalid(infrav1.GroupVersion.WithKind("DockerMachinePool").GroupKind(), newPool.Name, allErrs)
	}
	return warnings, nil
}
