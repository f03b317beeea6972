package stubnodes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/pkg/skew"
)

// The annotations cluster-autoscaler's Cluster API provider reads on a node group's scalable
// resource (cloudprovider/clusterapi/clusterapi_utils.go): capacity that overrides the
// infrastructure object's, and the group's bounds.
const (
	autoscalerCPUKey     = "capacity.cluster-autoscaler.kubernetes.io/cpu"
	autoscalerMemoryKey  = "capacity.cluster-autoscaler.kubernetes.io/memory"
	autoscalerDiskKey    = "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk"
	autoscalerMaxPodsKey = "capacity.cluster-autoscaler.kubernetes.io/maxPods"
	// autoscalerDefaultMaxPods is what the provider takes for pods without the maxPods annotation,
	// whatever the infrastructure object reports.
	autoscalerDefaultMaxPods = 110
)

// autoscaler reads and drives a MachinePool as cluster-autoscaler's Cluster API provider does
// (kubernetes/autoscaler, cluster-autoscaler/cloudprovider/clusterapi), whose module cannot be
// built here: unstructured objects through a dynamic client at the versions discovery prefers;
// the node group's nodes from the MachinePool's spec.providerIDList; the template node of a group
// at zero from the object its spec.template.spec.infrastructureRef names (kind lower-cased plus
// "s", the group's preferred version), status.capacity and status.nodeInfo, with the capacity
// annotations on the MachinePool overriding them; replicas through the scale subresource; a
// deletion by annotating the node's Machine with cluster.x-k8s.io/delete-machine, then lowering
// the replicas by one.
type autoscaler struct {
	discovery discovery.DiscoveryInterface
	dynamic   dynamic.Interface
	scales    scale.ScalesGetter
	pool      client.ObjectKey // the MachinePool
}

func newAutoscaler(t *testing.T, cfg *rest.Config, pool client.ObjectKey) *autoscaler {
	t.Helper()
	g := NewWithT(t)
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	g.Expect(err).ToNot(HaveOccurred())
	dyn, err := dynamic.NewForConfig(cfg)
	g.Expect(err).ToNot(HaveOccurred())
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	scales, err := scale.NewForConfig(cfg, mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(disc))
	g.Expect(err).ToNot(HaveOccurred())
	return &autoscaler{discovery: disc, dynamic: dyn, scales: scales, pool: pool}
}

// resource is a resource of group at the version discovery prefers, as the provider resolves it.
func (a *autoscaler) resource(g Gomega, group, resource string) schema.GroupVersionResource {
	groups, err := a.discovery.ServerGroups()
	g.Expect(err).ToNot(HaveOccurred())
	for _, gr := range groups.Groups {
		if gr.Name == group {
			return schema.GroupVersionResource{Group: group, Version: gr.PreferredVersion.Version, Resource: resource}
		}
	}
	g.Expect(groups.Groups).To(ContainElement(HaveField("Name", group)), "API group %s is served", group)
	return schema.GroupVersionResource{}
}

func (a *autoscaler) machinePool(ctx context.Context, g Gomega) *unstructured.Unstructured {
	mp, err := a.dynamic.Resource(a.resource(g, clusterv1.GroupVersion.Group, "machinepools")).Namespace(a.pool.Namespace).Get(ctx, a.pool.Name, metav1.GetOptions{})
	g.Expect(err).ToNot(HaveOccurred())
	return mp
}

// infrastructure reads the object the MachinePool's spec.template.spec.infrastructureRef names
// (readInfrastructureReferenceResource).
func (a *autoscaler) infrastructure(ctx context.Context, g Gomega, mp *unstructured.Unstructured) *unstructured.Unstructured {
	ref, found, err := unstructured.NestedStringMap(mp.Object, "spec", "template", "spec", "infrastructureRef")
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(found).To(BeTrue(), "the MachinePool has an infrastructureRef")
	g.Expect(ref).To(HaveKey("apiGroup"))
	g.Expect(ref).To(HaveKey("kind"))
	g.Expect(ref).To(HaveKey("name"))
	gvr := a.resource(g, ref["apiGroup"], strings.ToLower(ref["kind"])+"s")
	obj, err := a.dynamic.Resource(gvr).Namespace(mp.GetNamespace()).Get(ctx, ref["name"], metav1.GetOptions{})
	g.Expect(err).ToNot(HaveOccurred())
	return obj
}

// templateNode is what the provider builds for a node group at zero (TemplateNodeInfo).
type templateNode struct {
	// reported is the infrastructure object's status.capacity, parsed as the provider does (a
	// value that does not parse is left out).
	reported corev1.ResourceList
	// capacity is the template's: reported, overridden by the MachinePool's capacity annotations,
	// pods from the maxPods annotation or 110.
	capacity corev1.ResourceList
	nodeInfo corev1.NodeSystemInfo
}

// canScaleFromZero is the provider's CanScaleFromZero: cpu and memory are known.
func (n templateNode) canScaleFromZero() bool {
	_, cpu := n.capacity[corev1.ResourceCPU]
	_, memory := n.capacity[corev1.ResourceMemory]
	return cpu && memory
}

func (n templateNode) String() string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(n.capacity)) {
		q := n.capacity[name]
		out = append(out, fmt.Sprintf("%s=%s", name, q.String()))
	}
	return fmt.Sprintf("capacity %s, %s/%s", strings.Join(out, " "), n.nodeInfo.OperatingSystem, n.nodeInfo.Architecture)
}

// templateNode reads the group's template node (InstanceCapacity, InstanceSystemInfo).
func (a *autoscaler) templateNode(ctx context.Context, g Gomega) templateNode {
	mp := a.machinePool(ctx, g)
	infra := a.infrastructure(ctx, g, mp)
	n := templateNode{reported: corev1.ResourceList{}, capacity: corev1.ResourceList{}}
	if reported, found, err := unstructured.NestedStringMap(infra.Object, "status", "capacity"); found && err == nil {
		for k, v := range reported {
			if q, err := resource.ParseQuantity(v); err == nil {
				n.reported[corev1.ResourceName(k)] = q
				n.capacity[corev1.ResourceName(k)] = q
			}
		}
	}
	if info, found, err := unstructured.NestedStringMap(infra.Object, "status", "nodeInfo"); found && err == nil {
		n.nodeInfo = corev1.NodeSystemInfo{Architecture: info["architecture"], OperatingSystem: info["operatingSystem"]}
	}
	annotations := mp.GetAnnotations()
	for key, name := range map[string]corev1.ResourceName{
		autoscalerCPUKey: corev1.ResourceCPU, autoscalerMemoryKey: corev1.ResourceMemory, autoscalerDiskKey: corev1.ResourceEphemeralStorage,
	} {
		if v, ok := annotations[key]; ok {
			q, err := resource.ParseQuantity(v)
			g.Expect(err).ToNot(HaveOccurred(), key)
			n.capacity[name] = q
		}
	}
	pods := *resource.NewQuantity(autoscalerDefaultMaxPods, resource.DecimalSI)
	if v, ok := annotations[autoscalerMaxPodsKey]; ok {
		var err error
		pods, err = resource.ParseQuantity(v)
		g.Expect(err).ToNot(HaveOccurred(), autoscalerMaxPodsKey)
	}
	n.capacity[corev1.ResourcePods] = pods
	return n
}

// providerIDs are the group's nodes (findMachinePoolProviderIDs).
func (a *autoscaler) providerIDs(ctx context.Context, g Gomega) []string {
	ids, _, err := unstructured.NestedStringSlice(a.machinePool(ctx, g).Object, "spec", "providerIDList")
	g.Expect(err).ToNot(HaveOccurred())
	return ids
}

var machinePoolsResource = schema.GroupResource{Group: clusterv1.GroupVersion.Group, Resource: "machinepools"}

// replicas reads the MachinePool's scale subresource.
func (a *autoscaler) replicas(ctx context.Context, g Gomega) int {
	s, err := a.scales.Scales(a.pool.Namespace).Get(ctx, machinePoolsResource, a.pool.Name, metav1.GetOptions{})
	g.Expect(err).ToNot(HaveOccurred())
	return int(s.Spec.Replicas)
}

// setSize writes the replicas with a merge patch of the scale subresource (SetSize).
func (a *autoscaler) setSize(ctx context.Context, g Gomega, n int) {
	gvr := a.resource(g, machinePoolsResource.Group, machinePoolsResource.Resource)
	_, err := a.scales.Scales(a.pool.Namespace).Patch(ctx, gvr, a.pool.Name, types.MergePatchType,
		fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n), metav1.PatchOptions{})
	g.Expect(err).ToNot(HaveOccurred())
}

// increaseSize adds delta replicas (IncreaseSize).
func (a *autoscaler) increaseSize(ctx context.Context, g Gomega, delta int) {
	a.setSize(ctx, g, a.replicas(ctx, g)+delta)
}

// machine finds the Machine of a node by its provider ID (findMachineByProviderID).
func (a *autoscaler) machine(ctx context.Context, g Gomega, providerID string) *unstructured.Unstructured {
	list, err := a.dynamic.Resource(a.resource(g, clusterv1.GroupVersion.Group, "machines")).Namespace(a.pool.Namespace).List(ctx, metav1.ListOptions{})
	g.Expect(err).ToNot(HaveOccurred())
	for i := range list.Items {
		if id, _, _ := unstructured.NestedString(list.Items[i].Object, "spec", "providerID"); id == providerID {
			return &list.Items[i]
		}
	}
	g.Expect(list.Items).To(ContainElement(HaveField("Object", HaveKeyWithValue("spec", HaveKeyWithValue("providerID", providerID)))),
		"a Machine has providerID %s", providerID)
	return nil
}

// markForDeletion annotates the Machine of a node (MarkMachineForDeletion).
func (a *autoscaler) markForDeletion(ctx context.Context, g Gomega, providerID string) {
	m := a.machine(ctx, g, providerID).DeepCopy()
	annotations := m.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[clusterv1.DeleteMachineAnnotation] = time.Now().String()
	m.SetAnnotations(annotations)
	_, err := a.dynamic.Resource(a.resource(g, clusterv1.GroupVersion.Group, "machines")).Namespace(m.GetNamespace()).Update(ctx, m, metav1.UpdateOptions{})
	g.Expect(err).ToNot(HaveOccurred())
}

// deleteNodes removes nodes as the provider's DeleteNodes does: for each, it annotates the node's
// Machine, then lowers the replicas by one.
func (a *autoscaler) deleteNodes(ctx context.Context, g Gomega, providerIDs ...string) {
	replicas := a.replicas(ctx, g)
	for _, id := range providerIDs {
		a.markForDeletion(ctx, g, id)
		a.setSize(ctx, g, replicas-1)
		replicas--
	}
}

// TestAutoscalerContract reads a pool and drives it as cluster-autoscaler's Cluster API provider
// does (autoscaler, above; the autoscaler itself cannot run here): at zero replicas the group can
// scale from zero, with the capacity and system its Nodes then report; raised from zero it
// follows; a deletion removes exactly the node chosen, the oldest, which the default order would
// keep; with several marked, the marked go first; down to zero and up again while the version
// gate waits creates the last admitted version, and the upgrade completes. The MachinePool carries
// cluster.x-k8s.io/replicas-managed-by, as a MachinePool an external autoscaler scales may; a
// monitor samples the cluster throughout, and no kubelet ever breaks the skew policy.
func TestAutoscalerContract(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("%6.1fs "+format, append([]any{time.Since(start).Seconds()}, args...)...)
	}
	// The kubelets run with 50 pods at most; the autoscaler takes pods from the maxPods
	// annotation or 110, never from the infrastructure object, so the user says it there too.
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 0,
		kubeletExtraArgs: []bootstrapv1.Arg{{Name: "max-pods", Value: ptr.To("50")}}})
	mp := &clusterv1.MachinePool{}
	c.update(c.key(), mp, func() {
		if mp.Annotations == nil {
			mp.Annotations = map[string]string{}
		}
		maps.Copy(mp.Annotations, map[string]string{
			clusterv1.AutoscalerMinSizeAnnotation: "0", clusterv1.AutoscalerMaxSizeAnnotation: "5",
			autoscalerMaxPodsKey: "50", clusterv1.ReplicasManagedByAnnotation: "cluster-autoscaler",
		})
	})
	providerCtx, stopProvider := context.WithCancel(ctx)
	t.Cleanup(stopProvider)
	go c.controlPlaneProvider(providerCtx, 1)
	monitor := conformance.Watch(ctx, c.conformanceCluster(), conformance.Options{Interval: monitorInterval})
	as := newAutoscaler(t, testEnv.Management.APIServer.Config, c.key())

	// At zero: the group can scale from zero, and the pool reports pods as its kubelets run.
	var atZero templateNode
	g.Eventually(func(g Gomega) {
		atZero = as.templateNode(ctx, g)
		g.Expect(atZero.canScaleFromZero()).To(BeTrue(), "cpu and memory in status.capacity: %v", atZero.reported)
		g.Expect(atZero.reported).To(HaveKeyWithValue(corev1.ResourcePods, resource.MustParse("50")), "the bootstrap data's max-pods")
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(atZero.reported).ToNot(HaveKey(corev1.ResourceEphemeralStorage), "not reported: the engine does not say")
	g.Expect(atZero.nodeInfo.OperatingSystem).To(Equal("linux"))
	g.Expect(atZero.nodeInfo.Architecture).ToNot(BeEmpty())
	logf("template node at zero: %s", atZero)

	// Raised from zero: one first, three more once it is ready, so that the first is the oldest
	// by a second (the engine lists creation times in whole seconds).
	as.increaseSize(ctx, g, 1)
	c.waitForReady(1, v131, 2*time.Minute)
	time.Sleep(time.Second)
	as.increaseSize(ctx, g, 3)
	c.waitForReady(4, v131, 2*time.Minute)
	logf("raised from zero to 4")
	nodes := c.nodes()
	g.Eventually(func() []string { return as.providerIDs(ctx, g) }, 30*time.Second, 250*time.Millisecond).Should(HaveLen(4))
	for _, id := range as.providerIDs(ctx, g) {
		name := strings.TrimPrefix(id, "docker:////")
		node, ok := nodes[name]
		g.Expect(ok).To(BeTrue(), "providerIDList entry %s is a Node of the pool", id)
		g.Expect(node.Spec.ProviderID).To(Equal(id))
		// What the template promised is what the Node reports.
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
			want, got := atZero.capacity[r], node.Status.Capacity[r]
			g.Expect(got.Cmp(want)).To(BeZero(), "Node %s %s: %s, the template said %s", name, r, got.String(), want.String())
		}
		g.Expect(node.Status.NodeInfo.Architecture).To(Equal(atZero.nodeInfo.Architecture))
		g.Expect(node.Status.NodeInfo.OperatingSystem).To(Equal(atZero.nodeInfo.OperatingSystem))
	}

	// The oldest is deleted: the default order would remove the newest.
	byAge := c.containers()
	slices.SortStableFunc(byAge, func(a, b container.Container) int { return a.CreatedAt.Compare(b.CreatedAt) })
	g.Expect(byAge[0].CreatedAt.Before(byAge[1].CreatedAt)).To(BeTrue(), "the first container is the oldest")
	chosen := byAge[0].Name
	as.deleteNodes(ctx, g, "docker:////"+chosen)
	logf("deleted node %s (the oldest)", chosen)
	kept := []string{byAge[1].Name, byAge[2].Name, byAge[3].Name}
	g.Eventually(c.containerNames, time.Minute, 250*time.Millisecond).Should(ConsistOf(kept))
	g.Consistently(c.containerNames, 3*time.Second, 250*time.Millisecond).Should(ConsistOf(kept), "exactly the chosen instance went")
	c.waitForReady(3, v131, time.Minute)

	// Two marked, then the count lowered by one, and by one again: the marked go first.
	marked, unmarked := kept[:2], kept[2]
	for _, name := range marked {
		as.markForDeletion(ctx, g, "docker:////"+name)
	}
	as.setSize(ctx, g, 2)
	g.Eventually(c.containerNames, time.Minute, 250*time.Millisecond).Should(And(HaveLen(2), ContainElement(unmarked)))
	as.setSize(ctx, g, 1)
	g.Eventually(c.containerNames, time.Minute, 250*time.Millisecond).Should(ConsistOf(unmarked))
	c.waitForReady(1, v131, time.Minute)
	logf("marked %v: they went first, %s stays", marked, unmarked)

	// Down to zero; the group still scales from zero.
	as.deleteNodes(ctx, g, "docker:////"+unmarked)
	g.Eventually(func(g Gomega) {
		g.Expect(c.containers()).To(BeEmpty())
		g.Expect(c.nodes()).To(BeEmpty())
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	back := as.templateNode(ctx, g)
	g.Expect(back.canScaleFromZero()).To(BeTrue())
	g.Expect(back.String()).To(Equal(atZero.String()), "the same template at zero again")
	logf("down to zero")

	// The MachinePool moves to the next version before the control plane: the gate waits. Raised
	// from zero meanwhile, the pool creates the last admitted version.
	c.update(c.key(), mp, func() { mp.Spec.Template.Spec.Version = v132 })
	g.Eventually(func() string { return c.pool().Status.VersionGate.WaitingReason }, 30*time.Second, 250*time.Millisecond).
		Should(Equal(string(skew.ControlPlaneOlder)))
	as.increaseSize(ctx, g, 1)
	c.waitForReady(1, v131, 2*time.Minute)
	g.Expect(c.pool().Status.VersionGate.WaitingReason).To(Equal(string(skew.ControlPlaneOlder)), "the gate still waits")
	logf("raised from zero while the gate waits: %s, the last admitted version", v131)

	// The control plane upgrades; the pool follows it.
	kcp := &controlplanev1.KubeadmControlPlane{}
	c.update(client.ObjectKey{Namespace: c.namespace, Name: c.name + "-cp"}, kcp, func() { kcp.Spec.Version = v132 })
	c.waitForReady(1, v132, budgets.PoolUpgrade)
	logf("upgraded to %s", v132)

	report := monitor.Stop()
	skewViolationsMu.Lock()
	skewViolationsTotal += len(report.Violations)
	skewViolationsMu.Unlock()
	logf("monitor: %s", report.Coverage)
	for _, v := range report.Violations {
		t.Errorf("VIOLATION %s", v)
	}
	g.Expect(report.Coverage.Blind()).To(BeEmpty())
	g.Expect(c.pool().Status.Capacity).To(HaveKey(corev1.ResourceCPU))
	g.Expect(c.pool().Status.NodeInfo.OperatingSystem).To(Equal("linux"))
}

// containerNames names the pool's containers on the engine.
func (c *testCluster) containerNames() []string {
	c.t.Helper()
	var names []string
	for _, ct := range c.containers() {
		names = append(names, ct.Name)
	}
	return names
}
