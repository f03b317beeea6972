package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DefaultBootstrapTimeout is the bootstrap timeout of a container when spec.template.bootstrapTimeout
// is empty. A kind-like node needs well under a minute to join; three minutes leave room for a busy
// Docker host without keeping a broken container around for long.
const DefaultBootstrapTimeout = 3 * time.Minute

// DockerMachinePoolMachineTemplate describes the containers of a pool.
type DockerMachinePoolMachineTemplate struct {
	// customImage is the node image of the pool's containers. When empty, the kindest/node image
	// of the MachinePool's version is used. Its tag must be the Kubernetes version it runs
	// (vX.Y.Z), because the version-skew gate reads the version from it; when set, the
	// MachinePool's version may be empty, and when both are set they must agree. Images are never
	// pulled.
	// The validating webhook checks the reference and its tag with the rule the controller reads
	// them by; the schema has no pattern, so that there is one rule and not two that drift.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	CustomImage string `json:"customImage,omitempty"`

	// preLoadImages are images, already present on the Docker engine, loaded into each new
	// container's containerd before it is bootstrapped.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	PreLoadImages []string `json:"preLoadImages,omitempty"`

	// extraMounts are host paths mounted into each container.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	ExtraMounts []Mount `json:"extraMounts,omitempty"`

	// bootstrapTimeout bounds the bootstrap of one container: the loading of preLoadImages, then
	// the bootstrap commands, which run in the container while the controller follows them. A
	// bootstrap that has not finished by then is stopped and reported as failed (BootstrapFailed)
	// until a MachineHealthCheck or a user deletes its Machine. Defaults to 3m; at most 1h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="bootstrapTimeout must be greater than zero"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1h')",message="bootstrapTimeout must be at most 1h"
	BootstrapTimeout *metav1.Duration `json:"bootstrapTimeout,omitempty"`
}

// Mount is a host path mounted into a container.
type Mount struct {
	// containerPath is the absolute path inside the container.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^/`
	ContainerPath string `json:"containerPath"`

	// hostPath is the absolute path on the Docker host.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^/`
	HostPath string `json:"hostPath"`

	// readOnly mounts the path read-only.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// DockerMachinePoolSpec defines the desired state of DockerMachinePool.
type DockerMachinePoolSpec struct {
	// template describes the containers of the pool.
	// +optional
	Template DockerMachinePoolMachineTemplate `json:"template,omitempty,omitzero"`

	// providerID identifies the pool as a whole.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// providerIDList lists the provider IDs of the pool's containers; the controller maintains it.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	ProviderIDList []string `json:"providerIDList,omitempty"`

	// strategy says how the pool replaces its outdated containers (another image or version):
	// one at a time, each new one ready before an old one goes, unless rollingUpdate says
	// otherwise. The version-skew gate decides every replacement whatever the strategy.
	// +optional
	Strategy DockerMachinePoolStrategy `json:"strategy,omitempty,omitzero"`

	// remediation bounds how the pool replaces Machines that a MachineHealthCheck found
	// unhealthy, as a MachineDeployment's remediation does for its MachineSets.
	// +optional
	Remediation DockerMachinePoolRemediation `json:"remediation,omitempty,omitzero"`
}

// DockerMachinePoolRemediation bounds the pool's remediation of unhealthy Machines.
// +kubebuilder:validation:MinProperties=1
type DockerMachinePoolRemediation struct {
	// maxInFlight is how many unhealthy Machines the pool deletes and replaces at a time: a
	// number, or a percentage of the desired replica count, rounded up (at least 1). A Machine is
	// in flight from its deletion until it is gone. No limit when unset, as a MachineSet's.
	// Whatever the limit, a Machine is deleted only when the pool can create its replacement now.
	// +optional
	// +kubebuilder:validation:XIntOrString
	MaxInFlight *intstr.IntOrString `json:"maxInFlight,omitempty"`
}

// DockerMachinePoolStrategy says how a pool replaces its outdated containers.
// +kubebuilder:validation:MinProperties=1
type DockerMachinePoolStrategy struct {
	// rollingUpdate bounds a rollout.
	// +optional
	RollingUpdate DockerMachinePoolRollingUpdate `json:"rollingUpdate,omitempty,omitzero"`
}

// DockerMachinePoolRollingUpdate bounds a rollout, as a Deployment's or a MachineDeployment's
// rollingUpdate does. When both resolve to 0, maxUnavailable is 1.
// +kubebuilder:validation:MinProperties=1
type DockerMachinePoolRollingUpdate struct {
	// maxSurge is how many containers above the desired replica count a rollout may run: a
	// number, or a percentage of the desired count ("25%"), rounded up. 1 when unset.
	// +optional
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`

	// maxUnavailable is how many of the desired replicas may be not ready while a rollout
	// removes outdated containers: a number, or a percentage of the desired count, rounded
	// down. 0 when unset.
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// DockerMachinePoolStatus defines the observed state of DockerMachinePool.
// +kubebuilder:validation:MinProperties=1
type DockerMachinePoolStatus struct {
	// conditions represent the observations of the pool's current state. Known types: Ready,
	// ReplicasReady, MachinesCreated, VersionSkewAdmitted, BootstrapDataFresh, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization reports the pool's provisioning, as the InfraMachinePool contract asks.
	// +optional
	Initialization DockerMachinePoolInitializationStatus `json:"initialization,omitempty,omitzero"`

	// ready mirrors initialization.provisioned for Cluster API v1.14's MachinePool controller,
	// which still reads the v1beta1 field status.ready of an InfraMachinePool (external.IsReady)
	// although the v1beta2 contract names initialization.provisioned.
	//
	// Deprecated: read initialization.provisioned; this field goes when Cluster API stops reading it.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// replicas is the number of containers of the pool.
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// readyReplicas is the number of containers that run and have been bootstrapped.
	// +optional
	ReadyReplicas *int32 `json:"readyReplicas,omitempty"`

	// The pool keeps no per-container list: each container's state (version, bootstrap
	// configuration, addresses, provisioned) is on its DockerMachinePoolMachine, so the pool
	// stays small at 10,000 containers (status.instances was removed in v1alpha1, issue 37).

	// infrastructureMachineKind is DockerMachinePoolMachine: every container is also a Machine.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	InfrastructureMachineKind string `json:"infrastructureMachineKind,omitempty"`

	// versionGate says which Kubernetes version the pool admits now and, while it waits, why.
	// +optional
	VersionGate DockerMachinePoolVersionGateStatus `json:"versionGate,omitempty,omitzero"`

	// bootstrapData is what the pool last read of the MachinePool's bootstrap data: the
	// configuration its containers must be bootstrapped with, and the bootstrap config it was
	// rendered from.
	// +optional
	BootstrapData DockerMachinePoolBootstrapDataStatus `json:"bootstrapData,omitempty,omitzero"`

	// capacity is the capacity the Node of each of the pool's containers reports, for an autoscaler
	// that scales the pool from zero: cluster-autoscaler reads it through the MachinePool's
	// spec.template.spec.infrastructureRef, and capacity annotations on the MachinePool override
	// it. cpu and memory are the Docker engine's machine's (docker info): a node container has no
	// resource limits, and its kubelet reports the machine it reads in /proc and /sys. pods is the
	// kubelet's max-pods as the bootstrap data sets it, else the kubelet's default, 110.
	// ephemeral-storage is not reported: the engine does not say how large the filesystem holding
	// its containers' volumes is (docs/contract.md).
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// nodeInfo is the architecture and the operating system the Nodes of the pool's containers
	// report, for the same autoscaler: the Docker engine's machine's.
	// +optional
	NodeInfo DockerMachinePoolNodeInfo `json:"nodeInfo,omitempty,omitzero"`

	// observedGeneration is the generation this status reflects.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Architecture is a CPU architecture as Kubernetes names it (a Node's status.nodeInfo.architecture,
// its kubernetes.io/arch label), among those Cluster API's autoscaling-from-zero proposal lists.
// +kubebuilder:validation:Enum=amd64;arm64;s390x;ppc64le
type Architecture string

// The architectures a pool reports.
const (
	ArchitectureAmd64   Architecture = "amd64"
	ArchitectureArm64   Architecture = "arm64"
	ArchitectureS390x   Architecture = "s390x"
	ArchitecturePpc64le Architecture = "ppc64le"
)

// DockerMachinePoolNodeInfo is what the Nodes of a pool's containers report of their system.
// +kubebuilder:validation:MinProperties=1
type DockerMachinePoolNodeInfo struct {
	// architecture is the CPU architecture of the Nodes; unset when the engine's machine has
	// another than amd64, arm64, s390x or ppc64le.
	// +optional
	Architecture Architecture `json:"architecture,omitempty"`

	// operatingSystem is the operating system of the Nodes: linux.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	OperatingSystem string `json:"operatingSystem,omitempty"`
}

// DockerMachinePoolInitializationStatus reports the pool's provisioning.
// +kubebuilder:validation:MinProperties=1
type DockerMachinePoolInitializationStatus struct {
	// provisioned is true once the pool's infrastructure is ready to host containers.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// DockerMachinePoolVersionGateStatus reports the version-skew gate of a pool.
// +kubebuilder:validation:MinProperties=1
type DockerMachinePoolVersionGateStatus struct {
	// targetVersion is the Kubernetes version of the image the pool would create now.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	TargetVersion string `json:"targetVersion,omitempty"`

	// admittedVersion is the newest version the gate has admitted; replacements and scale-ups
	// use it while the gate waits.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	AdmittedVersion string `json:"admittedVersion,omitempty"`

	// admittedImage is the image of admittedVersion.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	AdmittedImage string `json:"admittedImage,omitempty"`

	// waitingReason is the gate's reason while it waits (ControlPlaneOlder, TooOld,
	// VersionMismatch, ControlPlaneUnknown, InvalidVersion); empty when it admits targetVersion.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	WaitingReason string `json:"waitingReason,omitempty"`

	// waitingSince is when the current pause began; it stays set after the gate re-opens until a
	// container was created with bootstrap data newer than the pause.
	// +optional
	WaitingSince *metav1.Time `json:"waitingSince,omitempty"`

	// bootstrapDataHashAtPause is the sha256 of the bootstrap data when the wait began; data with
	// this hash is never used for the first container after the wait.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BootstrapDataHashAtPause string `json:"bootstrapDataHashAtPause,omitempty"`
}

// DockerMachinePoolBootstrapDataStatus is what the pool last read of the MachinePool's bootstrap
// data.
type DockerMachinePoolBootstrapDataStatus struct {
	// configuration identifies the configuration the data carries: a hash of the files it writes
	// and the commands it runs, bootstrap tokens taken out, so that a rotated or refreshed token
	// does not change it. Containers bootstrapped with another configuration are outdated.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Configuration string `json:"configuration,omitempty"`

	// dataHash is the sha256 of the data.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	DataHash string `json:"dataHash,omitempty"`

	// configName is the MachinePool's KubeadmConfig when the pool first read this data.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ConfigName string `json:"configName,omitempty"`

	// configHash is a hash of that KubeadmConfig's spec then, without the bootstrap token CABPK
	// writes into it at every rotation. CABPK renders a MachinePool's data once and again only
	// with a new token: another hash is a configuration it has not rendered yet, and the pool
	// asks it to.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ConfigHash string `json:"configHash,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=dockermachinepools,scope=Namespaced,categories=cluster-api,shortName=dmp
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Replicas",type="integer",JSONPath=".status.replicas",description="Containers in the pool"
// +kubebuilder:printcolumn:name="Ready",type="integer",JSONPath=".status.readyReplicas",description="Ready containers"
// +kubebuilder:printcolumn:name="Version",type="string",JSONPath=".metadata.labels['infrastructure\\.capdmp\\.dev/kubernetes-version']",description="Kubernetes version of the image the pool creates now"
// +kubebuilder:printcolumn:name="Admitted",type="string",JSONPath=".status.versionGate.admittedVersion",description="Newest version admitted by the version-skew gate"
// +kubebuilder:printcolumn:name="Waiting",type="string",JSONPath=".status.versionGate.waitingReason",description="Why the version-skew gate waits"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description="Time since creation"

// DockerMachinePool is a pool of Docker containers that run Kubernetes nodes; it never creates a
// container whose kubelet would break the version skew policy.
type DockerMachinePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the pool.
	// +optional
	Spec DockerMachinePoolSpec `json:"spec,omitempty,omitzero"`

	// status is the observed state of the pool.
	// +optional
	Status DockerMachinePoolStatus `json:"status,omitempty,omitzero"`
}

// GetConditions returns the pool's conditions.
func (p *DockerMachinePool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions sets the pool's conditions.
func (p *DockerMachinePool) SetConditions(conditions []metav1.Condition) {
	p.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// DockerMachinePoolList is a list of DockerMachinePools.
type DockerMachinePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DockerMachinePool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&DockerMachinePool{}, &DockerMachinePoolList{})
}
