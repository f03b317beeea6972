package e2e

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
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
	// Every provider comes from the local repository make clusterctl-repository writes, in the
	// folder clusterctl reads it from: <repository>/<provider label>/<version>/.
	repository, err := filepath.Abs(filepath.Join("..", "..", "out", "clusterctl-repository"))
	g.Expect(err).ToNot(HaveOccurred())
	for _, p := range config.Providers {
		label := clusterctlv1.ManifestLabel(p.Name, clusterctlv1.ProviderType(p.Type))
		for _, v := range p.Versions {
			g.Expect(v.Type).To(Equal(clusterctl.URLSource), "provider %s %s", p.Name, v.Name)
			path, err := filepath.Abs(v.Value)
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(filepath.Dir(path)).To(Equal(filepath.Join(repository, label, v.Name)), "provider %s %s", p.Name, v.Name)
		}
	}
	for _, name := range []string{KubernetesVersionManagement, KubernetesVersion, KubernetesVersionUpgradeFrom, KubernetesVersionUpgradeTo, IPFamily, CNIPath} {
		g.Expect(config.Variables).To(HaveKey(name))
	}
	g.Expect(config.Intervals).To(HaveKey("default/wait-version-gate"))
}
