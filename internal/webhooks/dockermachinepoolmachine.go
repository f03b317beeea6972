package webhooks

import (
	"context"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-capdmp-dev-v1alpha1-dockermachinepoolmachine,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.capdmp.dev,resources=dockermachinepoolmachines,versions=v1alpha1,name=validation.dockermachinepoolmachine.infrastructure.capdmp.dev,sideEffects=None,admissionReviewVersions=v1

// providerIDPrefix starts the provider ID of every container, docker:////<container name>, the
// form CAPD's machines use too.
const providerIDPrefix = "docker:////"

// DockerMachinePoolMachine validates DockerMachinePoolMachines.
//
// A DockerMachinePoolMachine stands for one container, named by its provider ID. Once set, the
// provider ID never changes: Cluster API matches the Machine to its Node by it.
type DockerMachinePoolMachine struct{}

var _ admission.Validator[*infrav1.DockerMachinePoolMachine] = &DockerMachinePoolMachine{}

// SetupWebhookWithManager registers the DockerMachinePoolMachine webhook with the manager.
func (webhook *DockerMachinePoolMachine) SetupWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.DockerMachinePoolMachine{}).
		WithValidator(webhook).
		Complete()
}

// ValidateCreate validates a new DockerMachinePoolMachine.
func (webhook *DockerMachinePoolMachine) ValidateCreate(_ context.Context, machine *infrav1.DockerMachinePoolMachine) (admission.Warnings, error) {
	return nil, invalidMachine(machine, validateProviderID(machine))
}

// ValidateUpdate validates a changed DockerMachinePoolMachine.
func (webhook *DockerMachinePoolMachine) ValidateUpdate(_ context.Context, oldMachine, newMachine *infrav1.DockerMachinePoolMachine) (admission.Warnings, error) {
	var allErrs field.ErrorList
	if oldMachine.Spec.ProviderID != "" && newMachine.Spec.ProviderID != oldMachine.Spec.ProviderID {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "providerID"),
			"cannot be changed once set (it was "+oldMachine.Spec.ProviderID+"): it names the container this machine stands for"))
	} else if newMachine.Spec.ProviderID != oldMachine.Spec.ProviderID {
		allErrs = validateProviderID(newMachine)
	}
	return nil, invalidMachine(newMachine, allErrs)
}

// ValidateDelete allows every deletion.
func (webhook *DockerMachinePoolMachine) ValidateDelete(_ context.Context, _ *infrav1.DockerMachinePoolMachine) (admission.Warnings, error) {
	return nil, nil
}

func validateProviderID(machine *infrav1.DockerMachinePoolMachine) field.ErrorList {
	providerID := machine.Spec.ProviderID
	if providerID == "" || (strings.HasPrefix(providerID, providerIDPrefix) && len(providerID) > len(providerIDPrefix)) {
		return nil
	}
	return field.ErrorList{field.Invalid(field.NewPath("spec", "providerID"), providerID,
		"must be "+providerIDPrefix+"<container name>")}
}

func invalidMachine(machine *infrav1.DockerMachinePoolMachine, allErrs field.ErrorList) error {
	if len(allErrs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(infrav1.GroupVersion.WithKind("DockerMachinePoolMachine").GroupKind(), machine.Name, allErrs)
}
