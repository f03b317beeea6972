package stubnodes

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/test/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/skew"
)

// testCluster is one Cluster of a scenario: its control plane is driven at the contract level,
// its MachinePool is real Cluster API, its pool is CAPDMP's.
type testCluster struct {
	t         *testing.T
	namespace string
	name      string
	// engine runs its pool's containers: the suite's unless the cluster was made with another.
	engine *container.Docker
	// management is the management API server the cluster's objects are read from: the suite's
	// unless the cluster was moved to another.
	management client.Client
}

type clusterOptions struct {
	controlPlaneVersion string
	// controlPlaneReplicas is the control plane's machine count (1 when 0).
	controlPlaneReplicas int32
	poolVersion          string
	replicas             int32
	customImage          string
	// joinCommands are extra commands CABPK runs before kubeadm join (e.g. to fail a bootstrap).
	preKubeadmCommands []string
	// kubeletExtraArgs are the kubelet flags of the KubeadmConfig's JoinConfiguration.
	kubeletExtraArgs []bootstrapv1.Arg
	// bootstrapTimeout is the pool's; the API's default when zero.
	bootstrapTimeout time.Duration
	// engine runs the pool's containers (the manager must use it too); the suite's when nil.
	engine *container.Docker
	// management is the management API server's client the cluster is made with (a manager must
	// run there); the suite's when nil.
	management client.Client
}

// newTestCluster creates a namespace, a Cluster whose control plane (a KubeadmControlPlane whose
// status the test writes) is initialized at controlPlaneVersion, and a MachinePool with a
// KubeadmConfig and a DockerMachinePool.
func newTestCluster(t *testing.T, o clusterOptions) *testCluster {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	// The workload API server is shared by the scenarios: a name of its own per cluster keeps the
	// Nodes of one from being read as another's.
	namespace := names.SimpleNameGenerator.GenerateName("local-")
	c := &testCluster{t: t, namespace: namespace, name: namespace, engine: cmp.Or(o.engine, engine), management: cmp.Or(o.management, mgmt)}
	g.Expect(c.management.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace}})).To(Succeed())

	// An infrastructure cluster provisioned from the start: a Cluster without one never reports
	// InfrastructureReady=True, and a MachineHealthCheck judges no Machine of such a Cluster.
	infraCluster := &unstructured.Unstructured{}
	infraCluster.SetGroupVersionKind(builder.InfrastructureGroupVersion.WithKind(builder.GenericInfrastructureClusterKind))
	infraCluster.SetNamespace(c.namespace)
	infraCluster.SetName(c.name)
	g.Expect(c.management.Create(ctx, infraCluster)).To(Succeed())
	c.setInfrastructureProvisioned()

	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork:       clusterv1.ClusterNetwork{Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"10.244.0.0/16"}}},
			ControlPlaneEndpoint: testEnv.Workload.Endpoint,
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: builder.InfrastructureGroupVersion.Group, Kind: builder.GenericInfrastructureClusterKind, Name: c.name,
			},
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: c.name + "-cp",
			},
		},
	}
	g.Expect(c.management.Create(ctx, cluster)).To(Succeed())
	g.Expect(testEnv.Workload.CreateClusterSecrets(ctx, c.management, cluster)).To(Succeed())

	kcp := &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name + "-cp",
			Labels: map[string]string{clusterv1.ClusterNameLabel: c.name}},
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Version:  o.controlPlaneVersion,
			Replicas: ptr.To(max(o.controlPlaneReplicas, 1)),
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachineTemplate", Name: "unused"},
			}},
		},
	}
	g.Expect(c.management.Create(ctx, kcp)).To(Succeed())
	machines := make([]string, max(o.controlPlaneReplicas, 1))
	for i := range machines {
		machines[i] = o.controlPlaneVersion
	}
	c.setControlPlaneStatus(machines...)

	config := &bootstrapv1.KubeadmConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name + "-workers"},
		Spec: bootstrapv1.KubeadmConfigSpec{
			JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
				Name:                  "{{ ds.meta_data.local_hostname }}",
				IgnorePreflightErrors: []string{"SystemVerification"},
				KubeletExtraArgs:      o.kubeletExtraArgs,
			}},
			PreKubeadmCommands: o.preKubeadmCommands,
		},
	}
	g.Expect(c.management.Create(ctx, config)).To(Succeed())

	pool := &infrav1.DockerMachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name + "-workers"},
		Spec:       infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: o.customImage}},
	}
	if o.bootstrapTimeout > 0 {
		pool.Spec.Template.BootstrapTimeout = &metav1.Duration{Duration: o.bootstrapTimeout}
	}
	g.Expect(c.management.Create(ctx, pool)).To(Succeed())

	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name + "-workers"},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: c.name,
			Replicas:    ptr.To(o.replicas),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: c.name,
				Version:     o.poolVersion,
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: config.Name,
				}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "DockerMachinePool", Name: pool.Name,
				},
			}},
		},
	}
	g.Expect(c.management.Create(ctx, mp)).To(Succeed())

	t.Cleanup(c.cleanup)
	return c
}

// setControlPlaneStatus writes what a control plane provider reports of its machines, given the
// version of each: the versions they run (several while it upgrades machine by machine) and that
// it is initialized.
func (c *testCluster) setControlPlaneStatus(machines ...string) {
	c.t.Helper()
	NewWithT(c.t).Expect(writeControlPlaneStatus(context.Background(), c.management, client.ObjectKey{Namespace: c.namespace, Name: c.name + "-cp"}, machines)).To(Succeed())
}

// setInfrastructureProvisioned writes what an infrastructure provider reports of a cluster it
// provisioned.
func (c *testCluster) setInfrastructureProvisioned() {
	c.t.Helper()
	patch := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": builder.InfrastructureGroupVersion.String(), "kind": builder.GenericInfrastructureClusterKind,
		"metadata": map[string]any{"namespace": c.namespace, "name": c.name},
		"status":   map[string]any{"initialization": map[string]any{"provisioned": true}},
	}}
	NewWithT(c.t).Expect(c.management.Status().Patch(context.Background(), patch, client.Merge)).To(Succeed())
}

func writeControlPlaneStatus(ctx context.Context, management client.Client, key client.ObjectKey, machines []string) error {
	versions := slices.Clone(machines)
	slices.SortFunc(versions, func(a, b string) int {
		va, _ := skew.ParseVersion(a)
		vb, _ := skew.ParseVersion(b)
		return va.Compare(vb)
	})
	var entries []any
	for i := 0; i < len(versions); {
		j := i
		for j < len(versions) && versions[j] == versions[i] {
			j++
		}
		entries = append(entries, map[string]any{"version": versions[i], "replicas": int64(j - i)})
		i = j
	}
	patch := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": controlplanev1.GroupVersion.String(), "kind": "KubeadmControlPlane",
		"metadata": map[string]any{"namespace": key.Namespace, "name": key.Name},
		"status": map[string]any{
			"versions":       entries,
			"version":        versions[0],
			"initialization": map[string]any{"controlPlaneInitialized": true},
		},
	}}
	return management.Status().Patch(ctx, patch, client.Merge)
}

func (c *testCluster) setReplicas(n int32) {
	c.t.Helper()
	mp := &clusterv1.MachinePool{}
	c.update(c.key(), mp, func() { mp.Spec.Replicas = ptr.To(n) })
}

func (c *testCluster) update(key client.ObjectKey, obj client.Object, mutate func()) {
	c.t.Helper()
	NewWithT(c.t).Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.management.Get(context.Background(), key, obj); err != nil {
			return err
		}
		mutate()
		return c.management.Update(context.Background(), obj)
	})).To(Succeed())
}

// key is the name of the MachinePool, its KubeadmConfig and its DockerMachinePool.
func (c *testCluster) key() client.ObjectKey {
	return client.ObjectKey{Namespace: c.namespace, Name: c.name + "-workers"}
}

func (c *testCluster) pool() *infrav1.DockerMachinePool {
	c.t.Helper()
	pool := &infrav1.DockerMachinePool{}
	NewWithT(c.t).Expect(c.management.Get(context.Background(), c.key(), pool)).To(Succeed())
	return pool
}

func (c *testCluster) machinePool() *clusterv1.MachinePool {
	c.t.Helper()
	mp := &clusterv1.MachinePool{}
	NewWithT(c.t).Expect(c.management.Get(context.Background(), c.key(), mp)).To(Succeed())
	return mp
}

// containers lists the pool's containers on the engine.
func (c *testCluster) containers() []container.Container {
	c.t.Helper()
	pool := c.pool()
	// The UID the pool recorded: after clusterctl move the pool has another.
	uid := cmp.Or(pool.Annotations[infrav1.PoolUIDAnnotation], string(pool.UID))
	list, err := c.engine.List(context.Background(), map[string]string{infrav1.PoolUIDLabel: uid})
	NewWithT(c.t).Expect(err).ToNot(HaveOccurred())
	return list
}

// clusterContainers lists every container labelled with the cluster's name, whatever pool.
func (c *testCluster) clusterContainers() []container.Container {
	c.t.Helper()
	list, err := c.engine.List(context.Background(), map[string]string{infrav1.ClusterNameLabel: c.name})
	NewWithT(c.t).Expect(err).ToNot(HaveOccurred())
	return list
}

// nodes returns the workload Nodes of the pool's containers, by name.
func (c *testCluster) nodes() map[string]corev1.Node {
	c.t.Helper()
	list := &corev1.NodeList{}
	NewWithT(c.t).Expect(testEnv.Workload.Client.List(context.Background(), list)).To(Succeed())
	out := map[string]corev1.Node{}
	prefix := c.key().Name + "-"
	for _, n := range list.Items {
		if strings.HasPrefix(n.Name, prefix) && strings.HasSuffix(n.Spec.ProviderID, "/"+n.Name) {
			out[n.Name] = n
		}
	}
	return out
}

// waitForReady waits until the MachinePool has n ready replicas, all at version, each with a Node.
func (c *testCluster) waitForReady(n int, version string, timeout time.Duration) {
	c.t.Helper()
	NewWithT(c.t).Eventually(func(g Gomega) {
		cs := c.containers()
		g.Expect(cs).To(HaveLen(n))
		for _, ct := range cs {
			g.Expect(ct.Labels[infrav1.KubernetesVersionLabel]).To(Equal(version), ct.Name)
		}
		pool := c.pool()
		g.Expect(ptr.Deref(pool.Status.ReadyReplicas, 0)).To(BeEquivalentTo(n))
		mp := c.machinePool()
		g.Expect(ptr.Deref(mp.Status.ReadyReplicas, 0)).To(BeEquivalentTo(n), "MachinePool ready replicas; Machines: %s", c.machineConditions())
		g.Expect(mp.Status.NodeRefs).To(HaveLen(n))
	}, timeout, 250*time.Millisecond).Should(Succeed())
}

// machineConditions describes the Machines' Ready conditions, for failure messages.
func (c *testCluster) machineConditions() string {
	machines := &clusterv1.MachineList{}
	if err := c.management.List(context.Background(), machines, client.InNamespace(c.namespace)); err != nil {
		return err.Error()
	}
	var out []string
	for _, m := range machines.Items {
		for _, cond := range m.Status.Conditions {
			if cond.Type == clusterv1.MachineReadyCondition {
				out = append(out, fmt.Sprintf("%s: %s %s %q", m.Name, cond.Status, cond.Reason, cond.Message))
			}
		}
	}
	return strings.Join(out, "; ")
}

func (c *testCluster) cleanup() {
	ctx := context.Background()
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name}}
	_ = c.management.Delete(ctx, cluster)
	deadline := time.Now().Add(time.Minute)
	for {
		if err := c.management.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			c.t.Errorf("Cluster %s/%s still exists a minute after its deletion", c.namespace, c.name)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Whatever the controllers left behind is a failure of the test; remove it all the same.
	for _, ct := range c.clusterContainers() {
		if ct.Labels[infrav1.ClusterNameLabel] == c.name && strings.HasPrefix(ct.Name, c.key().Name+"-") {
			c.t.Errorf("container %s left behind after the Cluster was deleted", ct.Name)
			_ = c.engine.Delete(ctx, ct.Name)
		}
	}
}
