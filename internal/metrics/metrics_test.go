package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestDocumented: docs/controller.md lists every metric registered here.
func TestDocumented(t *testing.T) {
	g := NewWithT(t)
	doc, err := os.ReadFile("../../docs/controller.md")
	g.Expect(err).ToNot(HaveOccurred())
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	descs := make(chan *prometheus.Desc, 100)
	for _, c := range collectors() {
		c.Describe(descs)
	}
	close(descs)
	n := 0
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		g.Expect(m).To(HaveLen(2), d.String())
		g.Expect(string(doc)).To(ContainSubstring("`"+m[1]+"`"), "docs/controller.md lists %s", m[1])
		n++
	}
	g.Expect(n).To(Equal(9))
}

// TestLabelsAreNotTargetLabels: no metric has a label Prometheus sets on what it scrapes from the
// manager's Pod (job and instance always; namespace, pod, container, service and endpoint with
// the Kubernetes service discovery's usual relabelling, as the Prometheus Operator does): a
// scrape would rename the metric's own to exported_namespace and the like. A pool is named by
// dockermachinepool_namespace and dockermachinepool_name, as Cluster API names a Cluster by
// cluster_namespace and cluster_name.
func TestLabelsAreNotTargetLabels(t *testing.T) {
	targetLabels := []string{"namespace", "pod", "container", "service", "endpoint", "job", "instance"}
	variableLabels := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	descs := make(chan *prometheus.Desc, 100)
	for _, c := range collectors() {
		c.Describe(descs)
	}
	close(descs)
	for d := range descs {
		m := variableLabels.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the labels of %s", d)
		}
		t.Run(m[1], func(t *testing.T) {
			g := NewWithT(t)
			var labels []string
			if m[2] != "" {
				labels = strings.Split(m[2], ",")
			}
			for _, l := range labels {
				g.Expect(targetLabels).ToNot(ContainElement(l), "label %s is one Prometheus sets on scrape", l)
			}
			if slices.Contains(labels, poolNameLabel) || slices.Contains(labels, poolNamespaceLabel) {
				g.Expect(labels[:2]).To(Equal([]string{poolNamespaceLabel, poolNameLabel}), "a pool is named by both, first")
			}
		})
	}
}

// TestPoolSeriesAreNamedByPool: the series of a pool carry its namespace and name under the pool's
// labels, and ForgetPool removes them all.
func TestPoolSeriesAreNamedByPool(t *testing.T) {
	g := NewWithT(t)
	RecordVersionGate("ns-a", "pool-a", true, "ControlPlaneOlder", time.Now().Add(-time.Minute), time.Now())
	t.Cleanup(func() { ForgetPool("ns-a", "pool-a") })
	pool := prometheus.Labels{"dockermachinepool_namespace": "ns-a", "dockermachinepool_name": "pool-a"}
	waiting, err := VersionGateWaiting.GetMetricWith(prometheus.Labels{"dockermachinepool_namespace": "ns-a", "dockermachinepool_name": "pool-a", "reason": "ControlPlaneOlder"})
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(testutil.ToFloat64(waiting)).To(Equal(1.0))
	seconds, err := VersionGateWaitingSeconds.GetMetricWith(pool)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(testutil.ToFloat64(seconds)).To(BeNumerically("~", 60, 1))
	ForgetPool("ns-a", "pool-a")
	g.Expect(VersionGateWaitingSeconds.DeletePartialMatch(pool)).To(BeZero(), "forgotten")
}
