//go:build kind

package kind

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/kubeversions"
)

// workloadTimeout bounds the user flow below; it took 65-95 s on 2 cores.
const workloadTimeout = 15 * time.Minute

// TestMachinePoolFlavorWorkersJoin is what a user does next on the management cluster:
// `clusterctl generate cluster --flavor machinepool | kubectl apply -f -`, with one CAPD control
// plane node and a CAPDMP pool of two, until every Node of the workload cluster is Ready at the
// version asked for. It deletes the cluster at the end and waits for its machines to go.
// KIND_TEST_WORKLOAD=false skips it; KIND_TEST_KUBERNETES_VERSION picks the version (a node
// image of it must be in the Docker engine).
func TestMachinePoolFlavorWorkersJoin(t *testing.T) {
	if os.Getenv("KIND_TEST_WORKLOAD") == "false" {
		t.Skip("KIND_TEST_WORKLOAD=false")
	}
	g := NewWithT(t)
	m := connect(t)
	ctx := t.Context()
	clusterctl := envOr("CLUSTERCTL", filepath.Join("..", "..", "bin", "clusterctl"))
	config := envOr("CLUSTERCTL_CONFIG", filepath.Join("..", "..", "out", "clusterctl-repository", "clusterctl.yaml"))
	kubectl := envOr("KUBECTL", "kubectl")
	version := envOr("KIND_TEST_KUBERNETES_VERSION", kubeversions.Older)
	const workers = 2

	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	name := "kind-mp-" + hex.EncodeToString(suffix)
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	g.Expect(m.client.Create(ctx, namespace)).To(Succeed())
	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"})
	cluster.SetNamespace(name)
	cluster.SetName(name)
	t.Cleanup(func() { deleteWorkloadCluster(t, m, cluster, namespace) })

	start := time.Now()
	generate := exec.CommandContext(ctx, clusterctl, "generate", "cluster", name, "--config", config,
		"--infrastructure", "capdmp", "--flavor", "machinepool", "--target-namespace", name,
		"--kubernetes-version", version, "--control-plane-machine-count", "1", "--worker-machine-count", fmt.Sprint(workers))
	manifest, err := generate.Output()
	g.Expect(err).NotTo(HaveOccurred(), "clusterctl generate cluster: %s", stderrOf(err))
	apply := exec.CommandContext(ctx, kubectl, "apply", "-f", "-")
	apply.Stdin = bytes.NewReader(manifest)
	out, err := apply.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "kubectl apply: %s", out)
	t.Logf("%s: clusterctl generate cluster --flavor machinepool | kubectl apply -f - (%s)", since(start), strings.Join(strings.Fields(string(out)), " "))

	g.Eventually(func(g Gomega) {
		g.Expect(m.client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
		g.Expect(conditionTrue(cluster, "ControlPlaneInitialized")).To(BeTrue())
	}).WithTimeout(workloadTimeout).WithPolling(5 * time.Second).Should(Succeed())
	t.Logf("%s: control plane initialized", since(start))

	secret := &corev1.Secret{}
	g.Expect(m.client.Get(ctx, client.ObjectKey{Namespace: name, Name: name + "-kubeconfig"}, secret)).To(Succeed())
	workloadConfig, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["value"])
	g.Expect(err).NotTo(HaveOccurred())
	workload, err := kubernetes.NewForConfig(workloadConfig)
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(func(g Gomega) {
		nodes, err := workload.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(nodes.Items).To(HaveLen(1 + workers))
		for _, n := range nodes.Items {
			g.Expect(util.IsNodeReady(&n)).To(BeTrue(), "Node %s is not Ready", n.Name)
			g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal(version))
		}
	}).WithTimeout(workloadTimeout).WithPolling(5 * time.Second).Should(Succeed())
	t.Logf("%s: %d Nodes Ready at %s", since(start), 1+workers, version)

	pool := &infrav1.DockerMachinePool{}
	g.Eventually(func(g Gomega) {
		pools := &infrav1.DockerMachinePoolList{}
		g.Expect(m.client.List(ctx, pools, client.InNamespace(name))).To(Succeed())
		g.Expect(pools.Items).To(HaveLen(1))
		*pool = pools.Items[0]
		g.Expect(pool.Labels).To(HaveKeyWithValue(infrav1.KubernetesVersionLabel, version))
		machines := &infrav1.DockerMachinePoolMachineList{}
		g.Expect(m.client.List(ctx, machines, client.InNamespace(name))).To(Succeed())
		g.Expect(machines.Items).To(HaveLen(workers))
		g.Expect(m.client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
		g.Expect(conditionTrue(cluster, "Available")).To(BeTrue())
	}).WithTimeout(workloadTimeout).WithPolling(5*time.Second).Should(Succeed(), func() string {
		_ = m.client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)
		conditions, _, _ := unstructured.NestedSlice(cluster.Object, "status", "conditions")
		return fmt.Sprintf("Cluster conditions: %v", conditions)
	})
	t.Logf("%s: Cluster Available, DockerMachinePool %s labelled %s, %d DockerMachinePoolMachines", since(start), pool.Name, version, workers)
}

func deleteWorkloadCluster(t *testing.T, m management, cluster *unstructured.Unstructured, namespace *corev1.Namespace) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if err := m.client.Delete(ctx, cluster); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting Cluster %s: %v", cluster.GetName(), err)
	}
	for ctx.Err() == nil {
		err := m.client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster.DeepCopy())
		if apierrors.IsNotFound(err) {
			t.Logf("Cluster %s deleted in %s", cluster.GetName(), time.Since(start).Round(time.Second))
			break
		}
		time.Sleep(2 * time.Second)
	}
	if ctx.Err() != nil {
		t.Errorf("Cluster %s still there after 5 minutes; make kind-management-delete removes its containers", cluster.GetName())
	}
	if err := m.client.Delete(ctx, namespace); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting Namespace %s: %v", namespace.Name, err)
	}
}

func conditionTrue(u *unstructured.Unstructured, conditionType string) bool {
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		c, ok := c.(map[string]any)
		if ok && c["type"] == conditionType {
			return c["status"] == "True"
		}
	}
	return false
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Second) }

func stderrOf(err error) string {
	if exitErr, ok := err.(*exec.ExitError); ok { //nolint:errorlint // exec returns it unwrapped
		return string(exitErr.Stderr)
	}
	return ""
}
