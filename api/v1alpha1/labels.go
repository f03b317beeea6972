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

	// ClusterNameLabel is set on every container with the name of the Cluster it belongs to.
	ClusterNameLabel = "infrastructure.capdmp.dev/cluster-name"

	// PoolNameLabel is set on every container with the name of the DockerMachinePool that made it.
	PoolNameLabel = "infrastructure.capdmp.dev/pool-name"

	// PoolUIDLabel is set on every container with the UID of the DockerMachinePool that made it.
	// Containers are matched on it, never on names alone, so a pool never touches a container it
	// did not create (a pool deleted and re-created with the same name has another UID).
	PoolUIDLabel = "infrastructure.capdmp.dev/pool-uid"

	// MachinePoolFinalizer lets the DockerMachinePool controller remove containers before the pool goes.
	MachinePoolFinalizer = "dockermachinepool.infrastructure.capdmp.dev"

	// MachinePoolMachineFinalizer lets the DockerMachinePoolMachine controller remove its container
	// before the object goes.
	MachinePoolMachineFinalizer = "dockermachinepoolmachine.infrastructure.capdmp.dev"
)
