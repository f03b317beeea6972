// Package webhooks implements the defaulting and validating admission webhooks of the CAPDMP
// kinds: DockerMachinePool, DockerMachinePoolTemplate and DockerMachinePoolMachine.
//
// The webhooks check only what the CRD schema cannot: that a custom image's tag names the
// Kubernetes version the version-skew gate will read, that preloaded images are image references,
// that extra mounts mount only host paths the manager allows (internal/hostpath), as paths Docker
// reads as written, on container paths a node can give up (internal/container), and no two on
// one, that templates change only by rotation, and that a pool's recorded UID neither changes nor
// names another pool (PoolUIDIndex). docs/webhooks.md describes every rule for users.
package webhooks

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/capdmp/capdmp/internal/hostpath"
)

// SetupWebhooksWithManager registers the webhooks of all CAPDMP kinds with the manager's webhook
// server. hostPaths are the host paths pools may mount (the manager's --allowed-host-paths).
func SetupWebhooksWithManager(mgr ctrl.Manager, hostPaths hostpath.Policy) error {
	if err := (&DockerMachinePool{HostPaths: hostPaths}).SetupWebhookWithManager(mgr); err != nil {
		return err
	}
	if err := (&DockerMachinePoolTemplate{HostPaths: hostPaths}).SetupWebhookWithManager(mgr); err != nil {
		return err
	}
	return (&DockerMachinePoolMachine{}).SetupWebhookWithManager(mgr)
}
