package stubnodes

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	clusterctlcluster "sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	clusterctlconfig "sigs.k8s.io/cluster-api/cmd/clusterctl/client/config"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/test/apiserver"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/pkg/skew"
)

// TestFaultClusterctlMove moves a cluster whose pool runs two stub nodes to a second management API
// server with Cluster API's own move code (clusterctl's ObjectMover), the Docker engine and the
// workload API server shared, a manager running on each side. The pool there adopts the same
// containers: none created or removed, no Machine replaced, the Nodes untouched, the pool back at
// its replicas; the source keeps nothing of the cluster.
func TestFaultClusterctlMove(t *testing.T) {
	// After the sequential tests, which replace the suite's manager this one needs as the
	// source's, beside the API server restart, which has a management API server of its own.
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 2})
	c.waitForReady(2, v131, 2*time.Minute)

	containersBefore := containerIDs(c)
	nodesBefore := c.nodeUIDs()
	machinesBefore := machineNames(ctx, g, mgmt, c.namespace)
	g.Expect(machinesBefore).To(HaveLen(2))

	start := time.Now()
	moved, target := moveCluster(t, c, v131)
	g.Eventually(func(g Gomega) {
		mp := moved.machinePool()
		g.Expect(ptr.Deref(mp.Status.ReadyReplicas, 0)).To(BeEquivalentTo(2), "MachinePool ready replicas; Machines: %s", moved.machineConditions())
		g.Expect(ptr.Deref(moved.pool().Status.ReadyReplicas, 0)).To(BeEquivalentTo(2))
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	t.Logf("pool ready on the target %s after the move began", time.Since(start).Round(time.Millisecond))
	g.Consistently(func(g Gomega) {
		g.Expect(containerIDs(moved)).To(Equal(containersBefore), "the same containers, none created or removed")
		g.Expect(moved.nodeUIDs()).To(Equal(nodesBefore), "the same Nodes")
		g.Expect(machineNames(ctx, g, target.Client, c.namespace)).To(Equal(machinesBefore), "the same Machines")
	}, 15*time.Second, time.Second).Should(Succeed())

	// Deleted on the target, the cluster takes its containers with it (the source's cleanup then
	// finds none left behind).
	g.Expect(target.Client.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name}})).To(Succeed())
	g.Eventually(moved.clusterContainers, 2*time.Minute, 250*time.Millisecond).Should(BeEmpty())
}

// TestFaultClusterctlMoveWhileGateWaits moves a pool whose gate waits (MachinePool at v1.32,
// control plane at v1.31): move does not copy status, so the pool on the target knows its last
// admitted image only from its containers. A container removed there is replaced at the admitted
// version, and nothing of the target version is created.
func TestFaultClusterctlMoveWhileGateWaits(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 2})
	c.waitForReady(2, v131, 2*time.Minute)
	mp := &clusterv1.MachinePool{}
	c.update(c.key(), mp, func() { mp.Spec.Template.Spec.Version = v132 })
	g.Eventually(func(g Gomega) {
		g.Expect(conditions.GetReason(c.pool(), infrav1.VersionSkewCondition)).To(Equal(string(skew.ControlPlaneOlder)))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())

	moved, target := moveCluster(t, c, v131)
	g.Eventually(func(g Gomega) {
		g.Expect(ptr.Deref(moved.pool().Status.ReadyReplicas, 0)).To(BeEquivalentTo(2), "Machines: %s", moved.machineConditions())
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())

	lost := moved.containers()[0].Name
	g.Expect(moved.engine.Delete(ctx, lost)).To(Succeed())
	t.Logf("removed container %s on the target", lost)
	g.Eventually(func(g Gomega) {
		containers := moved.containers()
		g.Expect(containers).To(HaveLen(2))
		for _, ct := range containers {
			g.Expect(ct.Name).NotTo(Equal(lost))
			g.Expect(ct.Labels).To(HaveKeyWithValue(infrav1.KubernetesVersionLabel, v131), "only the admitted version is created")
		}
		g.Expect(ptr.Deref(moved.pool().Status.ReadyReplicas, 0)).To(BeEquivalentTo(2), "Machines: %s", moved.machineConditions())
	}, 3*time.Minute, 250*time.Millisecond).Should(Succeed())
	gate := moved.pool().Status.VersionGate
	g.Expect(gate.AdmittedVersion).To(Equal(v131))
	g.Expect(gate.WaitingReason).To(Equal(string(skew.ControlPlaneOlder)))

	// The cluster lives on the target now: deleted there, it takes its containers with it.
	g.Expect(target.Client.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name}})).To(Succeed())
	g.Eventually(moved.clusterContainers, 2*time.Minute, 250*time.Millisecond).Should(BeEmpty())
}

// moveCluster moves c with Cluster API's own move code (clusterctl's ObjectMover) to a second
// management API server with a manager of its own, checks the source keeps nothing of it, and
// returns the cluster as the target serves it, its infrastructure and control plane (at
// controlPlaneVersion) reporting their status again: move does not copy status, and the test
// plays those providers.
func moveCluster(t *testing.T, c *testCluster, controlPlaneVersion string) (*testCluster, *testenv.Management) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	target, err := testenv.StartManagement(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = target.Stop() })
	g.Expect(installInfrastructureClusterCRD(target.APIServer)).To(Succeed())
	stopTarget, err := runManager(target.APIServer, currentManager)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(stopTarget)

	dir := t.TempDir()
	from := clusterctlClient(ctx, g, testEnv.Management.APIServer, filepath.Join(dir, "from"))
	to := clusterctlClient(ctx, g, target.APIServer, filepath.Join(dir, "to"))
	start := time.Now()
	g.Expect(from.ObjectMover().Move(ctx, c.namespace, to, false)).To(Succeed())
	t.Logf("clusterctl move: %s", time.Since(start).Round(time.Millisecond))

	g.Expect(machineNames(ctx, g, mgmt, c.namespace)).To(BeEmpty())
	g.Expect(mgmt.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: c.name}, &clusterv1.Cluster{})).NotTo(Succeed())

	moved := &testCluster{t: t, namespace: c.namespace, name: c.name, engine: c.engine, management: target.Client}
	moved.setInfrastructureProvisioned()
	moved.setControlPlaneStatus(controlPlaneVersion)
	return moved, target
}

// clusterctlClient is clusterctl's client of a management API server, its CRDs labelled and its
// providers recorded as `clusterctl init` leaves them: move discovers the types to move by the
// label and checks that the target has the source's providers.
func clusterctlClient(ctx context.Context, g Gomega, apiServer *apiserver.APIServer, kubeconfig string) clusterctlcluster.Client {
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	g.Expect(apiServer.Client.List(ctx, crds)).To(Succeed())
	for i := range crds.Items {
		crd := &crds.Items[i]
		if _, ok := crd.Labels[clusterctlv1.ClusterctlLabel]; ok {
			continue
		}
		patch := client.MergeFrom(crd.DeepCopy())
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		crd.Labels[clusterctlv1.ClusterctlLabel] = ""
		g.Expect(apiServer.Client.Patch(ctx, crd, patch)).To(Succeed())
	}

	g.Expect(apiserver.WriteKubeconfig(apiServer.Config, kubeconfig)).To(Succeed())
	config, err := clusterctlconfig.New(ctx, "")
	g.Expect(err).NotTo(HaveOccurred())
	cl := clusterctlcluster.New(clusterctlcluster.Kubeconfig{Path: kubeconfig}, config)
	g.Expect(cl.ProviderInventory().EnsureCustomResourceDefinitions(ctx)).To(Succeed())
	for _, p := range []struct {
		name         string
		providerType clusterctlv1.ProviderType
	}{
		{"cluster-api", clusterctlv1.CoreProviderType},
		{"kubeadm", clusterctlv1.BootstrapProviderType},
		{"kubeadm", clusterctlv1.ControlPlaneProviderType},
		{"capdmp", clusterctlv1.InfrastructureProviderType},
	} {
		provider := &clusterctlv1.Provider{
			ObjectMeta:   metav1.ObjectMeta{Namespace: "default", Name: clusterctlv1.ManifestLabel(p.name, p.providerType)},
			ProviderName: p.name, Type: string(p.providerType), Version: "v1.14.2",
		}
		g.Expect(cl.ProviderInventory().Create(ctx, *provider)).To(Succeed())
	}
	return cl
}

// containerIDs maps each container of the pool to its ID.
func containerIDs(c *testCluster) map[string]string {
	out := map[string]string{}
	for _, ct := range c.containers() {
		out[ct.Name] = ct.ID
	}
	return out
}

// nodeUIDs maps each Node of the pool to its UID.
func (c *testCluster) nodeUIDs() map[string]types.UID {
	out := map[string]types.UID{}
	for name, n := range c.nodes() {
		out[name] = n.UID
	}
	return out
}

func machineNames(ctx context.Context, g Gomega, cl client.Client, namespace string) []string {
	machines := &clusterv1.MachineList{}
	g.Expect(cl.List(ctx, machines, client.InNamespace(namespace))).To(Succeed())
	names := []string{}
	for _, m := range machines.Items {
		names = append(names, m.Name)
	}
	return names
}
