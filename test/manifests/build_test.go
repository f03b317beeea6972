package manifests

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const modulePath = "github.com/capdmp/capdmp"

// managerSources returns the directories, relative to the repository root, of the local packages
// the manager is built from (main.go and everything it imports from this module).
func managerSources(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	// Read main.go so that go test's cache notices when its imports change.
	if _, err := os.ReadFile(filepath.Join(root, "main.go")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-e", "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}{{"\t"}}{{.Dir}}{{end}}`, ".")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var dirs []string
	scanner := bufio.NewScanner(bytes.NewReader(out))
	for scanner.Scan() {
		importPath, dir, ok := strings.Cut(scanner.Text(), "\t")
		if !ok || (importPath != modulePath && !strings.HasPrefix(importPath, modulePath+"/")) {
			continue
		}
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, filepath.ToSlash(rel))
	}
	if len(dirs) < 2 {
		t.Fatalf("found only %v among the manager's packages", dirs)
	}
	return dirs
}

// covered reports whether path (relative, slash-separated; "." is the root package) lies in one of
// the given paths. The root package is covered by main.go, go.mod and go.sum together.
func covered(path string, by []string) bool {
	for _, p := range by {
		p = strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/")
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

func rootFilesCovered(g Gomega, by []string, what string) {
	for _, file := range []string{"main.go", "go.mod", "go.sum"} {
		g.ExpectWithOffset(1, covered(file, by)).To(BeTrue(), "%s misses %s", what, file)
	}
}

// TestDockerfileCopiesEveryManagerPackage keeps the Dockerfile and .dockerignore in step with the
// code: a package added outside the copied folders would break the image build, which CI does
// not run.
func TestDockerfileCopiesEveryManagerPackage(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)

	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	g.Expect(err).ToNot(HaveOccurred())
	var copied []string
	for _, line := range strings.Split(string(dockerfile), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "COPY" || strings.HasPrefix(fields[1], "--from") {
			continue
		}
		copied = append(copied, fields[1:len(fields)-1]...)
	}

	dockerignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	g.Expect(err).ToNot(HaveOccurred())
	lines := strings.Split(string(dockerignore), "\n")
	g.Expect(lines[0:3]).To(ContainElement("*"), ".dockerignore excludes everything first, then lists what the build needs")
	var included []string
	for _, line := range lines {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "!"); ok {
			included = append(included, path)
		}
	}

	rootFilesCovered(g, copied, "the Dockerfile's COPY")
	rootFilesCovered(g, included, ".dockerignore")
	for _, dir := range managerSources(t) {
		if dir == "." {
			continue
		}
		g.Expect(covered(dir, copied)).To(BeTrue(), "the Dockerfile does not copy %s, which the manager imports", dir)
		g.Expect(covered(dir, included)).To(BeTrue(), ".dockerignore leaves out %s, which the manager imports", dir)
	}
}

// TestTiltProvider checks tilt-provider.yaml against Cluster API's Tilt: the image must be the
// Deployment's (Tilt only replaces images it builds), and a change in any package of the
// manager must trigger a rebuild.
func TestTiltProvider(t *testing.T) {
	g := NewWithT(t)
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "tilt-provider.yaml"))
	g.Expect(err).ToNot(HaveOccurred())

	var provider struct {
		Name   string `json:"name"`
		Config struct {
			Image          string   `json:"image"`
			LiveReloadDeps []string `json:"live_reload_deps"`
			Label          string   `json:"label"`
		} `json:"config"`
	}
	g.Expect(yaml.UnmarshalStrict(raw, &provider)).To(Succeed())
	g.Expect(provider.Name).To(Equal("capdmp"))
	g.Expect(provider.Config.Label).To(Equal("CAPDMP"))

	var managerImage string
	for _, obj := range byKind(components(t), "Deployment") {
		containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			if c, ok := c.(map[string]interface{}); ok && c["name"] == managerContainer {
				managerImage, _ = c["image"].(string)
			}
		}
	}
	// Tilt matches images by name and ignores the tag.
	name, _, _ := strings.Cut(managerImage, ":")
	g.Expect(provider.Config.Image).To(Equal(name), "Tilt builds %s but the Deployment runs %s", provider.Config.Image, managerImage)

	for _, dep := range provider.Config.LiveReloadDeps {
		_, err := os.Stat(filepath.Join(repoRoot(t), dep))
		g.Expect(err).ToNot(HaveOccurred(), "live_reload_deps names %s", dep)
	}
	rootFilesCovered(g, provider.Config.LiveReloadDeps, "live_reload_deps")
	for _, dir := range managerSources(t) {
		if dir != "." {
			g.Expect(covered(dir, provider.Config.LiveReloadDeps)).To(BeTrue(), "live_reload_deps misses %s: Tilt would not rebuild when it changes", dir)
		}
	}
}
