package main

import (
	"context"
	"fmt"
	goruntime "runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/flags"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/cluster-api/util/test/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/internal/nodeimage"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/pkg/skew"
)

// BenchmarkManagerMemory1000 measures the memory of a manager holding a pool of 1000 instances
// (issue 19, item 3): the manager wired as main.go wires it (cache and client options, the
// ClusterCache, both reconcilers, no webhooks) against envtest's management and workload API
// servers, with the fake container runtime holding 1000 running, bootstrapped containers whose
// DockerMachinePoolMachines, Machines and Nodes exist. From the manager's start until both
// controllers stop reconciling, the Go runtime's memory is sampled every 10 ms; the figures are
// what the process holds beyond what it held before the manager started (the fake runtime's
// containers included there, as they are the engine's memory):
//   - peak-heap-MiB: the heap's objects (live and not yet swept) at their highest, which is what
//     the process's resident memory follows;
//   - peak-runtime-MiB: all memory the Go runtime had mapped and not released, at its highest;
//   - live-heap-MiB: the live heap after a GC once the manager is steady, and per instance.
//
// It needs envtest's binaries (KUBEBUILDER_ASSETS or hack/envtest-binaries.sh). make bench runs it.
func BenchmarkManagerMemory1000(b *testing.B) {
	const n = 1000
	var m managerMemory
	for b.Loop() {
		m = measureManagerMemory(b, n)
	}
	const mib = 1 << 20
	b.ReportMetric(float64(m.peakHeap)/mib, "peak-heap-MiB")
	b.ReportMetric(float64(m.peakRuntime)/mib, "peak-runtime-MiB")
	b.ReportMetric(float64(m.liveHeap)/mib, "live-heap-MiB")
	b.ReportMetric(float64(m.liveHeap)/n, "live-bytes-per-instance")
	b.ReportMetric(m.settle.Seconds(), "settle-s")
}

// managerMemory is what a manager added to the process, in bytes, and how long it took to settle.
type managerMemory struct {
	peakHeap, peakRuntime, liveHeap int64
	settle                          time.Duration
}

const (
	memNamespace = "memory"
	memCluster   = "memory"
	memVersion   = "v1.31.0"
)

func measureManagerMemory(b *testing.B, n int) managerMemory {
	b.Helper()
	g := NewWithT(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, stopEnv := startEnvtest(ctx, b, g)
	defer stopEnv()

	engine := fakeruntime.NewWithNodeImages()
	populatePool(ctx, g, env, engine, n)

	before := readMemory()
	sampler := startMemorySampler()
	// The ClusterCache lives as long as the context it is set up with: the manager's.
	mgrCtx, stopManager := context.WithCancel(ctx)
	mgr, err := newManager(mgrCtx, &options{
		managerOptions: flags.ManagerOptions{DiagnosticsAddress: "0"}, healthProbeBindAddr: "0", dockerNetwork: "kind",
		containerSyncPeriod: time.Hour, syncPeriod: 10 * time.Minute, watchNamespace: memNamespace,
		poolConcurrency: 10, machineConcurrency: 10, createConcurrency: 5,
		skipNameValidation: true,
	}, env.Management.Config, engine)
	g.Expect(err).ToNot(HaveOccurred(), "wiring the manager")
	var stopped sync.WaitGroup
	stopped.Go(func() { g.Expect(mgr.Start(mgrCtx)).To(Succeed()) })
	defer func() {
		stopManager()
		stopped.Wait()
	}()

	start := time.Now()
	waitUntilSettled(ctx, g, env.Management.Client, n)
	settle := time.Since(start)
	peak := sampler.stop()
	steady := readMemory()
	disconnectWorkload(ctx, g, env.Management.Client)
	return managerMemory{
		peakHeap:    peak.heap - before.heap,
		peakRuntime: peak.runtime - before.runtime,
		liveHeap:    steady.live - before.live,
		settle:      settle,
	}
}

// populatePool makes a Cluster with an initialized control plane of memVersion and a pool of n
// instances that a manager finds done: each container runs and is bootstrapped, its
// DockerMachinePoolMachine is provisioned, its Machine and its Node (with its provider ID) exist.
func populatePool(ctx context.Context, g Gomega, env *testenv.Environment, engine *fakeruntime.Runtime, n int) {
	mgmt := env.Management.Client
	crds, err := client.New(env.Management.Config, client.Options{Scheme: withAPIExtensions(g)})
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(crds.Create(ctx, builder.GenericControlPlaneCRD.DeepCopy())).To(Succeed())
	g.Expect(mgmt.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: memNamespace}})).To(Succeed())

	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: memNamespace, Name: memCluster},
		Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: builder.ControlPlaneGroupVersion.Group, Kind: builder.GenericControlPlaneKind, Name: "cp",
		}},
	}
	g.Expect(mgmt.Create(ctx, cluster)).To(Succeed())
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	g.Expect(mgmt.Status().Update(ctx, cluster)).To(Succeed())
	g.Expect(env.Workload.CreateClusterSecrets(ctx, mgmt, cluster)).To(Succeed())

	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(builder.ControlPlaneGroupVersion.WithKind(builder.GenericControlPlaneKind))
	cp.SetNamespace(memNamespace)
	cp.SetName("cp")
	cp.SetLabels(map[string]string{clusterv1.ClusterNameLabel: memCluster})
	g.Eventually(func() error { return mgmt.Create(ctx, cp) }, 10*time.Second, 100*time.Millisecond).Should(Succeed(), "the control plane's CRD is served")
	g.Expect(unstructured.SetNestedSlice(cp.Object, []any{map[string]any{"version": memVersion, "replicas": int64(1)}}, "status", "versions")).To(Succeed())
	g.Expect(unstructured.SetNestedField(cp.Object, true, "status", "initialization", "controlPlaneInitialized")).To(Succeed())
	g.Expect(mgmt.Status().Update(ctx, cp)).To(Succeed())

	config := &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{Namespace: memNamespace, Name: "mp-config"}}
	g.Expect(mgmt.Create(ctx, config)).To(Succeed())
	data := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: memNamespace, Name: "mp-data", Labels: map[string]string{clusterv1.ClusterNameLabel: memCluster}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte("#cloud-config\nruncmd:\n- kubeadm join\n"), "format": []byte("cloud-config")},
	}
	g.Expect(mgmt.Create(ctx, data)).To(Succeed())
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: memNamespace, Name: "mp", Labels: map[string]string{clusterv1.ClusterNameLabel: memCluster}},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: memCluster,
			Replicas:    ptr.To(int32(n)),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: memCluster,
				Version:     memVersion,
				Bootstrap: clusterv1.Bootstrap{
					ConfigRef:      clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: config.Name},
					DataSecretName: ptr.To(data.Name),
				},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "DockerMachinePool", Name: "pool"},
			}},
		},
	}
	g.Expect(mgmt.Create(ctx, mp)).To(Succeed())
	pool := &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{
		Namespace: memNamespace, Name: "pool",
		Labels:          map[string]string{clusterv1.ClusterNameLabel: memCluster},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachinePool", Name: mp.Name, UID: mp.UID}},
		Finalizers:      []string{infrav1.MachinePoolFinalizer},
	}}
	g.Expect(mgmt.Create(ctx, pool)).To(Succeed())

	image, err := nodeimage.ImageForVersion(memVersion, "")
	g.Expect(err).ToNot(HaveOccurred())
	engine.AddNodeImage(image)
	label, err := skew.VersionLabelValue(memVersion)
	g.Expect(err).ToNot(HaveOccurred())
	created := time.Now().Add(-time.Hour)
	for i := range n {
		name := fmt.Sprintf("%s-%05d", pool.Name, i)
		providerID := "docker:////" + name
		engine.Add(container.Container{
			Name: name, Image: image, Running: true, CreatedAt: created.Add(time.Duration(i) * time.Millisecond),
			Labels: map[string]string{
				infrav1.PoolUIDLabel: string(pool.UID), infrav1.PoolNameLabel: pool.Name, infrav1.ClusterNameLabel: memCluster,
				infrav1.KubernetesVersionLabel: label,
			},
		})
		machine := &infrav1.DockerMachinePoolMachine{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: memNamespace, Name: name,
				Labels: map[string]string{
					clusterv1.ClusterNameLabel: memCluster, clusterv1.MachinePoolNameLabel: format.MustFormatValue(mp.Name),
					infrav1.KubernetesVersionLabel: label,
				},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: "DockerMachinePool", Name: pool.Name, UID: pool.UID}},
				Finalizers:      []string{infrav1.MachinePoolMachineFinalizer},
			},
			Spec: infrav1.DockerMachinePoolMachineSpec{ProviderID: providerID},
		}
		g.Expect(mgmt.Create(ctx, machine)).To(Succeed())
		machine.Status.Initialization.Provisioned = ptr.To(true)
		g.Expect(mgmt.Status().Update(ctx, machine)).To(Succeed())

		owner := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: memNamespace, Name: name, Labels: map[string]string{
				clusterv1.ClusterNameLabel: memCluster, clusterv1.MachinePoolNameLabel: format.MustFormatValue(mp.Name),
			}},
			Spec: clusterv1.MachineSpec{
				ClusterName: memCluster,
				Version:     memVersion,
				Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "DockerMachinePoolMachine", Name: name,
				},
				ProviderID: providerID,
			},
		}
		g.Expect(mgmt.Create(ctx, owner)).To(Succeed())
		owner.Status.NodeRef = clusterv1.MachineNodeReference{Name: name}
		g.Expect(mgmt.Status().Update(ctx, owner)).To(Succeed())

		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
		g.Expect(env.Workload.Client.Create(ctx, node)).To(Succeed())
		node.Status.NodeInfo.KubeletVersion = memVersion
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		g.Expect(env.Workload.Client.Status().Update(ctx, node)).To(Succeed())
	}
}

func withAPIExtensions(g Gomega) *runtime.Scheme {
	s := newScheme()
	g.Expect(apiextensionsv1.AddToScheme(s)).To(Succeed())
	return s
}

// waitUntilSettled waits until the pool reports n ready instances and neither controller has
// reconciled anything for 3 s, then checks that every DockerMachinePoolMachine is Ready: quiet
// is not a reconcile that fails and backs off.
func waitUntilSettled(ctx context.Context, g Gomega, mgmt client.Client, n int) {
	g.Eventually(func(g Gomega) {
		pool := &infrav1.DockerMachinePool{}
		g.Expect(mgmt.Get(ctx, client.ObjectKey{Namespace: memNamespace, Name: "pool"}, pool)).To(Succeed())
		g.Expect(ptr.Deref(pool.Status.ReadyReplicas, 0)).To(BeEquivalentTo(n))
	}, 5*time.Minute, time.Second).Should(Succeed(), "the pool reports its %d instances ready", n)
	last, quiet := reconciles(g), time.Now()
	g.Eventually(func() time.Duration {
		if now := reconciles(g); now != last {
			last, quiet = now, time.Now()
		}
		return time.Since(quiet)
	}, 5*time.Minute, 200*time.Millisecond).Should(BeNumerically(">=", 3*time.Second), "the controllers stop reconciling")
	machines := &infrav1.DockerMachinePoolMachineList{}
	g.Expect(mgmt.List(ctx, machines, client.InNamespace(memNamespace))).To(Succeed())
	ready := 0
	for _, m := range machines.Items {
		if conditions.IsTrue(&m, infrav1.ReadyCondition) {
			ready++
		}
	}
	g.Expect(ready).To(Equal(n), "DockerMachinePoolMachines Ready")
}

// disconnectWorkload deletes the Cluster and waits for the ClusterCache to let go of its
// workload cluster: its connections outlive the manager (they run on a context of their own), and
// the workload API server would not stop while they watch.
func disconnectWorkload(ctx context.Context, g Gomega, mgmt client.Client) {
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: memNamespace, Name: memCluster}}
	g.Expect(mgmt.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		families, err := ctrlmetrics.Registry.Gather()
		g.Expect(err).ToNot(HaveOccurred())
		for _, f := range families {
			if f.GetName() == "capi_cluster_cache_connection_up" {
				g.Expect(f.GetMetric()).To(BeEmpty(), "the ClusterCache is connected")
			}
		}
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
}

// reconciles is how many reconciles controller-runtime counted for CAPDMP's controllers.
func reconciles(g Gomega) float64 {
	families, err := ctrlmetrics.Registry.Gather()
	g.Expect(err).ToNot(HaveOccurred())
	var total float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && (l.GetValue() == "dockermachinepool" || l.GetValue() == "dockermachinepoolmachine") {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// memory is the Go runtime's view of the process's memory, in bytes.
type memory struct {
	// heap is the heap's objects, live and not yet swept.
	heap int64
	// runtime is what the runtime has mapped and not released to the OS.
	runtime int64
	// live is the live heap as of the last GC.
	live int64
}

var memoryMetrics = []string{
	"/memory/classes/heap/objects:bytes", "/memory/classes/total:bytes", "/memory/classes/heap/released:bytes", "/gc/heap/live:bytes",
}

// readMemory collects garbage first, so that heap and live are what is held.
func readMemory() memory {
	goruntime.GC()
	return sampleMemory()
}

func sampleMemory() memory {
	samples := make([]metrics.Sample, len(memoryMetrics))
	for i, name := range memoryMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	value := func(i int) int64 { return int64(samples[i].Value.Uint64()) }
	return memory{heap: value(0), runtime: value(1) - value(2), live: value(3)}
}

// memorySampler records the highest heap and runtime memory until stopped.
type memorySampler struct {
	done chan struct{}
	peak chan memory
}

func startMemorySampler() *memorySampler {
	s := &memorySampler{done: make(chan struct{}), peak: make(chan memory)}
	go func() {
		var peak memory
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			m := sampleMemory()
			peak.heap, peak.runtime = max(peak.heap, m.heap), max(peak.runtime, m.runtime)
			select {
			case <-s.done:
				s.peak <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *memorySampler) stop() memory {
	close(s.done)
	return <-s.peak
}

// startEnvtest starts envtest's management and workload API servers; stop stops them.
func startEnvtest(ctx context.Context, b *testing.B, g Gomega) (env *testenv.Environment, stop func()) {
	b.Helper()
	env, err := testenv.Start(ctx, testenv.Options{Workload: true})
	g.Expect(err).ToNot(HaveOccurred(), "starting envtest's API servers")
	return env, func() {
		if err := env.Stop(); err != nil {
			b.Logf("stopping envtest's API servers: %v", err)
		}
	}
}
