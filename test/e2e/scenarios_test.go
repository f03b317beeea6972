//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"

	"github.com/capdmp/capdmp/pkg/conformance"
)

// One Describe per scenario of pkg/conformance's table, by its name: ginkgo's --focus selects them.
var _ = func() bool {
	for _, sc := range conformance.Scenarios() {
		Describe("Scenario "+sc.Name+": "+sc.Doc, func() {
			ScenarioSpec(ctx, func() ScenarioSpecInput {
				return ScenarioSpecInput{
					E2EConfig:             e2eConfig,
					ClusterctlConfigPath:  clusterctlConfigPath,
					BootstrapClusterProxy: bootstrapClusterProxy,
					ArtifactFolder:        artifactFolder,
					SkipCleanup:           skipCleanup,
					Scenario:              sc.Name,
				}
			})
		})
	}
	return true
}()
