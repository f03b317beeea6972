package managementplane_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capdv1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/test/dockerengine"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/test/devtools/managementplane"
)

// TestPlane starts the plane as test/devtools/cmd/management-plane does, checks that every provider's webhooks
// answer for real (Cluster API's in this process, CAPDMP's in the manager process), then stops and
// starts it again: the state stays, unless Fresh.
func TestPlane(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ctrl.SetLogger(logr.Discard())
	dockerengine.Require(t)
	assets, err := testenv.BinaryAssetsDirectory(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	manager := filepath.Join(t.TempDir(), "manager")
	build := exec.CommandContext(ctx, "go", "build", "-o", manager, ".")
	build.Dir = testenv.RepoRoot()
	out, err := build.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "building the manager: %s", out)

	dataDir := t.TempDir()
	var progress, managerLog bytes.Buffer
	start := func(fresh bool) *managementplane.Plane {
		t.Helper()
		plane, err := managementplane.Start(ctx, managementplane.Options{
			DataDir: dataDir, Fresh: fresh, BinaryAssetsDirectory: assets,
			Manager:    managementplane.ManagerOptions{Binary: manager, IsolatedNetwork: true, Log: &managerLog},
			ClusterAPI: managementplane.ClusterAPIOptions{TokenTTL: 15 * time.Minute},
			Progress:   &progress,
		})
		g.Expect(err).NotTo(HaveOccurred(), "progress:\n%s\nmanager:\n%s", &progress, &managerLog)
		t.Cleanup(plane.Stop)
		return plane
	}

	plane := start(true)
	c := plane.APIServer.Client
	g.Expect(plane.Kubeconfig()).To(Equal(filepath.Join(dataDir, "kubeconfig")))
	g.Expect(progress.String()).To(ContainSubstring("new state in"))

	// CAPD's defaulting webhook, served in this process.
	dockerCluster := &capdv1.DockerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "c1"}} //nolint:staticcheck // the kind the templates use
	g.Expect(c.Create(ctx, dockerCluster)).To(Succeed())
	g.Expect(dockerCluster.Spec.ControlPlaneEndpoint.Port).To(BeEquivalentTo(6443), "CAPD's defaulting webhook")

	// Cluster API's validating webhook.
	err = c.Create(ctx, &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "c1"},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork:    clusterv1.ClusterNetwork{Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"10.244.0.0/16"}}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: capdv1.GroupVersion.Group, Kind: "DockerCluster", Name: "c1"},
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	err = c.Create(ctx, &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "bad"},
		Spec: clusterv1.MachinePoolSpec{ClusterName: "c1", Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
			ClusterName: "c1", Version: "not-a-version",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: new("data")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "DockerMachinePool", Name: "bad"},
		}}},
	})
	g.Expect(err).To(MatchError(ContainSubstring("validation.machinepool.cluster.x-k8s.io")), "Cluster API's MachinePool webhook")

	// CAPDMP's webhooks, served by the manager process.
	pool := &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "p1"}}
	g.Expect(c.Create(ctx, pool)).To(Succeed())
	g.Expect(pool.Spec.Template.BootstrapTimeout).To(HaveValue(Equal(metav1.Duration{Duration: infrav1.DefaultBootstrapTimeout})), "CAPDMP's defaulting webhook")
	bad := &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "p2"}}
	bad.Spec.Template.CustomImage = "kindest/node:latest"
	g.Expect(c.Create(ctx, bad)).To(MatchError(ContainSubstring("is not a Kubernetes version")), "CAPDMP's validating webhook")

	// Cluster API's conversion webhook: the Cluster read as v1beta1.
	old := &unstructured.Unstructured{}
	old.SetAPIVersion("cluster.x-k8s.io/v1beta1")
	old.SetKind("Cluster")
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "c1"}, old)).To(Succeed())
	kind, _, _ := unstructured.NestedString(old.Object, "spec", "infrastructureRef", "kind")
	g.Expect(kind).To(Equal("DockerCluster"), "v1beta1's infrastructureRef, converted")

	// A restart keeps the state; the kubeconfig is rewritten for the new API server.
	plane.Stop()
	g.Expect(plane.Manager.Pid()).To(BeZero())
	before, err := os.Stat(plane.Kubeconfig())
	g.Expect(err).NotTo(HaveOccurred())
	plane = start(false)
	g.Expect(progress.String()).To(ContainSubstring("state kept in"))
	after, err := os.Stat(plane.Kubeconfig())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.ModTime()).To(BeTemporally(">", before.ModTime()))
	g.Expect(plane.APIServer.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())

	// Fresh forgets it.
	plane.Stop()
	plane = start(true)
	err = plane.APIServer.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)
	g.Expect(client.IgnoreNotFound(err)).To(Succeed())
	g.Expect(err).To(HaveOccurred(), "a fresh start forgets the pool")
	g.Expect(plane.APIServer.Client.Get(ctx, client.ObjectKey{Name: metav1.NamespaceDefault}, &corev1.Namespace{})).To(Succeed())
}
