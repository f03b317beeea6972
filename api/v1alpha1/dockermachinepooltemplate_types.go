package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// DockerMachinePoolTemplateSpec defines the DockerMachinePools made from a template.
type DockerMachinePoolTemplateSpec struct {
	// template is the DockerMachinePool made from this template.
	// +required
	Template DockerMachinePoolTemplateResource `json:"template"`
}

// DockerMachinePoolTemplateResource describes the DockerMachinePool made from a template.
type DockerMachinePoolTemplateResource struct {
	// metadata is copied to the DockerMachinePool.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec is the spec of the DockerMachinePool.
	// +required
	Spec DockerMachinePoolSpec `json:"spec"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=dockermachinepooltemplates,scope=Namespaced,categories=cluster-api,shortName=dmpt
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description="Time since creation"

// DockerMachinePoolTemplate is the template of DockerMachinePools in a ClusterClass.
type DockerMachinePoolTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the template.
	// +optional
	Spec DockerMachinePoolTemplateSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// DockerMachinePoolTemplateList is a list of DockerMachinePoolTemplates.
type DockerMachinePoolTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DockerMachinePoolTemplate `json:"items"`
}

func init() {
	SchemeBuilder.Register(&DockerMachinePoolTemplate{}, &DockerMachinePoolTemplateList{})
}
