package e2e

// Variables of config/capdmp.yaml the suite reads; each can be overridden by an environment
// variable of the same name.
const (
	// KubernetesVersionManagement is the Kubernetes version of the kind management cluster.
	KubernetesVersionManagement = "KUBERNETES_VERSION_MANAGEMENT"
	// KubernetesVersion is the version of the workload clusters of the specs that upgrade nothing.
	KubernetesVersion = "KUBERNETES_VERSION"
	// KubernetesVersionUpgradeFrom is the version a workload cluster is created at.
	KubernetesVersionUpgradeFrom = "KUBERNETES_VERSION_UPGRADE_FROM"
	// KubernetesVersionUpgradeTo is the version the control plane and the MachinePools move to.
	KubernetesVersionUpgradeTo = "KUBERNETES_VERSION_UPGRADE_TO"
	// KubernetesVersionUpgradeToNext is the version after KubernetesVersionUpgradeTo, for the
	// table's chain of two upgrades.
	KubernetesVersionUpgradeToNext = "KUBERNETES_VERSION_UPGRADE_TO_NEXT"
	// CertManagerComponents is cert-manager's manifest in the local repository make
	// clusterctl-repository writes, which clusterctl init installs; relative to the e2e config.
	CertManagerComponents = "CERT_MANAGER_COMPONENTS"
	// CNIPath is the CNI manifest applied to each workload cluster of the scenarios; empty applies
	// none (the node images built here bring their own pod network).
	CNIPath = "CNI"
)
