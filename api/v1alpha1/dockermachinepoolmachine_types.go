package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// DockerMachinePoolMachineSpec defines one container of a DockerMachinePool.
type DockerMachinePoolMachineSpec struct {
	// providerID is the provider ID of the container, docker:////<name>.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`
}

// DockerMachinePoolMachineStatus defines the observed state of one container.
// +kubebuilder:validation:MinProperties=1
type DockerMachinePoolMachineStatus struct {
	// conditions represent the container's state. Known types: Ready, ContainerProvisioned, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization reports the container's provisioning, as the InfraMachine contract asks.
	// +optional
	Initialization DockerMachinePoolMachineInitializationStatus `json:"initialization,omitempty,omitzero"`

	// nodeKubeletVersion is the kubeletVersion the container's Node reports, recorded once the
	// Node registered: the version the gate counts for this container, whatever its image's tag
	// says.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	NodeKubeletVersion string `json:"nodeKubeletVersion,omitempty"`

	// addresses of the container.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`

	// observedGeneration is the generation this status reflects.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// DockerMachinePoolMachineInitializationStatus reports the container's provisioning.
// +kubebuilder:validation:MinProperties=1
type DockerMachinePoolMachineInitializationStatus struct {
	// provisioned is true once the container runs and has been bootstrapped.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=dockermachinepoolmachines,scope=Namespaced,categories=cluster-api,shortName=dmpm
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Pool",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/pool-name']",description="MachinePool"
// +kubebuilder:printcolumn:name="Version",type="string",JSONPath=".metadata.labels['infrastructure\\.capdmp\\.dev/kubernetes-version']",description="Kubernetes version the container runs"
// +kubebuilder:printcolumn:name="Kubelet",type="string",JSONPath=".status.nodeKubeletVersion",description="kubeletVersion of the container's Node"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned",description="Container runs and is bootstrapped"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description="Time since creation"

// DockerMachinePoolMachine is one container of a DockerMachinePool, so that Cluster API can treat
// it as a Machine (MachinePool Machines): drain, delete one machine, health checks.
type DockerMachinePoolMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec defines the container.
	// +optional
	Spec DockerMachinePoolMachineSpec `json:"spec,omitempty,omitzero"`

	// status is the observed state of the container.
	// +optional
	Status DockerMachinePoolMachineStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the machine's conditions.
func (m *DockerMachinePoolMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions sets the machine's conditions.
func (m *DockerMachinePoolMachine) SetConditions(conditions []metav1.Condition) {
	m.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// DockerMachinePoolMachineList is a list of DockerMachinePoolMachines.
type DockerMachinePoolMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DockerMachinePoolMachine `json:"items"`
}

func init() {
	SchemeBuilder.Register(&DockerMachinePoolMachine{}, &DockerMachinePoolMachineList{})
}
