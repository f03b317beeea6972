//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

// Cluster API's own specs, run on CAPDMP's flavors: the workers of every cluster are a CAPDMP
// MachinePool, the control plane CAPD machines.

// The quick-start on each flavor: a MachinePool of its own, and one of ClusterClass capdmp.
var _ = func() bool {
	for _, q := range []struct{ describe, flavor string }{
		{"When following the Cluster API quick-start on the machinepool flavor", "machinepool"},
		{"When following the Cluster API quick-start with ClusterClass", "topology"},
	} {
		Describe(q.describe, func() {
			capie2e.QuickStartSpec(ctx, func() capie2e.QuickStartSpecInput {
				return capie2e.QuickStartSpecInput{
					E2EConfig:              e2eConfig,
					ClusterctlConfigPath:   clusterctlConfigPath,
					BootstrapClusterProxy:  bootstrapClusterProxy,
					ArtifactFolder:         artifactFolder,
					SkipCleanup:            skipCleanup,
					InfrastructureProvider: ptr.To(capdmpProvider),
					Flavor:                 ptr.To(q.flavor),
					ControlPlaneWaiters:    machinePoolsReadyToo(e2eConfig, "quick-start"),
				}
			})
		})
	}
	return true
}()

var _ = Describe("When testing MachinePools", func() {
	capie2e.MachinePoolSpec(ctx, func() capie2e.MachinePoolInput {
		return capie2e.MachinePoolInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To(capdmpProvider),
			Flavor:                 ptr.To("machinepool"),
		}
	})
})

var _ = Describe("When moving a cluster with clusterctl move", func() {
	MoveSpec(ctx, func() MoveSpecInput {
		return MoveSpecInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
			CreateTarget:          createManagementCluster,
		}
	})
})
