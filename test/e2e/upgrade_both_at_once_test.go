//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
)

var _ = Describe("When the control plane and a CAPDMP MachinePool get a new Kubernetes version in one apply", func() {
	UpgradeBothAtOnceSpec(ctx, func() UpgradeBothAtOnceSpecInput {
		return UpgradeBothAtOnceSpecInput{
			E2EConfig:             e2eConfig,
			ClusterctlConfigPath:  clusterctlConfigPath,
			BootstrapClusterProxy: bootstrapClusterProxy,
			ArtifactFolder:        artifactFolder,
			SkipCleanup:           skipCleanup,
		}
	})
})
