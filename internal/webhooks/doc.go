// Package webhooks implements the defaulting and validating admission webhooks of the CAPDMP
// kinds: DockerMachinePool, DockerMachinePoolTemplate and DockerMachinePoolMachine.
//
// The webhooks check only what the CRD schema cannot: that a custom image's tag names the
// Kubernetes version the version-skew gate will read, that preloaded images are image references,
// that no two extra mounts share a container path, and that templates change only by rotation.
// docs/webhooks.md describes every rule for users.
package webhooks

import (
	ctrl "sigs.k8s.io/controller-runtime"
)

// SetupWebhooksWithManager registers the webhooks of all CAPDMP kinds with the manager's webhook
// server.
func SetupWebhooksWithManager(mgr ctrl.Manager) error {
	if err := (&DockerMachinePool{}).SetupWebhookWithManager(mgr); err != nil {
		return err
	}
	if err := (&DockerMachinePoolTemplate{}).SetupWebhookWithManager(mgr); err != nil {
		return err
	}
	return (&DockerMachinePoolMachine{}).SetupWebhookWithManager(mgr)
}
