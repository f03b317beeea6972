// Package v1alpha1 contains the API of the CAPDMP infrastructure provider: DockerMachinePool,
// DockerMachinePoolTemplate and DockerMachinePoolMachine.
// +kubebuilder:object:generate=true
// +groupName=infrastructure.capdmp.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of the CAPDMP types.
	GroupVersion = schema.GroupVersion{Group: "infrastructure.capdmp.dev", Version: "v1alpha1"}

	// SchemeBuilder adds the CAPDMP types to a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // exported API other providers may use; moving to runtime.NewSchemeBuilder is a separate change

	// AddToScheme adds the CAPDMP types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
