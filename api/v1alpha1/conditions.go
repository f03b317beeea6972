package v1alpha1

import clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

// DockerMachinePool condition types and reasons (v1beta2 metav1.Condition).
const (
	// ReadyCondition summarises the other conditions of a DockerMachinePool or DockerMachinePoolMachine.
	ReadyCondition = clusterv1.ReadyCondition

	// PausedCondition is true while the Cluster or the object is paused; nothing is touched then.
	PausedCondition = clusterv1.PausedCondition

	// ReplicasReadyCondition is true when the pool has as many ready containers as the MachinePool asks.
	ReplicasReadyCondition = "ReplicasReady"
	// ReplicasReadyReason: the pool has the requested number of ready replicas.
	ReplicasReadyReason = "Ready"
	// ScalingUpReason: the pool is creating or bootstrapping containers.
	ScalingUpReason = "ScalingUp"
	// ScalingDownReason: the pool is removing containers.
	ScalingDownReason = "ScalingDown"
	// WaitingForReplicasReadyReason: as many containers as requested exist but not all are ready.
	WaitingForReplicasReadyReason = "WaitingForReplicasReady"

	// MachinesCreatedCondition is true when every container the pool needs could be created and bootstrapped.
	MachinesCreatedCondition = "MachinesCreated"
	// MachinesCreatedReason: all requested containers exist and were bootstrapped.
	MachinesCreatedReason = "Created"
	// ImageNotFoundReason: the node image is not present on the engine; it is never pulled.
	ImageNotFoundReason = "ImageNotFound"
	// ImageVersionMismatchReason: the node image's content (/kind/version) records another
	// Kubernetes version than the one its tag names; nothing of it is started.
	ImageVersionMismatchReason = "ImageVersionMismatch"
	// ImageVersionNotRecordedReason: the node image does not record the Kubernetes version it
	// holds, so its tag cannot be verified; nothing of it is started.
	ImageVersionNotRecordedReason = "ImageVersionNotRecorded"
	// ImageContradictedByNodeReason: a Node of a container of the image runs another kubelet than
	// the image was used as; no more containers of it are created.
	ImageContradictedByNodeReason = "ImageContradictedByNode"
	// ContainerCreateFailedReason: the engine refused to create or start a container.
	ContainerCreateFailedReason = "ContainerCreateFailed"
	// HostPathNotAllowedReason: an extraMount's host path is not one the manager allows
	// (--allowed-host-paths), so no container is created; the message names the mount and why.
	HostPathNotAllowedReason = "HostPathNotAllowed"
	// ExtraMountInvalidReason: an extraMount has a path Docker would read otherwise than it is
	// written (one with a ":") or a container path where every node mounts something of its
	// own, so no container is created; the message names the field and why.
	ExtraMountInvalidReason = "ExtraMountInvalid"
	// BootstrapFailedReason: the bootstrap commands failed in a container.
	BootstrapFailedReason = "BootstrapFailed"
	// WaitingForBootstrapDataReason: the MachinePool has no bootstrap data secret yet.
	WaitingForBootstrapDataReason = "WaitingForBootstrapData"
	// WaitingForVersionGateReason: some containers are not created because the version-skew gate waits.
	WaitingForVersionGateReason = "WaitingForVersionGate"

	// VersionSkewCondition is true when the pool may create containers of the version it targets
	// now; false while the version-skew gate makes it wait. Its reasons are those of pkg/skew.
	VersionSkewCondition = "VersionSkewAdmitted"

	// KubeletSkewCondition is true when every kubelet of the pool honours the version skew policy
	// against the control plane's versions; false, naming them, when the control plane moved more
	// than three minors ahead of some or was downgraded below them; unknown while the control
	// plane reports no version.
	KubeletSkewCondition = "KubeletsWithinSkewPolicy"
	// KubeletsWithinSkewPolicyReason: every kubelet of the pool honours the skew policy.
	KubeletsWithinSkewPolicyReason = "WithinPolicy"
	// KubeletsOutOfSkewPolicyReason: some kubelets of the pool break the skew policy.
	KubeletsOutOfSkewPolicyReason = "OutOfPolicy"
	// KubeletSkewUnknownReason: the control plane reports no version to judge the kubelets by.
	KubeletSkewUnknownReason = "ControlPlaneUnknown"

	// BootstrapDataFreshCondition is false while the pool waits for the bootstrap provider to
	// re-render data that is older than a pause or was rendered for another Kubernetes version.
	BootstrapDataFreshCondition = "BootstrapDataFresh"
	// BootstrapDataFreshReason: the data the next container would use is fresh.
	BootstrapDataFreshReason = "Fresh"
	// BootstrapDataRefreshingReason: a refresh was requested from the bootstrap provider.
	BootstrapDataRefreshingReason = "Refreshing"
	// BootstrapDataNotRefreshableReason: the data predates a pause but cannot be refreshed (not a
	// KubeadmConfig's, no bootstrap token in it, or its token is shared); containers the gate
	// admits are created with it.
	BootstrapDataNotRefreshableReason = "NotRefreshable"
	// InvalidBootstrapDataReason is used on BootstrapDataFresh and MachinesCreated: no container
	// can be bootstrapped with the data (it cannot be turned into bootstrap commands, or the
	// template of one of its files exceeds the rendering budget), so none is created; the
	// message names the file and why.
	InvalidBootstrapDataReason = "InvalidBootstrapData"

	// DeletingReason is used on Ready while the object is being deleted.
	DeletingReason = "Deleting"
	// InventoryUnknownReason is used on Ready when the pool's containers could not be listed.
	InventoryUnknownReason = "InventoryUnknown"
	// EngineUnavailableReason is used on Ready, and on MachinesCreated for a create that failed,
	// while the container engine does not answer within the call timeout or refuses connections;
	// the controller retries with backoff. DockerMachinePoolMachines use it on Ready too.
	EngineUnavailableReason = "EngineUnavailable"
)

// DockerMachinePoolMachine condition types and reasons.
const (
	// ContainerProvisionedCondition is true when the container of a DockerMachinePoolMachine runs
	// and has been bootstrapped.
	ContainerProvisionedCondition = "ContainerProvisioned"
	// ContainerProvisionedReason: the container runs and has been bootstrapped.
	ContainerProvisionedReason = "Provisioned"
	// ContainerNotFoundReason: the container is gone; the pool will replace it.
	ContainerNotFoundReason = "ContainerNotFound"
	// ContainerNotRunningReason: the container exists but is not running.
	ContainerNotRunningReason = "ContainerNotRunning"
	// ContainerNotOwnedReason: a container of the machine's name exists but does not carry the
	// identity labels of the machine's DockerMachinePool and Cluster (or that pool does not
	// exist); CAPDMP neither runs anything in it nor removes it.
	ContainerNotOwnedReason = "ContainerNotOwned"
	// WaitingForNodeBootReason: the container runs but its systemd and container runtime are not
	// up yet; the bootstrap starts when they are.
	WaitingForNodeBootReason = "WaitingForNodeBoot"
	// BootstrappingReason: the bootstrap runs in the container, detached from the controller;
	// the controller follows it until it ends or exceeds the pool's bootstrapTimeout.
	BootstrappingReason = "Bootstrapping"

	// NodeProviderIDCondition is true when the Node of the container carries the machine's
	// providerID, which Cluster API matches MachinePool Machines and nodeRefs on.
	NodeProviderIDCondition = "NodeProviderIDSet"
	// NodeProviderIDSetReason: the Node has the providerID.
	NodeProviderIDSetReason = "Set"
	// WaitingForNodeReason: the container bootstrapped and its Node has not registered yet.
	WaitingForNodeReason = "WaitingForNode"
	// NodeProviderIDMismatchReason: the Node carries another providerID (set by its kubelet).
	NodeProviderIDMismatchReason = "ProviderIDMismatch"

	// KubeletVersionCondition is true when the kubeletVersion of the container's Node is the
	// version its image was labelled with; false when the image's tag says another version.
	KubeletVersionCondition = "KubeletVersionAsLabelled"
	// KubeletVersionMatchesReason: the Node's kubelet runs the labelled version.
	KubeletVersionMatchesReason = "Matches"
	// KubeletVersionMismatchReason: the Node's kubelet runs another version than the image's
	// label; the gate counts the kubelet's.
	KubeletVersionMismatchReason = "KubeletVersionMismatch"
)

// Reasons the pool sets on the OwnerRemediated condition of its Machines, which a
// MachineHealthCheck sets to False to hand an unhealthy Machine to its owner. The values are those
// a MachineSet uses, so that tools reading Machines see one vocabulary.
const (
	// MachineRemediationMachineDeletingReason: the pool deletes the Machine; its replacement is
	// created under the version-skew gate.
	MachineRemediationMachineDeletingReason = clusterv1.MachineSetMachineRemediationMachineDeletingReason
	// MachineRemediationDeferredReason: the pool keeps the Machine for now, because it could not
	// create a replacement (the gate admits no version the pool has an image for).
	MachineRemediationDeferredReason = clusterv1.MachineSetMachineRemediationDeferredReason
)
