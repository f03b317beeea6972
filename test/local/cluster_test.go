package local

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/skew"
	"github.com/capdmp/capdmp/test/realworld"
)

// testCluster is one Cluster of a scenario: its control plane is driven at the contract level,
// its MachinePool is real Cluster API, its pool is CAPDMP's.
type testCluster struct {
	t         *testing.T
	namespace string
	name      string
}

type clusterOptions struct {
	controlPlaneVersion string
	poolVersion         string
	replicas            int32
	customImage         string
	// joinCommands are extra commands CABPK runs before kubeadm join (e.g. to fail a bootstrap).
	preKubeadmCommands []string
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
	c := &testCluster{t: t, namespace: namespace, name: namespace}
	g.Expect(mgmt.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace}})).To(Succeed())

	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork:       clusterv1.ClusterNetwork{Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"10.244.0.0/16"}}},
			ControlPlaneEndpoint: testEnv.Workload.Endpoint,
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: c.name + "-cp",
			},
		},
	}
	g.Expect(mgmt.Create(ctx, cluster)).To(Succeed())
	g.Expect(testEnv.Workload.CreateClusterSecrets(ctx, mgmt, cluster)).To(Succeed())

	kcp := &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name + "-cp",
			Labels: map[string]string{clusterv1.ClusterNameLabel: c.name}},
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Version:  o.controlPlaneVersion,
			Replicas: ptr.To(int32(1)),
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachineTemplate", Name: "unused"},
			}},
		},
	}
	g.Expect(mgmt.Create(ctx, kcp)).To(Succeed())
	c.setControlPlaneStatus(o.controlPlaneVersion)

	config := &bootstrapv1.KubeadmConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name + "-workers"},
		Spec: bootstrapv1.KubeadmConfigSpec{
			JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
				Name:                  "{{ ds.meta_data.local_hostname }}",
				IgnorePreflightErrors: []string{"SystemVerification"},
			}},
			PreKubeadmCommands: o.preKubeadmCommands,
		},
	}
	g.Expect(mgmt.Create(ctx, config)).To(Succeed())

	pool := &infrav1.DockerMachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name + "-workers"},
		Spec:       infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: o.customImage}},
	}
	g.Expect(mgmt.Create(ctx, pool)).To(Succeed())

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
	g.Expect(mgmt.Create(ctx, mp)).To(Succeed())

	t.Cleanup(c.cleanup)
	return c
}

// setControlPlaneStatus writes what a control plane provider reports: the versions its machines
// run now (several while it upgrades machine by machine) and that it is initialized.
func (c *testCluster) setControlPlaneStatus(versions ...string) {
	c.t.Helper()
	g := NewWithT(c.t)
	var entries []any
	for _, v := range versions {
		entries = append(entries, map[string]any{"version": v, "replicas": int64(1)})
	}
	slices.SortFunc(versions, func(a, b string) int {
		va, _ := skew.ParseVersion(a)
		vb, _ := skew.ParseVersion(b)
		return va.Compare(vb)
	})
	patch := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": controlplanev1.GroupVersion.String(), "kind": "KubeadmControlPlane",
		"metadata": map[string]any{"namespace": c.namespace, "name": c.name + "-cp"},
		"status": map[string]any{
			"versions":       entries,
			"version":        versions[0],
			"initialization": map[string]any{"controlPlaneInitialized": true},
		},
	}}
	g.Expect(mgmt.Status().Patch(context.Background(), patch, client.Merge)).To(Succeed())
}

// setControlPlaneSpecVersion is what a user applies to the control plane.
func (c *testCluster) setControlPlaneSpecVersion(version string) {
	c.t.Helper()
	kcp := &controlplanev1.KubeadmControlPlane{}
	c.update(client.ObjectKey{Namespace: c.namespace, Name: c.name + "-cp"}, kcp, func() { kcp.Spec.Version = version })
}

// setPoolVersion is what a user applies to the MachinePool.
func (c *testCluster) setPoolVersion(version string) {
	c.t.Helper()
	mp := &clusterv1.MachinePool{}
	c.update(c.key(), mp, func() { mp.Spec.Template.Spec.Version = version })
}

func (c *testCluster) setReplicas(n int32) {
	c.t.Helper()
	mp := &clusterv1.MachinePool{}
	c.update(c.key(), mp, func() { mp.Spec.Replicas = ptr.To(n) })
}

func (c *testCluster) setCustomImage(image string) {
	c.t.Helper()
	pool := &infrav1.DockerMachinePool{}
	c.update(c.key(), pool, func() { pool.Spec.Template.CustomImage = image })
}

func (c *testCluster) update(key client.ObjectKey, obj client.Object, mutate func()) {
	c.t.Helper()
	NewWithT(c.t).Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := mgmt.Get(context.Background(), key, obj); err != nil {
			return err
		}
		mutate()
		return mgmt.Update(context.Background(), obj)
	})).To(Succeed())
}

// key is the name of the MachinePool, its KubeadmConfig and its DockerMachinePool.
func (c *testCluster) key() client.ObjectKey {
	return client.ObjectKey{Namespace: c.namespace, Name: c.name + "-workers"}
}

func (c *testCluster) pool() *infrav1.DockerMachinePool {
	c.t.Helper()
	pool := &infrav1.DockerMachinePool{}
	NewWithT(c.t).Expect(mgmt.Get(context.Background(), c.key(), pool)).To(Succeed())
	return pool
}

func (c *testCluster) machinePool() *clusterv1.MachinePool {
	c.t.Helper()
	mp := &clusterv1.MachinePool{}
	NewWithT(c.t).Expect(mgmt.Get(context.Background(), c.key(), mp)).To(Succeed())
	return mp
}

// containers lists the pool's containers on the engine.
func (c *testCluster) containers() []container.Container {
	c.t.Helper()
	pool := c.pool()
	list, err := engine.List(context.Background(), map[string]string{infrav1.PoolUIDLabel: string(pool.UID)})
	NewWithT(c.t).Expect(err).ToNot(HaveOccurred())
	return list
}

// clusterContainers lists every container labelled with this namespace's cluster, whatever pool.
func clusterContainers(t *testing.T, clusterName string) []container.Container {
	t.Helper()
	list, err := engine.List(context.Background(), map[string]string{infrav1.ClusterNameLabel: clusterName})
	NewWithT(t).Expect(err).ToNot(HaveOccurred())
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
	if err := mgmt.List(context.Background(), machines, client.InNamespace(c.namespace)); err != nil {
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
	_ = mgmt.Delete(ctx, cluster)
	deadline := time.Now().Add(time.Minute)
	for {
		if err := mgmt.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			c.t.Errorf("Cluster %s/%s still exists a minute after its deletion", c.namespace, c.name)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Whatever the controllers left behind is a failure of the test; remove it all the same.
	for _, ct := range clusterContainers(c.t, c.name) {
		if ct.Labels[infrav1.ClusterNameLabel] == c.name && strings.HasPrefix(ct.Name, c.key().Name+"-") {
			c.t.Errorf("container %s left behind after the Cluster was deleted", ct.Name)
			_ = engine.Delete(ctx, ct.Name)
		}
	}
}

// monitor samples the pool's containers and Nodes and the control plane's reported versions, and
// records every moment at which a kubelet would break the version skew policy.
type monitor struct {
	c          *testCluster
	interval   time.Duration
	mu         sync.Mutex
	violations []string
	coverage   realworld.Coverage
	// seen are the names of every container the pool had while sampled: their Nodes are its own.
	seen map[string]bool
	stop chan struct{}
	done chan struct{}
}

func (c *testCluster) startMonitor(interval time.Duration) *monitor {
	m := &monitor{c: c, interval: interval, stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]bool{}}
	go m.run()
	return m
}

func (m *monitor) run() {
	defer close(m.done)
	ctx := context.Background()
	ticker := time.NewTicker(m.interval)
	defer ticker.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-ticker.C:
		}
		// The control plane first, the pool after: versions only go up during an upgrade, so a
		// pool read later can only look newer than it was when the control plane was read, and
		// the sample errs toward counting a violation, never toward missing one.
		kcp := &controlplanev1.KubeadmControlPlane{}
		if err := mgmt.Get(ctx, client.ObjectKey{Namespace: m.c.namespace, Name: m.c.name + "-cp"}, kcp); err != nil {
			continue
		}
		var cp []string
		for _, v := range kcp.Status.Versions {
			cp = append(cp, v.Version)
		}
		pool := &infrav1.DockerMachinePool{}
		if err := mgmt.Get(ctx, m.c.key(), pool); err != nil {
			continue
		}
		containers, err := engine.List(ctx, map[string]string{infrav1.PoolUIDLabel: string(pool.UID)})
		if err != nil {
			continue
		}
		nodes := &corev1.NodeList{}
		if err := testEnv.Workload.Client.List(ctx, nodes); err != nil {
			continue
		}
		sample := realworld.Sample{APIServers: cp}
		var problems []string
		for _, ct := range containers {
			m.seen[ct.Name] = true
			sample.PoolContainers = append(sample.PoolContainers, ct.Labels[infrav1.KubernetesVersionLabel])
		}
		for _, n := range nodes.Items {
			if m.seen[n.Name] {
				sample.PoolKubelets = append(sample.PoolKubelets, n.Status.NodeInfo.KubeletVersion)
			}
		}
		if violation := sample.Violation(); violation != "" {
			problems = append(problems, violation)
		}
		m.mu.Lock()
		m.coverage.Add(sample)
		for _, p := range problems {
			m.violations = append(m.violations, fmt.Sprintf("%s %s", time.Now().Format("15:04:05.000"), p))
		}
		m.mu.Unlock()
	}
}

// finish stops the monitor and returns what it saw; a monitor whose samples judged nothing fails
// the test.
func (m *monitor) finish(t *testing.T) (samples int, violations []string) {
	t.Helper()
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	t.Logf("monitor: %s", m.coverage)
	if blind := m.coverage.Blind(); blind != "" {
		t.Errorf("%s (%s)", blind, m.coverage)
	}
	return m.coverage.Samples, m.violations
}
