//go:build kind

package kind

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/kubeversions"
)

// providerTimeout bounds a clusterctl delete or init of CAPDMP alone and its Deployment becoming
// Available; each took under a minute on 2 cores.
const providerTimeout = 5 * time.Minute

// release is what the test reads of the release folder of make release.
type release struct {
	dir     string
	version string // clusterctl-settings.json's nextVersion
	image   string // the manager image of infrastructure-components.yaml
}

func readRelease(t *testing.T) release {
	t.Helper()
	g := NewWithT(t)
	dir, err := filepath.Abs(envOr("RELEASE_DIR", filepath.Join("..", "..", "out", "release")))
	g.Expect(err).NotTo(HaveOccurred())
	raw, err := os.ReadFile(filepath.Join(dir, "clusterctl-settings.json"))
	g.Expect(err).NotTo(HaveOccurred(), "no release in %s: make release (make test-kind and make test-release-kind make it first)", dir)
	var settings struct {
		Name   string `json:"name"`
		Config struct {
			ComponentsFile string `json:"componentsFile"`
			NextVersion    string `json:"nextVersion"`
		} `json:"config"`
	}
	g.Expect(json.Unmarshal(raw, &settings)).To(Succeed())
	g.Expect(settings.Name).To(Equal("infrastructure-capdmp"))

	components, err := os.ReadFile(filepath.Join(dir, settings.Config.ComponentsFile))
	g.Expect(err).NotTo(HaveOccurred())
	var images []string
	decoder := yamlutil.NewYAMLOrJSONDecoder(bytes.NewReader(components), 4096)
	for {
		var obj map[string]any
		err := decoder.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		if obj["kind"] != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &d)).To(Succeed())
		for _, c := range d.Spec.Template.Spec.Containers {
			images = append(images, c.Image)
		}
	}
	g.Expect(images).To(HaveLen(1), "the components' Deployments run %v", images)
	return release{dir: dir, version: settings.Config.NextVersion, image: images[0]}
}

// releaseConfig writes a clusterctl configuration that is the local repository's (CLUSTERCTL_CONFIG)
// but for CAPDMP, which it reads from the release folder. clusterctl reads a file:// provider as
// {base}/{provider label}/{version}/{components}, so the folder is linked there under its version.
func releaseConfig(t *testing.T, r release, devConfig string) string {
	t.Helper()
	g := NewWithT(t)
	base := t.TempDir()
	label := filepath.Join(base, "infrastructure-capdmp")
	g.Expect(os.MkdirAll(label, 0o755)).To(Succeed())
	g.Expect(os.Symlink(r.dir, filepath.Join(label, r.version))).To(Succeed())

	raw, err := os.ReadFile(devConfig)
	g.Expect(err).NotTo(HaveOccurred(), "the local repository's clusterctl.yaml (make clusterctl-repository)")
	var config map[string]any
	g.Expect(yaml.Unmarshal(raw, &config)).To(Succeed())
	providers, _ := config["providers"].([]any)
	replaced := 0
	for _, p := range providers {
		if p, ok := p.(map[string]any); ok && p["name"] == "capdmp" && p["type"] == "InfrastructureProvider" {
			p["url"] = "file://" + filepath.Join(label, r.version, "infrastructure-components.yaml")
			replaced++
		}
	}
	g.Expect(replaced).To(Equal(1), "%s has no capdmp InfrastructureProvider entry", devConfig)
	out, err := yaml.Marshal(config)
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(base, "clusterctl.yaml")
	g.Expect(os.WriteFile(path, out, 0o600)).To(Succeed())
	return path
}

// TestReleaseInstalls installs CAPDMP on the management cluster from the release folder of make
// release, as a user installs a release: clusterctl delete of the installed CAPDMP, clusterctl init
// --infrastructure capdmp:<version> with a configuration whose capdmp entry points at the folder.
// The provider must become Available running the release's image, whose manager reports the
// release's version, and clusterctl generate cluster without --flavor must give the machinepool
// flavor. At the end the local repository's CAPDMP is installed again.
func TestReleaseInstalls(t *testing.T) {
	g := NewWithT(t)
	m := connect(t)
	// Not canceled when the test ends: the cleanup puts the development provider back with it.
	ctx := context.WithoutCancel(t.Context())
	clusterctl := envOr("CLUSTERCTL", filepath.Join("..", "..", "bin", "clusterctl"))
	devConfig := envOr("CLUSTERCTL_CONFIG", filepath.Join("..", "..", "out", "clusterctl-repository", "clusterctl.yaml"))
	r := readRelease(t)
	t.Logf("release %s in %s, manager image %s", r.version, r.dir, r.image)
	g.Expect(r.image).To(HaveSuffix(":"+r.version), "the release's components do not run the image of its version")

	// Replacing the provider under a workload's pools would leave them unreconciled meanwhile.
	pools := &infrav1.DockerMachinePoolList{}
	g.Expect(m.client.List(ctx, pools)).To(Succeed())
	g.Expect(pools.Items).To(BeEmpty(), "the test replaces CAPDMP: run it on a management cluster without DockerMachinePools")

	config := releaseConfig(t, r, devConfig)
	run := func(timeout time.Duration, args ...string) string {
		t.Helper()
		start := time.Now()
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, clusterctl, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		g.Expect(err).NotTo(HaveOccurred(), "clusterctl %s:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
		t.Logf("%s: clusterctl %s", since(start), strings.Join(args, " "))
		return stdout.String()
	}
	deployment := &appsv1.Deployment{}
	deploymentKey := client.ObjectKey{Namespace: capdmpNamespace, Name: managerDeployment}
	providerKey := client.ObjectKey{Namespace: capdmpNamespace, Name: "infrastructure-capdmp"}
	newProvider := func() *unstructured.Unstructured {
		provider := &unstructured.Unstructured{}
		provider.SetGroupVersionKind(schema.GroupVersionKind{Group: "clusterctl.cluster.x-k8s.io", Version: "v1alpha3", Kind: "Provider"})
		return provider
	}
	deleteCAPDMP := func() {
		t.Helper()
		if apierrors.IsNotFound(m.client.Get(ctx, providerKey, newProvider())) {
			return
		}
		run(providerTimeout, "delete", "--infrastructure", "capdmp", "--config", config)
		g.Eventually(func() bool {
			return apierrors.IsNotFound(m.client.Get(ctx, deploymentKey, &appsv1.Deployment{}))
		}).WithTimeout(providerTimeout).WithPolling(2 * time.Second).Should(BeTrue())
	}
	// installedAs waits for the installed CAPDMP to be version, its Deployment Available with its
	// one Pod ready on image.
	installedAs := func(g Gomega, version, image string) *corev1.Pod {
		provider := newProvider()
		g.Expect(m.client.Get(ctx, providerKey, provider)).To(Succeed())
		installed, _, _ := unstructured.NestedString(provider.Object, "version")
		g.Expect(installed).To(Equal(version))
		pod := &corev1.Pod{}
		g.Eventually(func(g Gomega) {
			g.Expect(m.client.Get(ctx, deploymentKey, deployment)).To(Succeed())
			g.Expect(deployment.Spec.Template.Spec.Containers[0].Image).To(Equal(image))
			g.Expect(available(*deployment)).To(BeTrue(), "Deployment %s not Available: %+v", managerDeployment, deployment.Status.Conditions)
			pods := &corev1.PodList{}
			g.Expect(m.client.List(ctx, pods, client.InNamespace(capdmpNamespace), client.MatchingLabels(deployment.Spec.Selector.MatchLabels))).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(1))
			*pod = pods.Items[0]
			g.Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
			g.Expect(pod.Status.ContainerStatuses[0].Ready).To(BeTrue())
		}).WithTimeout(providerTimeout).WithPolling(2*time.Second).Should(Succeed(), func() string {
			return "the manager's image must be in the kind node: make release-kind-load"
		})
		return pod
	}

	devImage := managerImage
	restore := func() {
		// The local repository's CAPDMP, as make kind-management installed it, for the tests after.
		start := time.Now()
		deleteCAPDMP()
		run(providerTimeout, "init", "--infrastructure", "capdmp", "--config", devConfig, "--wait-providers", "--wait-provider-timeout", "300")
		installedAs(g, devVersion(t, devConfig), devImage)
		t.Logf("%s: CAPDMP of the local repository installed again (%s)", since(start), devImage)
	}

	start := time.Now()
	t.Cleanup(restore)
	deleteCAPDMP()
	run(providerTimeout, "init", "--infrastructure", "capdmp:"+r.version, "--config", config, "--wait-providers", "--wait-provider-timeout", "300")
	pod := installedAs(g, r.version, r.image)
	g.Expect(pod.Status.ContainerStatuses[0].Image).To(Equal(r.image))
	g.Expect(pod.Status.ContainerStatuses[0].RestartCount).To(BeZero())
	t.Logf("%s: CAPDMP %s installed from the release: Deployment Available, Pod %s on %s (%s)", since(start), r.version,
		pod.Name, pod.Status.ContainerStatuses[0].Image, pod.Status.ContainerStatuses[0].ImageID)

	// The image is the release's build: its manager logs the release's version (hack/version.sh,
	// GIT_VERSION=VERSION), not a development one.
	logs, err := m.clientset.CoreV1().Pods(capdmpNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(logs)).To(ContainSubstring("Version: "+r.version+" "), "the manager does not log version %s:\n%s", r.version, firstLines(logs, 5))

	// clusterctl generate cluster without --flavor: cluster-template.yaml, the machinepool flavor.
	generate := func(extra ...string) string {
		return run(time.Minute, append([]string{"generate", "cluster", "release-default", "--config", config,
			"--infrastructure", "capdmp:" + r.version, "--target-namespace", "default", "--kubernetes-version", kubeversions.Older,
			"--control-plane-machine-count", "1", "--worker-machine-count", "2"}, extra...)...)
	}
	byDefault := generate()
	g.Expect(byDefault).To(Equal(generate("--flavor", "machinepool")))
	g.Expect(byDefault).To(ContainSubstring("kind: MachinePool\n"))
	g.Expect(byDefault).To(ContainSubstring("kind: DockerMachinePool\n"))
}

// devVersion is the version of CAPDMP in the local repository of clusterctl.yaml at path.
func devVersion(t *testing.T, path string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(filepath.Dir(path), "infrastructure-capdmp"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("the local repository beside %s has not one CAPDMP version: %v %v", path, entries, err)
	}
	return entries[0].Name()
}

func firstLines(b []byte, n int) string {
	lines := strings.SplitN(string(b), "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
