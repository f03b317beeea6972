package manifests

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/capdmp/capdmp/internal/test/testenv"
)

// repoRoot is the root of the repository, so that the tests run from any working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	return testenv.RepoRoot()
}

// decodeObjects decodes a multi-document YAML stream into objects, skipping empty documents.
func decodeObjects(g Gomega, data []byte) []unstructured.Unstructured {
	decoder := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []unstructured.Unstructured
	for {
		var obj map[string]interface{}
		err := decoder.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return objs
		}
		g.ExpectWithOffset(1, err).ToNot(HaveOccurred())
		if len(obj) == 0 {
			continue
		}
		objs = append(objs, unstructured.Unstructured{Object: obj})
	}
}

// kustomizeBuild runs kustomize from the tools module, as make manifests does.
func kustomizeBuild(t *testing.T, dir string) []byte {
	t.Helper()
	root := repoRoot(t)
	// go test caches results by the files a test opens; kustomize runs in another process, so
	// read its inputs here too, or a changed manifest would not rerun the test.
	err := filepath.WalkDir(filepath.Join(root, "config"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		_, err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatalf("reading config/: %v", err)
	}
	cmd := exec.Command("go", "tool", "-modfile=hack/tools/go.mod", "kustomize", "build", dir)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kustomize build %s failed (generated files such as config/rbac/role.yaml and config/webhook/manifests.yaml come from make generate): %v\n%s", dir, err, stderr.String())
	}
	return stdout.Bytes()
}

// byKind returns the objects of one kind.
func byKind(objs []unstructured.Unstructured, kind string) []unstructured.Unstructured {
	var out []unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}
