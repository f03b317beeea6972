package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/capdmp/capdmp/internal/kubeversions"
)

// releaseVersion is the version written in hack/release/VERSION, the one place it is set.
func releaseVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "hack", "release", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

// readInputs reads the files the release is made of, so that go test's cache notices when one
// changes (the script and make run in other processes).
func readInputs(t *testing.T, paths ...string) {
	t.Helper()
	for _, path := range paths {
		err := filepath.WalkDir(filepath.Join(repoRoot(t), path), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			_, err = os.ReadFile(path)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// runRelease runs `make release` with the given variables (as on its command line) and returns
// its output and error.
func runRelease(t *testing.T, vars ...string) (string, error) {
	t.Helper()
	readInputs(t, "Makefile", "hack/release", "metadata.yaml", "templates", "config")
	cmd := exec.Command("make", append([]string{"--no-print-directory", "release"}, vars...)...)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// clusterctlSettings is what Cluster API's cmd/clusterctl/hack/create-local-repository.py reads
// of a provider's clusterctl-settings.json.
type clusterctlSettings struct {
	Name   string `json:"name"`
	Config struct {
		ComponentsFile string `json:"componentsFile"`
		NextVersion    string `json:"nextVersion"`
	} `json:"config"`
}

// TestRelease runs `make release` (hack/release/release.sh) into a temporary folder and checks
// the files clusterctl reads from a release: the components run the release's image, tagged with
// its version; metadata.yaml, every template and a default flavor; clusterctl-settings.json.
func TestRelease(t *testing.T) {
	root := repoRoot(t)
	const version = "v0.1.7"
	tests := []struct {
		name      string
		vars      []string
		wantImage string
	}{
		{
			name:      "no registry: Docker's short name, in full",
			wantImage: "docker.io/library/capdmp-controller:" + version,
		},
		{
			name:      "REGISTRY and IMAGE_NAME",
			vars:      []string{"REGISTRY=registry.example:5000/capdmp", "IMAGE_NAME=manager"},
			wantImage: "registry.example:5000/capdmp/manager:" + version,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := filepath.Join(t.TempDir(), "release")
			out, err := runRelease(t, append([]string{"VERSION=" + version, "RELEASE_DIR=" + dir}, tt.vars...)...)
			g.Expect(err).NotTo(HaveOccurred(), "make release:\n%s", out)

			var files []string
			entries, err := os.ReadDir(dir)
			g.Expect(err).NotTo(HaveOccurred())
			for _, e := range entries {
				files = append(files, e.Name())
			}
			templates, err := filepath.Glob(filepath.Join(root, "templates", "*.yaml"))
			g.Expect(err).NotTo(HaveOccurred())
			want := []string{"infrastructure-components.yaml", "metadata.yaml", "cluster-template.yaml", "clusterctl-settings.json"}
			for _, tmpl := range templates {
				want = append(want, filepath.Base(tmpl))
				g.Expect(readFile(g, filepath.Join(dir, filepath.Base(tmpl)))).To(Equal(readFile(g, tmpl)), "%s is templates/' own", filepath.Base(tmpl))
			}
			g.Expect(files).To(ConsistOf(want))
			g.Expect(files).To(ContainElement(HavePrefix("clusterclass-")))

			// clusterctl generate cluster without --flavor reads cluster-template.yaml.
			g.Expect(readFile(g, filepath.Join(dir, "cluster-template.yaml"))).To(Equal(readFile(g, filepath.Join(root, "templates", "cluster-template-machinepool.yaml"))))
			g.Expect(readFile(g, filepath.Join(dir, "metadata.yaml"))).To(Equal(readFile(g, filepath.Join(root, "metadata.yaml"))))

			// The components are make manifests' but for the manager's image.
			components := readFile(g, filepath.Join(dir, "infrastructure-components.yaml"))
			g.Expect(deploymentImages(g, components)).To(Equal([]string{tt.wantImage}))
			g.Expect(string(components)).NotTo(ContainSubstring(":dev"))
			development := kustomizeBuild(t, "config/default")
			devImages := deploymentImages(g, development)
			g.Expect(devImages).To(HaveLen(1))
			g.Expect(string(components)).To(Equal(strings.Replace(string(development), "image: "+devImages[0], "image: "+tt.wantImage, 1)))

			var settings clusterctlSettings
			raw := readFile(g, filepath.Join(dir, "clusterctl-settings.json"))
			decoder := json.NewDecoder(bytes.NewReader(raw))
			decoder.DisallowUnknownFields()
			g.Expect(decoder.Decode(&settings)).To(Succeed())
			g.Expect(settings.Name).To(Equal("infrastructure-capdmp"))
			g.Expect(settings.Config.ComponentsFile).To(Equal("infrastructure-components.yaml"))
			g.Expect(settings.Config.NextVersion).To(Equal(version))
		})
	}

	t.Run("clusterctl generate cluster without --flavor", func(t *testing.T) {
		g := NewWithT(t)
		base := t.TempDir()
		dir := filepath.Join(base, "release")
		out, err := runRelease(t, "VERSION="+version, "RELEASE_DIR="+dir)
		g.Expect(err).NotTo(HaveOccurred(), "make release:\n%s", out)
		config := releaseRepository(t, base, dir, version)
		clusterctl := buildClusterctl(t)
		generate := func(extra ...string) []byte {
			args := append([]string{"generate", "cluster", "demo", "--config", config, "--target-namespace", "default",
				"--infrastructure", "capdmp:" + version, "--kubernetes-version", kubeversions.Older,
				"--control-plane-machine-count", "1", "--worker-machine-count", "2"}, extra...)
			return runClusterctl(t, clusterctl, args...)
		}
		byDefault := generate()
		g.Expect(byDefault).To(Equal(generate("--flavor", "machinepool")))
		objs := decodeObjects(g, byDefault)
		g.Expect(byKind(objs, "MachinePool")).To(HaveLen(1))
		g.Expect(byKind(objs, "DockerMachinePool")).To(HaveLen(1))
	})

	t.Run("refused", func(t *testing.T) {
		for _, tt := range []struct{ name, version, image, want string }{
			{"no series for its major.minor", "v0.9.0", "", "metadata.yaml has no release series 0.9"},
			{"not a semantic version", "0.1.0", "", "is not a semantic version"},
			{"the image's tag is not the version", "v0.1.7", "capdmp-controller:dev", "its tag must be the release's version v0.1.7"},
			{"an image without a tag", "v0.1.7", "localhost:5000/capdmp-controller", "has no tag"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				g := NewWithT(t)
				dir := filepath.Join(t.TempDir(), "release")
				vars := []string{"VERSION=" + tt.version, "RELEASE_DIR=" + dir}
				if tt.image != "" {
					vars = append(vars, "RELEASE_IMG="+tt.image)
				}
				out, err := runRelease(t, vars...)
				g.Expect(err).To(HaveOccurred(), "make release %v succeeded:\n%s", vars, out)
				g.Expect(out).To(ContainSubstring(tt.want))
				_, err = os.Stat(filepath.Join(dir, "infrastructure-components.yaml"))
				g.Expect(os.IsNotExist(err)).To(BeTrue(), "a refused release wrote its components")
			})
		}
	})
}

// releaseRepository makes base a clusterctl local repository holding the release folder dir as
// version of CAPDMP: clusterctl reads file:// repositories as
// {base}/{provider label}/{version}/{components}, so the folder is linked there, and returns the
// path of a clusterctl.yaml whose capdmp entry points at it.
func releaseRepository(t *testing.T, base, dir, version string) string {
	t.Helper()
	label := filepath.Join(base, "infrastructure-capdmp")
	if err := os.MkdirAll(label, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(label, version)); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(base, "clusterctl.yaml")
	content := "providers:\n- name: capdmp\n  type: InfrastructureProvider\n  url: file://" +
		filepath.Join(label, version, "infrastructure-components.yaml") + "\n"
	if err := os.WriteFile(config, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return config
}

// buildClusterctl builds clusterctl from the Cluster API module of test/go.mod, as make run-binaries does.
func buildClusterctl(t *testing.T) string {
	t.Helper()
	clusterctl := filepath.Join(t.TempDir(), "clusterctl")
	build := exec.Command("nice", "-n", "19", "go", "build", "-o", clusterctl, "sigs.k8s.io/cluster-api/cmd/clusterctl")
	build.Dir = filepath.Join(repoRoot(t), "test")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building clusterctl (sigs.k8s.io/cluster-api/cmd/clusterctl): %v\n%s", err, out)
	}
	return clusterctl
}

// runClusterctl runs clusterctl with no management cluster and none of the user's configuration.
func runClusterctl(t *testing.T, clusterctl string, args ...string) []byte {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(clusterctl, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("clusterctl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

func readFile(g Gomega, path string) []byte {
	raw, err := os.ReadFile(path)
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return raw
}

// TestReleaseVersionOnePlace: hack/release/VERSION is the version make uses, the one the local
// repository files CAPDMP under, and the base of the development version hack/version.sh gives an
// untagged tree; a tag wins over it.
func TestReleaseVersionOnePlace(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)
	version := releaseVersion(t)
	readInputs(t, "Makefile", "hack/release", "hack/version.sh", "hack/clusterctl-repository.sh")

	cmd := exec.Command("make", "--no-print-directory", "-s", "release-version")
	cmd.Dir = root
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(string(out))).To(Equal(version))

	// No other file sets a version of CAPDMP: no make or shell assignment or shell default of
	// VERSION, CAPDMP_VERSION or version to a literal.
	literal := regexp.MustCompile(`(?i)(^|[^a-z_-])(capdmp_)?version\s*(\?=|:=|=|:-)\s*"?v[0-9]+\.[0-9]+\.[0-9]+`)
	for _, file := range []string{"Makefile", "hack/release/release.mk", "hack/clusterctl-repository.sh", "hack/version.sh", "hack/release/release.sh"} {
		for _, line := range strings.Split(string(readFile(g, filepath.Join(root, file))), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			g.Expect(literal.FindString(line)).To(BeEmpty(), "%s sets a version itself: %s", file, line)
		}
	}

	// hack/version.sh in a tree of its own: one commit, then a tag.
	tree := t.TempDir()
	for _, file := range []string{"hack/version.sh", "hack/release/VERSION"} {
		g.Expect(os.MkdirAll(filepath.Join(tree, filepath.Dir(file)), 0o755)).To(Succeed())
		info, err := os.Stat(filepath.Join(root, file))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(tree, file), readFile(g, filepath.Join(root, file)), info.Mode())).To(Succeed())
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
		cmd.Dir = tree
		cmd.Env = append(os.Environ(), "GIT_COMMITTER_DATE=2026-12-02T11:45:00Z", "GIT_AUTHOR_DATE=2026-12-02T11:45:00Z", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "one")
	commit := git("rev-parse", "HEAD")
	gitVersion := func() string {
		cmd := exec.Command(filepath.Join(tree, "hack", "version.sh"))
		cmd.Env = append(os.Environ(), "GIT_VERSION=", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.Output()
		g.Expect(err).NotTo(HaveOccurred())
		for _, flag := range strings.Fields(string(out)) {
			if v, ok := strings.CutPrefix(flag, "github.com/capdmp/capdmp/version.gitVersion="); ok {
				return v
			}
		}
		t.Fatalf("hack/version.sh printed no gitVersion: %s", out)
		return ""
	}
	g.Expect(gitVersion()).To(Equal(version + "-0.20261202114500-" + commit[:12]))
	git("tag", "v9.8.7")
	g.Expect(gitVersion()).To(Equal("v9.8.7"))
}

// TestReleaseMetadataDecodes keeps the awk reading of metadata.yaml in release.sh honest: every
// series metadata.yaml declares is one release.sh accepts.
func TestReleaseMetadataDecodes(t *testing.T) {
	g := NewWithT(t)
	var metadata struct {
		ReleaseSeries []struct {
			Major int `json:"major"`
			Minor int `json:"minor"`
		} `json:"releaseSeries"`
	}
	g.Expect(yaml.Unmarshal(readFile(g, filepath.Join(repoRoot(t), "metadata.yaml")), &metadata)).To(Succeed())
	g.Expect(metadata.ReleaseSeries).NotTo(BeEmpty())
	for _, s := range metadata.ReleaseSeries {
		version := fmt.Sprintf("v%d.%d.0", s.Major, s.Minor)
		cmd := exec.Command(filepath.Join(repoRoot(t), "hack", "release", "release.sh"), filepath.Join(t.TempDir(), "release"))
		cmd.Env = append(os.Environ(), "VERSION="+version)
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "release.sh refuses %s, a series of metadata.yaml:\n%s", version, out)
	}
}
