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

// dockerfileInstructions returns the Dockerfile's instructions (comments and blank lines left out)
// as their keyword and arguments.
func dockerfileInstructions(g Gomega, path string) [][]string {
	raw, err := os.ReadFile(path)
	g.ExpectWithOffset(1, err).ToNot(HaveOccurred())
	var instructions [][]string
	for _, line := range strings.Split(string(raw), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		instructions = append(instructions, fields)
	}
	return instructions
}

// TestDockerfileTakesTheHostBuiltManager keeps the Dockerfile buildable where no image can be
// pulled: the manager is built on the host (hack/images/build.sh capdmp, make docker-build) and
// copied, as the only file of the build context, onto a base that defaults to scratch, with
// nothing to run in it.
func TestDockerfileTakesTheHostBuiltManager(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)

	var from, base string
	var copied [][]string
	for _, fields := range dockerfileInstructions(g, filepath.Join(root, "Dockerfile")) {
		switch strings.ToUpper(fields[0]) {
		case "ARG":
			if name, value, ok := strings.Cut(fields[1], "="); ok && name == "BASE_IMAGE" {
				base = value
			}
		case "FROM":
			g.Expect(from).To(BeEmpty(), "one stage: no builder image to pull")
			from = strings.Join(fields[1:], " ")
		case "COPY":
			copied = append(copied, fields[1:])
		case "RUN":
			g.Expect(fields).To(BeNil(), "a scratch base has nothing to run")
		case "ENTRYPOINT":
			g.Expect(strings.Join(fields[1:], " ")).To(Equal(`["/manager"]`), "config/manager runs /manager")
		}
	}
	g.Expect(from).To(Equal("${BASE_IMAGE}"))
	g.Expect(base).To(Equal("scratch"))
	g.Expect(copied).To(Equal([][]string{{"manager", "/manager"}}))

	dockerignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	g.Expect(err).ToNot(HaveOccurred())
	var patterns []string
	for _, line := range strings.Split(string(dockerignore), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	g.Expect(patterns).To(Equal([]string{"*", "!manager"}), ".dockerignore lets only the binary into a context")
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
