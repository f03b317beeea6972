//go:build e2e

package e2e

import (
	"context"

	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
)

// capdmpProvider is CAPDMP's name in clusterctl: its templates are looked up under it, since the
// management cluster has two infrastructure providers (CAPD runs the control planes).
const capdmpProvider = "capdmp"

// machinePoolsReadyToo waits for the control plane as the framework does, then for every
// MachinePool's nodes with the spec's wait-machine-pool-nodes intervals. Cluster API's
// quick-start gives its MachinePool wait no intervals (gomega's one second), which passes only if
// the pool is ready by the time the control plane is.
func machinePoolsReadyToo(config *clusterctl.E2EConfig, specName string) clusterctl.ControlPlaneWaiters {
	return clusterctl.ControlPlaneWaiters{
		WaitForControlPlaneMachinesReady: func(ctx context.Context, input clusterctl.ApplyCustomClusterTemplateAndWaitInput, result *clusterctl.ApplyCustomClusterTemplateAndWaitResult) {
			framework.WaitForControlPlaneAndMachinesReady(ctx, framework.WaitForControlPlaneAndMachinesReadyInput{
				GetLister:    input.ClusterProxy.GetClient(),
				Cluster:      result.Cluster,
				ControlPlane: result.ControlPlane,
			}, input.WaitForControlPlaneIntervals...)
			framework.DiscoveryAndWaitForMachinePools(ctx, framework.DiscoveryAndWaitForMachinePoolsInput{
				Getter:  input.ClusterProxy.GetClient(),
				Lister:  input.ClusterProxy.GetClient(),
				Cluster: result.Cluster,
			}, config.GetIntervals(specName, "wait-machine-pool-nodes")...)
		},
	}
}
