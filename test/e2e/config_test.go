package e2e

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
	"sigs.k8s.io/yaml"
)

// TestConfig checks config/capdmp.yaml as the suite's LoadE2EConfig would (without resolving
// release markers, which needs the network), so that a broken e2e configuration shows up in
// `go test ./...` and not only where the suite can run.
func TestConfig(t *testing.T) {
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join("config", "capdmp.yaml"))
	g.Expect(err).ToNot(HaveOccurred())
	config := &clusterctl.E2EConfig{}
	g.Expect(yaml.UnmarshalStrict(data, config)).To(Succeed())
	config.Defaults()
	config.AbsPaths("config")
	g.Expect(config.Validate()).To(Succeed())

	g.Expect(config.InfrastructureProviders()).To(ConsistOf("docker", "capdmp"))
	for _, p := range config.Providers {
		for _, v := range p.Versions {
			if v.Type == clusterctl.KustomizeSource {
				g.Expect(filepath.Join(v.Value, "kustomization.yaml")).To(BeAnExistingFile(), "provider %s %s", p.Name, v.Name)
			}
		}
	}
	for _, name := range []string{KubernetesVersionManagement, KubernetesVersionUpgradeFrom, KubernetesVersionUpgradeTo, IPFamily, CNIPath} {
		g.Expect(config.Variables).To(HaveKey(name))
	}
	g.Expect(config.Intervals).To(HaveKey("default/wait-version-gate"))
}
