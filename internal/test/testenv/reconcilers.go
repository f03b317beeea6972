package testenv

import (
	"context"
	"time"

	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/reconcilers/kubeadmconfig"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	clusterreconciler "sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	machinereconciler "sigs.k8s.io/cluster-api/core/reconcilers/machine"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinehealthcheck"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinepool"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// SetupCoreReconcilers adds what every MachinePool test needs of Cluster API's management side:
// the Cluster, Machine, MachinePool, MachineHealthCheck and KubeadmConfig reconcilers (CABPK with
// tokenTTL). The stub-node tier (test/scenarios/stubnodes) and this module's controller tests run these
// alone; the management plane (test/devtools/managementplane) adds the rest.
// secretCachingClient reads Secrets from the manager's cache, as Cluster API's managers do
// (CreateSecretCachingClient of sigs.k8s.io/cluster-api/controlplane/kubeadm/setup).
func SetupCoreReconcilers(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache, secretCachingClient client.Client, opts controller.Options, tokenTTL time.Duration) error {
	setups := []func() error{
		func() error {
			return (&clusterreconciler.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc, RemoteConnectionGracePeriod: 5 * time.Minute}).SetupWithManager(ctx, mgr, opts)
		},
		func() error {
			return (&machinereconciler.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc, RemoteConditionsGracePeriod: 5 * time.Minute}).SetupWithManager(ctx, mgr, opts)
		},
		func() error {
			return (&machinepool.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc}).SetupWithManager(ctx, mgr, opts)
		},
		func() error {
			return (&machinehealthcheck.Reconciler{Client: mgr.GetClient(), ClusterCache: cc}).SetupWithManager(ctx, mgr, opts)
		},
		func() error {
			return (&kubeadmconfig.Reconciler{Client: mgr.GetClient(), SecretCachingClient: secretCachingClient, APIReader: mgr.GetAPIReader(), ClusterCache: cc, TokenTTL: tokenTTL}).SetupWithManager(ctx, mgr, opts)
		},
	}
	for _, setup := range setups {
		if err := setup(); err != nil {
			return err
		}
	}
	return nil
}
