package v1alpha1

const (
	// KubernetesVersionLabel records the Kubernetes version of a node image: on a DockerMachinePool
	// the version of the image it would create now, on a container and its DockerMachinePoolMachine
	// the version that instance really runs. It is what the version-skew gate reads.
	KubernetesVersionLabel = "infrastructure.capdmp.dev/kubernetes-version"

	// BootstrapDataHashLabel records on a container the sha256 (hex) of the bootstrap data it was
	// created with, so that stale data can be told apart from fresh without keeping a copy. On a
	// DockerMachinePoolMachine, whose label values are limited to 63 characters, it holds the
	// first 32 hex digits of the data its container was bootstrapped with.
	BootstrapDataHashLabel = "infrastructure.capdmp.dev/bootstrap-data-hash"

	// BootstrapConfigurationLabel records on a container the configuration of the bootstrap data
	// it was created for, and on its DockerMachinePoolMachine the configuration its bootstrap
	// ran (status.bootstrapData.configuration says what identifies one). A container whose
	// configuration differs from the MachinePool's data now is outdated, as one whose image
	// differs; one without the label (made before CAPDMP recorded it) is not.
	BootstrapConfigurationLabel = "infrastructure.capdmp.dev/bootstrap-configuration"

	// ImageLabel is set on every container with the image reference it was created from, as the
	// pool named it. The engine reports a container's image by ID once its tag has moved to
	// another image, so this is what tells whether a container runs the pool's target image.
	ImageLabel = "infrastructure.capdmp.dev/image"

	// ClusterNameLabel is set on every container with the name of the Cluster it belongs to.
	ClusterNameLabel = "infrastructure.capdmp.dev/cluster-name"

	// PoolNameLabel is set on every container with the name of the DockerMachinePool that made it.
	PoolNameLabel = "infrastructure.capdmp.dev/pool-name"

	// PoolUIDLabel is set on every container with the UID of the DockerMachinePool that made it
	// (the pool's PoolUIDAnnotation once it has one). Containers are matched on it, never on names
	// alone, so a pool never touches a container it did not create (a pool deleted and re-created
	// with the same name has another UID).
	PoolUIDLabel = "infrastructure.capdmp.dev/pool-uid"

	// PoolUIDAnnotation is set on a DockerMachinePool, by the controller in its first reconcile,
	// to the UID it had then; the webhook keeps it from changing. clusterctl move copies
	// annotations and not UIDs, so a pool moved to another management cluster still finds its
	// containers by it; there a container is its own only if it also carries the pool's
	// namespace (NamespaceLabel) and name (PoolNameLabel), since anyone who may create a pool may
	// write the annotation, and a pool copied with `kubectl get -o yaml` keeps it. The webhook
	// refuses an annotation that names another live pool's UID.
	PoolUIDAnnotation = "infrastructure.capdmp.dev/pool-uid"

	// NamespaceLabel is set on every container with the namespace of the DockerMachinePool that
	// made it.
	NamespaceLabel = "infrastructure.capdmp.dev/namespace"

	// MachinePoolFinalizer lets the DockerMachinePool controller remove containers before the pool goes.
	MachinePoolFinalizer = "dockermachinepool.infrastructure.capdmp.dev"

	// MachinePoolMachineFinalizer lets the DockerMachinePoolMachine controller remove its container
	// before the object goes.
	MachinePoolMachineFinalizer = "dockermachinepoolmachine.infrastructure.capdmp.dev"
)
