package stubnodes

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capdmp/capdmp/pkg/skew"
)

// scrape reads a metrics endpoint.
func scrape(g Gomega, url string) map[string]*dto.MetricFamily {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
	g.Expect(err).ToNot(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).ToNot(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	g.Expect(err).ToNot(HaveOccurred())
	return families
}

// sample is the value of the series of family whose labels include labels: a gauge's or a
// counter's value, a histogram's count. Missing is an error.
func sample(families map[string]*dto.MetricFamily, family string, labels map[string]string) (float64, error) {
	f, ok := families[family]
	if !ok {
		return 0, fmt.Errorf("no metric %s", family)
	}
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		matches := true
		for k, v := range labels {
			matches = matches && have[k] == v
		}
		if !matches {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), nil
		case m.Counter != nil:
			return m.GetCounter().GetValue(), nil
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), nil
		}
	}
	return 0, fmt.Errorf("no series of %s with %v", family, labels)
}

// TestManagerMetrics scrapes the manager process's metrics endpoint, as Prometheus would, through
// a gated upgrade: the gate's series say it waits and why, for how long, that it asked for fresh
// bootstrap data, and then that it re-opened; bootstraps are timed and a failed one is counted by
// reason; Docker calls are counted and timed by operation.
func TestManagerMetrics(t *testing.T) {
	g := NewWithT(t)
	m := startManagerProcess(t, true)
	url := m.MetricsURL()
	g.Expect(url).ToNot(BeEmpty())
	read := func(g Gomega, family string, labels map[string]string) float64 {
		v, err := sample(scrape(g, url), family, labels)
		g.Expect(err).ToNot(HaveOccurred())
		return v
	}

	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 2})
	failing := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 1, preKubeadmCommands: []string{"exit 3"}})
	c.waitForReady(2, v131, 2*time.Minute)
	pool := map[string]string{"dockermachinepool_namespace": c.namespace, "dockermachinepool_name": c.key().Name}
	g.Expect(read(g, "capdmp_version_gate_waiting", withLabel(pool, "reason", string(skew.Admitted)))).To(Equal(0.0))
	g.Eventually(func(g Gomega) {
		g.Expect(read(g, "capdmp_bootstrap_failures_total", map[string]string{"reason": "StepFailed"})).To(BeNumerically(">=", 1))
	}, time.Minute, 250*time.Millisecond).Should(Succeed(), "the failing pool's bootstrap is counted")
	failing.cleanup()

	mp := &clusterv1.MachinePool{}
	c.update(c.key(), mp, func() { mp.Spec.Template.Spec.Version = v132 })
	g.Eventually(func(g Gomega) {
		g.Expect(read(g, "capdmp_version_gate_waiting", withLabel(pool, "reason", string(skew.ControlPlaneOlder)))).To(Equal(1.0))
		g.Expect(read(g, "capdmp_version_gate_waiting_seconds", pool)).To(BeNumerically(">", 0))
		g.Expect(read(g, "capdmp_bootstrap_data_refreshes_total", pool)).To(BeNumerically(">=", 1), "a rollout waiting on the gate asks for fresh data")
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(read(g, "capdmp_version_gate_reopens_total", pool)).To(Equal(0.0))

	c.setControlPlaneStatus(v132)
	c.waitForReady(2, v132, 2*time.Minute)
	families := scrape(g, url)
	for _, tt := range []struct {
		family string
		labels map[string]string
		want   OmegaMatcher
	}{
		{"capdmp_version_gate_waiting", withLabel(pool, "reason", string(skew.Admitted)), Equal(0.0)},
		{"capdmp_version_gate_waiting_seconds", pool, Equal(0.0)},
		// At least once: a reconcile that reads the pool before the last one's status write
		// reached the cache sees the re-open again (and emits its event again).
		{"capdmp_version_gate_reopens_total", pool, BeNumerically(">=", 1)},
		// Two bootstraps at v1.31, two at v1.32.
		{"capdmp_bootstrap_duration_seconds", nil, BeNumerically(">=", 4)},
		{"capdmp_docker_requests_total", map[string]string{"operation": "ContainerCreate"}, BeNumerically(">=", 5)},
		{"capdmp_docker_request_duration_seconds", map[string]string{"operation": "ContainerCreate"}, BeNumerically(">=", 5)},
		{"capdmp_docker_request_duration_seconds", map[string]string{"operation": "ContainerList"}, BeNumerically(">", 0)},
		{"capdmp_docker_requests_total", map[string]string{"operation": "ExecAttach"}, BeNumerically(">", 0)},
	} {
		v, err := sample(families, tt.family, tt.labels)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(v).To(tt.want, "%s %v", tt.family, tt.labels)
	}
	_, err := sample(families, "capdmp_version_gate_waiting", withLabel(pool, "reason", string(skew.ControlPlaneOlder)))
	g.Expect(err).To(HaveOccurred(), "the pool has one gate series, the current reason's")
	var names []string
	for name := range families {
		if strings.HasPrefix(name, "capdmp_") {
			names = append(names, name)
		}
	}
	t.Logf("CAPDMP's metrics on %s: %s", url, strings.Join(names, ", "))
}

func withLabel(labels map[string]string, name, value string) map[string]string {
	out := map[string]string{name: value}
	for k, v := range labels {
		out[k] = v
	}
	return out
}
