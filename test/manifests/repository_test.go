package manifests

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/version"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	clusterctlconfig "sigs.k8s.io/cluster-api/cmd/clusterctl/client/config"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/repository"
	"sigs.k8s.io/yaml"

	"github.com/capdmp/capdmp/internal/kubeversions"
)

// repositoryProvider is a provider of the local clusterctl repository: the image make images
// builds for it (hack/images/build.sh --list name), and the clusterctl flag that selects it.
type repositoryProvider struct {
	name  string
	typ   clusterctlv1.ProviderType
	image string
	flag  string
}

var repositoryProviders = []repositoryProvider{
	{"cluster-api", clusterctlv1.CoreProviderType, "cluster-api", "--core"},
	{"kubeadm", clusterctlv1.BootstrapProviderType, "kubeadm-bootstrap", "--bootstrap"},
	{"kubeadm", clusterctlv1.ControlPlaneProviderType, "kubeadm-control-plane", "--control-plane"},
	{"docker", clusterctlv1.InfrastructureProviderType, "capd", "--infrastructure"},
	{"capdmp", clusterctlv1.InfrastructureProviderType, "capdmp", "--infrastructure"},
}

// clusterctlRepository writes the local clusterctl repository as make clusterctl-repository does
// (hack/clusterctl-repository.sh, with the components of config/default) into a temporary folder
// and returns the path of its clusterctl.yaml.
func clusterctlRepository(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	components := filepath.Join(dir, "infrastructure-components.yaml")
	if err := os.WriteFile(components, kustomizeBuild(t, "config/default"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "hack", "clusterctl-repository.sh")
	// go test caches results by the files a test opens: the script and what it copies.
	for _, f := range []string{script, filepath.Join(root, "metadata.yaml")} {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(script, filepath.Join(dir, "repository"), components)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/clusterctl-repository.sh (make clusterctl-repository) failed; it needs go, and kustomize and helm from hack/tools: %v\n%s", err, stderr.String())
	}
	return filepath.Join(dir, "repository", "clusterctl.yaml")
}

// TestClusterctlRepository writes the local clusterctl repository and checks it.
func TestClusterctlRepository(t *testing.T) {
	configPath := clusterctlRepository(t)
	t.Run("layout", func(t *testing.T) { testClusterctlRepositoryLayout(t, configPath) })
	t.Run("clusterctl reads it", func(t *testing.T) { testClusterctlReadsTheRepository(t, configPath) })
}

// clusterctlConfigFile is what clusterctl reads of the repository's clusterctl.yaml.
type clusterctlConfigFile struct {
	Providers []struct {
		Name string                    `json:"name"`
		Type clusterctlv1.ProviderType `json:"type"`
		URL  string                    `json:"url"`
	} `json:"providers"`
	CertManager struct {
		URL     string `json:"url"`
		Version string `json:"version"`
	} `json:"cert-manager"`
}

// localPath is the file a file:// URL of the repository names; clusterctl wants it absolute.
func localPath(g Gomega, rawURL string) string {
	u, err := url.Parse(rawURL)
	g.ExpectWithOffset(1, err).ToNot(HaveOccurred())
	g.ExpectWithOffset(1, u.Scheme).To(Equal("file"), rawURL)
	g.ExpectWithOffset(1, filepath.IsAbs(u.Path)).To(BeTrue(), rawURL)
	return u.Path
}

// testClusterctlRepositoryLayout checks the folders clusterctl's local repository reads:
// {base}/{provider label}/{version}/{components}, metadata.yaml beside the components with a
// release series for the version, the images make images builds, and cert-manager's manifest.
func testClusterctlRepositoryLayout(t *testing.T, configPath string) {
	t.Helper()
	g := NewWithT(t)
	raw, err := os.ReadFile(configPath)
	g.Expect(err).ToNot(HaveOccurred())
	var cfg clusterctlConfigFile
	g.Expect(yaml.UnmarshalStrict(raw, &cfg)).To(Succeed())
	g.Expect(cfg.Providers).To(HaveLen(len(repositoryProviders)))
	base := filepath.Dir(configPath)
	tags := imageTags(t)

	for i, want := range repositoryProviders {
		p := cfg.Providers[i]
		id := string(p.Type) + " " + p.Name
		g.Expect(p.Name).To(Equal(want.name), id)
		g.Expect(p.Type).To(Equal(want.typ), id)
		path := localPath(g, p.URL)
		rel, err := filepath.Rel(base, path)
		g.Expect(err).ToNot(HaveOccurred())
		parts := strings.Split(rel, string(filepath.Separator))
		g.Expect(parts).To(HaveLen(3), "%s: %s is not {provider label}/{version}/{components}", id, rel)
		g.Expect(parts[0]).To(Equal(clusterctlv1.ManifestLabel(p.Name, p.Type)), id)
		v, err := version.ParseSemantic(parts[1])
		g.Expect(err).ToNot(HaveOccurred(), "%s: the version folder", id)

		var metadata clusterctlv1.Metadata
		rawMetadata, err := os.ReadFile(filepath.Join(filepath.Dir(path), "metadata.yaml"))
		g.Expect(err).ToNot(HaveOccurred(), id)
		g.Expect(yaml.UnmarshalStrict(rawMetadata, &metadata)).To(Succeed(), id)
		series := metadata.GetReleaseSeriesForVersion(v)
		g.Expect(series).ToNot(BeNil(), "%s: metadata.yaml has no release series for %s", id, v)
		g.Expect(series.Contract).To(Equal("v1beta2"), id)

		components, err := os.ReadFile(path)
		g.Expect(err).ToNot(HaveOccurred(), id)
		g.Expect(deploymentImages(g, components)).To(Equal([]string{canonicalImage(g, tags[want.image])}), "%s runs the image make images builds", id)
	}

	path := localPath(g, cfg.CertManager.URL)
	g.Expect(filepath.Base(filepath.Dir(path))).To(Equal(cfg.CertManager.Version))
	g.Expect(cfg.CertManager.Version).To(Equal(moduleVersion(t, "hack/images/cert-manager", "github.com/cert-manager/cert-manager")))
	manifest, err := os.ReadFile(path)
	g.Expect(err).ToNot(HaveOccurred())
	objs := decodeObjects(g, manifest)
	g.Expect(byKind(objs, "Namespace")).To(HaveLen(1))
	g.Expect(byKind(objs, "CustomResourceDefinition")).To(HaveLen(6))
	g.Expect(deploymentImages(g, manifest)).To(ConsistOf(tags["cert-manager-controller"], tags["cert-manager-webhook"], tags["cert-manager-cainjector"]))
}

// moduleVersion is the version of a module in the graph of the module in dir (of the repository).
func moduleVersion(t *testing.T, dir, module string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", module)
	cmd.Dir = filepath.Join(repoRoot(t), dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m %s in %s: %v", module, dir, err)
	}
	return string(bytes.TrimSpace(out))
}

// testClusterctlReadsTheRepository runs clusterctl itself (built from the Cluster API module of
// test/go.mod, as make run-binaries builds bin/clusterctl) on the repository, with no management
// cluster: `generate provider` reads each provider's components and metadata and substitutes
// their variables' defaults as init does, and `generate cluster` reads CAPDMP's templates.
// cert-manager is read the way init reads it (its URL and version from clusterctl.yaml, its
// manifest through clusterctl's repository client), since no clusterctl command does that offline.
func testClusterctlReadsTheRepository(t *testing.T, configPath string) {
	t.Helper()
	clusterctl := filepath.Join(t.TempDir(), "clusterctl")
	build := exec.Command("nice", "-n", "19", "go", "build", "-o", clusterctl, "sigs.k8s.io/cluster-api/cmd/clusterctl")
	build.Dir = filepath.Join(repoRoot(t), "test")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building clusterctl (sigs.k8s.io/cluster-api/cmd/clusterctl): %v\n%s", err, out)
	}
	home := t.TempDir()
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		cmd := exec.Command(clusterctl, append(args, "--config", configPath)...)
		// No management cluster, and none of the user's clusterctl configuration.
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
			"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("clusterctl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.String()
	}
	tags := imageTags(t)

	for _, p := range repositoryProviders {
		t.Run(clusterctlv1.ManifestLabel(p.name, p.typ), func(t *testing.T) {
			g := NewWithT(t)
			described := run(t, "generate", "provider", p.flag, p.name, "--describe")
			g.Expect(described).To(ContainSubstring(canonicalImage(g, tags[p.image])))
			// Without --raw clusterctl substitutes every variable, which fails on one without a default.
			g.Expect(deploymentImages(g, []byte(run(t, "generate", "provider", p.flag, p.name)))).To(Equal([]string{canonicalImage(g, tags[p.image])}))
		})
	}

	t.Run("capdmp templates", func(t *testing.T) {
		g := NewWithT(t)
		for _, flavor := range []string{"machinepool", "topology"} {
			out := run(t, "generate", "cluster", "demo", "--target-namespace", "default", "--infrastructure", "capdmp:"+capdmpRepositoryVersion(g, configPath),
				"--flavor", flavor, "--kubernetes-version", kubeversions.Older, "--control-plane-machine-count", "1", "--worker-machine-count", "2")
			g.Expect(byKind(decodeObjects(g, []byte(out)), "Cluster")).To(HaveLen(1), flavor)
		}
	})

	t.Run("cert-manager", func(t *testing.T) {
		g := NewWithT(t)
		t.Setenv("HOME", home)
		ctx := context.Background()
		cfg, err := clusterctlconfig.New(ctx, configPath)
		g.Expect(err).ToNot(HaveOccurred())
		certManager, err := cfg.CertManager().Get()
		g.Expect(err).ToNot(HaveOccurred())
		repo, err := repository.New(ctx, clusterctlconfig.NewProvider("cert-manager", certManager.URL(), ""), cfg)
		g.Expect(err).ToNot(HaveOccurred())
		manifest, err := repo.Components().Raw(ctx, repository.ComponentsOptions{Version: certManager.Version()})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(deploymentImages(g, manifest)).To(ConsistOf(tags["cert-manager-controller"], tags["cert-manager-webhook"], tags["cert-manager-cainjector"]))
	})
}

// capdmpRepositoryVersion is the version folder of CAPDMP in the repository of configPath.
func capdmpRepositoryVersion(g Gomega, configPath string) string {
	entries, err := os.ReadDir(filepath.Join(filepath.Dir(configPath), "infrastructure-capdmp"))
	g.ExpectWithOffset(1, err).ToNot(HaveOccurred())
	g.ExpectWithOffset(1, entries).To(HaveLen(1))
	return entries[0].Name()
}
