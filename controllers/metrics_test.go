package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/internal/metrics"
	"github.com/capdmp/capdmp/pkg/skew"
)

// TestVersionGateMetrics: the gate's series follow the pool through a pause and its end: waiting
// with the gate's reason and the time waited, then admitting with one re-open counted and the
// waiting reason's series gone; a deleted pool leaves no series.
func TestVersionGateMetrics(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	rt := fakeruntime.NewWithNodeImages()
	for _, v := range []string{"v1.30.0", "v1.31.0"} {
		rt.AddNodeImage(image(g, v))
	}
	r, _ := newTestReconciler(g, world{controlPlaneVersions: []string{"v1.30.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}.objects(), rt)
	now := time.Now()
	r.now = func() time.Time { return now }
	metrics.ForgetPool(testNamespace, testPool)
	t.Cleanup(func() { metrics.ForgetPool(testNamespace, testPool) })
	waiting := func(reason skew.Reason) float64 {
		return testutil.ToFloat64(metrics.VersionGateWaiting.WithLabelValues(testNamespace, testPool, string(reason)))
	}
	series := func() int { return testutil.CollectAndCount(metrics.VersionGateWaiting) }
	before := series()

	reconcilePool(g, r)
	g.Expect(waiting(skew.ControlPlaneOlder)).To(Equal(1.0))
	g.Expect(series()).To(Equal(before+1), "one series per pool")

	now = now.Add(90 * time.Second)
	reconcilePool(g, r)
	g.Expect(testutil.ToFloat64(metrics.VersionGateWaitingSeconds.WithLabelValues(testNamespace, testPool))).To(BeNumerically("~", 90, 1), "metav1.Time keeps whole seconds")
	g.Expect(testutil.ToFloat64(metrics.VersionGateReopens.WithLabelValues(testNamespace, testPool))).To(Equal(0.0))

	setControlPlaneVersions(g, r.Client, "v1.31.0")
	reconcilePool(g, r)
	g.Expect(waiting(skew.Admitted)).To(Equal(0.0))
	g.Expect(series()).To(Equal(before+1), "the waiting reason's series was replaced")
	g.Expect(testutil.ToFloat64(metrics.VersionGateWaitingSeconds.WithLabelValues(testNamespace, testPool))).To(Equal(0.0))
	g.Expect(testutil.ToFloat64(metrics.VersionGateReopens.WithLabelValues(testNamespace, testPool))).To(Equal(1.0))

	pool := &infrav1.DockerMachinePool{}
	g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: testPool}, pool)).To(Succeed())
	g.Expect(r.Client.Delete(ctx, pool)).To(Succeed())
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pool)})
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(r.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)).ToNot(Succeed(), "the pool is gone")
	g.Expect(series()).To(Equal(before), "a deleted pool leaves no series")
}
