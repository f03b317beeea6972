package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/capdmp/capdmp/controllers"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// BenchmarkPoolReconcileNoChange times a DockerMachinePool reconcile that changes nothing, on a
// pool of N done instances (populatePool) read through the manager's informer cache, with the
// manager's cache and client options, against envtest: the reconciler is called by the benchmark
// alone, with no controller running beside it, so that its time is its own. CAPDMP_NOCHANGE_SIZES
// lists the sizes (comma-separated, default 1000). It fails when such a reconcile writes. Run it
// with -cpuprofile to see where the time goes.
func BenchmarkPoolReconcileNoChange(b *testing.B) {
	ctrl.SetLogger(logr.Discard())
	for _, n := range sizesFromEnv(b, "CAPDMP_NOCHANGE_SIZES", "1000") {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			g := NewWithT(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			env, stopEnv := startEnvtest(ctx, b, g)
			defer stopEnv()
			engine := fakeruntime.NewWithNodeImages()
			populatePool(ctx, g, env, engine, n)

			tally := &apiTally{}
			cfg := rest.CopyConfig(env.Management.Config)
			cfg.Wrap(tally.wrap)
			mgr, err := ctrl.NewManager(cfg, ctrl.Options{
				Scheme: newScheme(), Cache: cacheOptions(memNamespace), Client: clientOptions(),
				Metrics: metricsserver.Options{BindAddress: "0"},
			})
			g.Expect(err).ToNot(HaveOccurred())
			mgrCtx, stopManager := context.WithCancel(ctx)
			defer startManagerUntil(mgrCtx, stopManager, mgr, nil)()
			g.Expect(mgr.GetCache().WaitForCacheSync(ctx)).To(BeTrue())

			r := &controllers.DockerMachinePoolReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Runtime: engine}
			req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: memNamespace, Name: "pool"}}
			// The pool's first reconciles record its UID and status; then one writes nothing.
			g.Eventually(func(g Gomega) {
				before := tally.snapshot()
				_, err := r.Reconcile(ctx, req)
				g.Expect(err).ToNot(HaveOccurred())
				g.Expect(tally.snapshot().minus(before).objectWrites()).To(BeZero())
			}, time.Minute, 200*time.Millisecond).Should(Succeed(), "the pool settles")

			before, cpu0 := tally.snapshot(), processCPU()
			reconciles := 0
			for b.Loop() {
				if _, err := r.Reconcile(ctx, req); err != nil {
					b.Fatal(err)
				}
				reconciles++
			}
			cpu := processCPU() - cpu0
			after := tally.snapshot().minus(before)
			g.Expect(after.objectWrites()+after.events()).To(BeZero(), "a no-change reconcile writes nothing: %v", after.writes)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(reconciles)/float64(n), "ns/instance")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(reconciles)/float64(n), "cpu-ns/instance")
			b.ReportMetric(float64(after.reads)/float64(reconciles), "api-requests/op")
		})
	}
}
