package manifests

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distribution/reference"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
)

// imageTags returns the tag of every image make images builds, by name, as
// hack/images/build.sh --list prints them (no Docker engine needed).
func imageTags(t *testing.T) map[string]string {
	t.Helper()
	root := repoRoot(t)
	script := filepath.Join(root, "hack", "images", "build.sh")
	// go test caches results by the files a test opens: the script decides the tags.
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, "--list")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CAPDMP_IMG=") // the script's own default, as make images without IMG
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/images/build.sh --list: %v\n%s", err, stderr.String())
	}
	tags := map[string]string{}
	scanner := bufio.NewScanner(bytes.NewReader(out))
	for scanner.Scan() {
		name, tag, ok := strings.Cut(scanner.Text(), "\t")
		if !ok || name == "" || tag == "" {
			t.Fatalf("hack/images/build.sh --list printed %q", scanner.Text())
		}
		tags[name] = tag
	}
	return tags
}

// deploymentImages returns the image of every container of every Deployment in objs.
func deploymentImages(g Gomega, objs []byte) []string {
	var images []string
	for _, obj := range byKind(decodeObjects(g, objs), "Deployment") {
		var deployment appsv1.Deployment
		fromUnstructured(g, obj, &deployment)
		for _, c := range deployment.Spec.Template.Spec.Containers {
			images = append(images, c.Image)
		}
	}
	return images
}

// canonicalImage is an image's name as clusterctl requires it (its registry and path in full:
// docker.io/library/capdmp-controller:dev), the same image for Docker and containerd.
func canonicalImage(g Gomega, image string) string {
	named, err := reference.ParseNormalizedNamed(image)
	g.ExpectWithOffset(1, err).ToNot(HaveOccurred(), image)
	return named.String()
}

// moduleDir is the folder in the module cache of a module of the harness module's graph (test/,
// whose tools, kind among them, the manager's module does not require).
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = filepath.Join(repoRoot(t), "test")
	out, err := cmd.Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		t.Fatalf("go list -m %s: %v (go mod download)", module, err)
	}
	return string(bytes.TrimSpace(out))
}

// TestImagesAreTheComponentsImages checks that make images tags each image with the name the
// components that run it reference: CAPDMP's (make manifests) and Cluster API's providers',
// rendered from their modules' config/default as a local clusterctl repository renders them.
func TestImagesAreTheComponentsImages(t *testing.T) {
	tags := imageTags(t)
	g := NewWithT(t)
	g.Expect(tags).To(HaveKey("capdmp"))
	g.Expect(tags).To(HaveKey("cert-manager-controller"))
	g.Expect(tags).To(HaveKey("cert-manager-webhook"))
	g.Expect(tags).To(HaveKey("cert-manager-cainjector"))

	t.Run("capdmp", func(t *testing.T) {
		g := NewWithT(t)
		images := deploymentImages(g, kustomizeBuild(t, "config/default"))
		// The components name the image in full, as clusterctl wants: Docker's short tag is the same.
		g.Expect(images).To(Equal([]string{canonicalImage(g, tags["capdmp"])}), "make images tags %s; out/infrastructure-components.yaml runs %v", tags["capdmp"], images)
	})

	providers := []struct {
		name, module, config string
	}{
		{"cluster-api", "sigs.k8s.io/cluster-api", "core/config/default"},
		{"kubeadm-bootstrap", "sigs.k8s.io/cluster-api", "bootstrap/kubeadm/config/default"},
		{"kubeadm-control-plane", "sigs.k8s.io/cluster-api", "controlplane/kubeadm/config/default"},
		{"capd", "sigs.k8s.io/cluster-api/test", "infrastructure/docker/config/default"},
	}
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			g := NewWithT(t)
			images := deploymentImages(g, kustomizeBuild(t, filepath.Join(moduleDir(t, p.module), p.config)))
			g.Expect(images).To(Equal([]string{tags[p.name]}), "make images tags %s; %s/%s runs %v", tags[p.name], p.module, p.config, images)
		})
	}
}
