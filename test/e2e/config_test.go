package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	for _, name := range []string{KubernetesVersionManagement, KubernetesVersion, KubernetesVersionUpgradeFrom, KubernetesVersionUpgradeTo, CertManagerComponents, CNIPath} {
		g.Expect(config.Variables).To(HaveKey(name))
	}
	g.Expect(config.Intervals).To(HaveKey("default/wait-version-gate"))

	// The images the suite loads into its kind clusters are those make images builds, each a must:
	// a missing one would only show as a controller that never pulls its image.
	list := exec.Command(filepath.Join("..", "..", "hack", "images", "build.sh"), "--list")
	list.Env = append(os.Environ(), "CAPDMP_IMG=capdmp-controller:dev")
	out, err := list.Output()
	g.Expect(err).ToNot(HaveOccurred(), "hack/images/build.sh --list")
	var built []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		_, image, ok := strings.Cut(line, "\t")
		g.Expect(ok).To(BeTrue(), "a line of build.sh --list: %q", line)
		built = append(built, image)
	}
	var loaded []string
	for _, image := range config.Images {
		g.Expect(image.LoadBehavior).To(Equal(clusterctl.MustLoadImage), "image %s", image.Name)
		loaded = append(loaded, image.Name)
	}
	g.Expect(loaded).To(ConsistOf(built))

	// cert-manager's manifest is in the local repository, at the version hack/images builds.
	certManager, err := filepath.Abs(filepath.Join("config", config.Variables[CertManagerComponents]))
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(filepath.Dir(filepath.Dir(certManager))).To(Equal(filepath.Join(repository, "cert-manager")))
	g.Expect(built).To(ContainElement(HaveSuffix(":"+filepath.Base(filepath.Dir(certManager)))), "the cert-manager images' tag")
}
