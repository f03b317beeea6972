package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// The benchmarks in this file measure the cost of a pool at scale on the fake client and the
// fake container runtime (issue 19, item 3). They print figures and never fail on time: they fail
// only when a no-change reconcile breaks its contract (it writes nothing and makes one Docker
// list). docs/benchmarks.md has the command and the figures.

const benchVersion = "v1.31.0"

// apiCounter counts the requests a reconcile makes to the management cluster: reads and writes,
// and of the writes those of a status subresource.
type apiCounter struct {
	reads, writes, statusWrites atomic.Int64
}

func (a *apiCounter) reset() {
	a.reads.Store(0)
	a.writes.Store(0)
	a.statusWrites.Store(0)
}

func (a *apiCounter) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			a.reads.Add(1)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			a.reads.Add(1)
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			a.writes.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			a.writes.Add(1)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			a.writes.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			a.writes.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			a.writes.Add(1)
			a.statusWrites.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			a.writes.Add(1)
			a.statusWrites.Add(1)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}
}

// steadyPool is a pool of n running, provisioned containers, each with its
// DockerMachinePoolMachine and a Machine whose Node joined: a reconcile finds nothing to do.
type steadyPool struct {
	r   *DockerMachinePoolReconciler
	rt  *fakeruntime.Runtime
	api *apiCounter
}

// newSteadyPool builds the pool and reconciles it until a reconcile writes nothing and makes no
// engine call but the list; it fails the benchmark if that does not happen within a few.
func newSteadyPool(b *testing.B, n int) *steadyPool {
	b.Helper()
	g := NewWithT(b)
	w := world{controlPlaneVersions: []string{benchVersion}, machinePoolVersion: benchVersion, replicas: int32(n), dataSecret: true}
	objs := w.objects()
	s := &poolScope{}
	for _, o := range objs {
		switch o := o.(type) {
		case *clusterv1.Cluster:
			s.cluster = o
		case *clusterv1.MachinePool:
			s.machinePool = o
		case *infrav1.DockerMachinePool:
			s.pool = o
		}
	}

	rt := fakeruntime.NewWithNodeImages(image(g, benchVersion))
	created := time.Now().Add(-time.Hour)
	for i := range n {
		name := fmt.Sprintf("%s-%05d", testPool, i)
		c := nodeContainer(g, name, benchVersion, created.Add(time.Duration(i)*time.Millisecond))
		rt.Add(c)
		m := newMachinePoolMachine(s, name, c.Labels)
		m.Status.Initialization.Provisioned = ptr.To(true)
		objs = append(objs, m, &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, Labels: map[string]string{
				clusterv1.ClusterNameLabel: testCluster, clusterv1.MachinePoolNameLabel: format.MustFormatValue(s.machinePool.Name),
			}},
			Spec: clusterv1.MachineSpec{
				ClusterName: testCluster,
				Version:     benchVersion,
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "DockerMachinePoolMachine", Name: name,
				},
				ProviderID: providerID(name),
			},
			Status: clusterv1.MachineStatus{NodeRef: clusterv1.MachineNodeReference{Name: name}},
		})
	}

	api := &apiCounter{}
	c := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(objs...).
		WithStatusSubresource(&infrav1.DockerMachinePool{}, &infrav1.DockerMachinePoolMachine{}).Build()
	counted := interceptor.NewClient(c, api.funcs())
	workload := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-abcdef"},
	}).Build()
	p := &steadyPool{
		r: &DockerMachinePoolReconciler{Client: counted, APIReader: counted, Runtime: rt, Network: "kind",
			ClusterCache: fakeClusterCache{workload: workload}},
		rt:  rt,
		api: api,
	}

	// The first reconcile records the pool's status (instances, conditions); the next must be
	// a no-change reconcile.
	for range 3 {
		p.reset()
		p.reconcile(b)
		if p.api.writes.Load() == 0 && p.rt.Calls().Total() == 1 {
			p.reset()
			return p
		}
	}
	b.Fatalf("the pool of %d instances is not steady after 3 reconciles: the last one made %d API writes and Docker calls %v",
		n, p.api.writes.Load(), p.rt.Calls())
	return nil
}

func (p *steadyPool) reset() {
	p.api.reset()
	p.rt.ResetCalls()
}

func (p *steadyPool) reconcile(b *testing.B) {
	b.Helper()
	// A discarding logger, as a manager at the default verbosity would print nothing of a
	// no-change reconcile; without one, controller-runtime's unset root logger records every call.
	ctx := ctrl.LoggerInto(context.Background(), logr.Discard())
	if _, err := p.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: testPool}}); err != nil {
		b.Fatalf("reconcile failed: %v", err)
	}
}

// BenchmarkNoChangeReconcile measures a reconcile of a pool that is already as desired, at
// several sizes: ns/instance compared between sizes shows how the cost grows.
func BenchmarkNoChangeReconcile(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 5000, 10000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			p := newSteadyPool(b, n)
			b.ReportAllocs()
			for b.Loop() {
				p.reconcile(b)
			}

			writes, calls := p.api.writes.Load(), p.rt.Calls()
			if writes != 0 {
				b.Fatalf("a no-change reconcile of %d instances wrote to the API server: %d writes in %d reconciles", n, writes, b.N)
			}
			if calls.Total() > int64(b.N) {
				b.Fatalf("a no-change reconcile of %d instances made more than one Docker call: %v in %d reconciles", n, calls, b.N)
			}
			perOp := func(v int64) float64 { return float64(v) / float64(b.N) }
			b.ReportMetric(perOp(p.api.reads.Load()), "api-reads/op")
			b.ReportMetric(perOp(writes), "api-writes/op")
			b.ReportMetric(perOp(calls.Total()), "docker-calls/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/instance")
		})
	}
}

// maxObjectBytes is the size a pool's objects must stay under (issue 37): etcd refuses a request
// over 1.5 MiB, and an object near it cannot grow by a single update.
const maxObjectBytes = 1 << 20

// BenchmarkPoolObjectSize measures the JSON size of a steady pool's DockerMachinePool, as read
// back from the API, and of its MachinePool once Cluster API copied spec.providerIDList there,
// at 1,000, 5,000 and 10,000 ready instances. It fails when either passes 1 MiB.
func BenchmarkPoolObjectSize(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			p := newSteadyPool(b, n)
			var poolBytes, machinePoolBytes int
			for b.Loop() {
				pool := &infrav1.DockerMachinePool{}
				if err := p.r.Client.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: testPool}, pool); err != nil {
					b.Fatalf("reading the pool back: %v", err)
				}
				if got := len(pool.Spec.ProviderIDList); got != n {
					b.Fatalf("the pool of %d ready instances lists %d provider IDs", n, got)
				}
				mp := &clusterv1.MachinePool{}
				if err := p.r.Client.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: "mp"}, mp); err != nil {
					b.Fatalf("reading the MachinePool back: %v", err)
				}
				// Cluster API's MachinePool controller copies the list (and counts it in status).
				mp.Spec.ProviderIDList = pool.Spec.ProviderIDList
				poolBytes, machinePoolBytes = jsonSize(b, pool), jsonSize(b, mp)
			}
			b.ReportMetric(float64(poolBytes), "pool-bytes")
			b.ReportMetric(float64(machinePoolBytes), "machinepool-bytes")
			b.ReportMetric(float64(poolBytes)/float64(n), "pool-bytes/instance")
			for what, size := range map[string]int{"DockerMachinePool": poolBytes, "MachinePool": machinePoolBytes} {
				if size > maxObjectBytes {
					b.Errorf("the %s of %d instances is %d bytes, over %d", what, n, size, maxObjectBytes)
				}
			}
		})
	}
}

func jsonSize(b *testing.B, obj any) int {
	b.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		b.Fatalf("encoding %T: %v", obj, err)
	}
	return len(data)
}

// BenchmarkPoolMemory1000 measures the live heap (HeapAlloc after a GC) that a steady pool of
// 1000 instances adds over an empty pool: the fake client's objects (1000 DockerMachinePoolMachines,
// 1000 Machines, the pool with 1000 provider IDs), the fake runtime's 1000 containers and
// the reconciler, after a no-change reconcile. It is not a real manager's memory: there the
// informer cache holds the objects (typed, without the fake client's tracker overhead), and the
// reconcile's scope, which lives only during a reconcile, shows up in
// BenchmarkNoChangeReconcile's B/op instead.
func BenchmarkPoolMemory1000(b *testing.B) {
	const n = 1000
	var perInstance, held float64
	for b.Loop() {
		empty := liveHeap()
		small := newSteadyPool(b, 0)
		withEmpty := liveHeap()
		large := newSteadyPool(b, n)
		withLarge := liveHeap()
		runtime.KeepAlive(small)
		runtime.KeepAlive(large)
		held = float64(withLarge - empty)
		perInstance = (float64(withLarge) - float64(withEmpty)) / n
	}
	b.ReportMetric(perInstance, "bytes-per-instance")
	b.ReportMetric(held/(1<<20), "MiB-held-1000")
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
