package kubeversions

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/cluster-api/test/infrastructure/kind"
	"sigs.k8s.io/yaml"
)

// TestDefaultsArePublished: every default node version is one kind publishes an image of, as
// Cluster API's kind mapper lists them, so that the README's first command pulls instead of
// building; and hack/node-images/published.txt pins each by the mapper's digest.
func TestDefaultsArePublished(t *testing.T) {
	published := map[string]string{}
	content, err := os.ReadFile(filepath.Join("..", "..", "hack", "node-images", "published.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(content)) {
		if fields := strings.Fields(line); len(fields) == 2 && strings.HasPrefix(fields[0], "v") {
			published[fields[0]] = fields[1]
		}
	}
	// Every version the list pins, default or not, is pinned as kind publishes it.
	for v, ref := range published {
		parsed, err := semver.ParseTolerant(v)
		if err != nil {
			t.Fatalf("published.txt: %s: %v", v, err)
		}
		if mapping := kind.GetMapping(parsed, ""); ref != mapping.Image {
			t.Errorf("published.txt pins %s as %s; Cluster API's kind mapper as %s", v, ref, mapping.Image)
		}
	}
	for _, v := range Nodes() {
		t.Run(v, func(t *testing.T) {
			g := NewWithT(t)
			parsed, err := semver.ParseTolerant(v)
			g.Expect(err).ToNot(HaveOccurred())
			mapping := kind.GetMapping(parsed, "")
			g.Expect(mapping.KubernetesVersion.Equals(parsed)).To(BeTrue(), "Cluster API's kind mapper lists no kindest/node image of %s (its nearest: %s)", v, mapping.Image)
			g.Expect(mapping.Image).To(HavePrefix("kindest/node:" + v + "@sha256:"))
			g.Expect(published).To(HaveKeyWithValue(v, mapping.Image), "published.txt pins %s by the mapper's digest", v)
		})
	}
}

func TestDefaultsAreConsistent(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Older).To(MatchRegexp(`^v1\.\d+\.\d+$`))
	older, newer, oldest := semver.MustParse(Older[1:]), semver.MustParse(Newer[1:]), semver.MustParse(Oldest[1:])
	g.Expect(newer.Minor).To(Equal(older.Minor+1), "an upgrade is one minor")
	g.Expect(oldest.Minor+1).To(Equal(older.Minor), "the full tier spans three minors")
	// A cold machine then compiles kube-apiserver once for the envtest binaries and a node image.
	g.Expect(Nodes()).To(ContainElement(Envtest), "envtest's kube-apiserver is one of the node versions")

	// The e2e config is read by Cluster API's e2e framework, which cannot read versions.txt.
	content, err := os.ReadFile(filepath.Join("..", "..", "test", "e2e", "config", "capdmp.yaml"))
	g.Expect(err).ToNot(HaveOccurred())
	var config struct{ Variables map[string]string }
	g.Expect(yaml.Unmarshal(content, &config)).To(Succeed())
	g.Expect(config.Variables).To(HaveKeyWithValue("KUBERNETES_VERSION_MANAGEMENT", Older))
	g.Expect(config.Variables).To(HaveKeyWithValue("KUBERNETES_VERSION", Older))
	g.Expect(config.Variables).To(HaveKeyWithValue("KUBERNETES_VERSION_UPGRADE_FROM", Older))
	g.Expect(config.Variables).To(HaveKeyWithValue("KUBERNETES_VERSION_UPGRADE_TO", Newer))

	// The Makefile and the scripts read the file rather than repeat its versions (crictl's own
	// version can be the same number).
	for _, file := range []string{"Makefile", "hack/envtest-binaries.sh", "hack/node-images/build.sh", "hack/kind-management.sh", "hack/test-developer-machine.sh", "hack/clusterctl-repository.sh", "Tiltfile"} {
		content, err := os.ReadFile(filepath.Join("..", "..", file))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(string(content)).To(ContainSubstring("internal/kubeversions/versions.txt"), "%s reads the versions", file)
		for _, v := range Nodes() {
			g.Expect(slices.ContainsFunc(strings.Split(string(content), "\n"), func(line string) bool {
				return strings.Contains(line, v) && !strings.HasPrefix(strings.TrimSpace(line), "#") && !strings.Contains(line, "CRICTL_VERSION")
			})).To(BeFalse(), "%s names %s itself", file, v)
		}
	}
}
