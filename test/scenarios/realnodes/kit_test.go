//go:build e2e_local

package realnodes

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/test/framework"
)

// TestConformanceKit runs the table's both-at-once/machinepool-first as another provider would, through
// the kit's view alone (the contract and the worker containers' images: framework.KitCluster),
// against two providers in one run on the same management plane: CAPDMP's DockerMachinePool,
// which must show no violation, and upstream CAPD's (sigs.k8s.io/cluster-api/test v1.14.2), which
// has no gate: the kit must report its violations, with times and versions.
func TestConformanceKit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		upstream bool
	}{
		{name: "kit-capdmp"},
		{name: "kit-capd", upstream: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if k := runKit(t, tt.name, tt.upstream, 2); tt.upstream {
				kitUpstream = k.String()
			}
		})
	}
}

// kitOutcome is what the kit's monitor saw of one provider's pool in both-at-once/machinepool-first.
type kitOutcome struct {
	Name       string  `json:"name"`
	Pool       int32   `json:"poolReplicas"`
	Samples    int     `json:"samples"`
	Judged     int     `json:"judged"`
	Violations int     `json:"violations"`
	FirstAt    float64 `json:"firstViolationSeconds,omitempty"`
	LastAt     float64 `json:"lastViolationSeconds,omitempty"`
	First      string  `json:"firstViolation,omitempty"`
	Seconds    float64 `json:"seconds"`
}

func (k kitOutcome) String() string {
	if k.Violations == 0 {
		return fmt.Sprintf("%s: 0 violations in %d judged samples", k.Name, k.Judged)
	}
	return fmt.Sprintf("%s: %d violations (one per kubelet and sample) in %d judged samples, for %.1fs from %.1fs to %.1fs: %s",
		k.Name, k.Violations, k.Judged, k.LastAt-k.FirstAt, k.FirstAt, k.LastAt, k.First)
}

// runKit runs both-at-once/machinepool-first on a cluster whose pool is CAPDMP's, or upstream CAPD's, with
// poolReplicas, through the kit's view. CAPDMP's must show no violation; CAPD's, which has no gate,
// must show some: a pool with no gate never completes (its new nodes' kubeadm refuses to join an
// older control plane), and the run ends at the pool's budget with what it saw.
func runKit(t *testing.T, name string, upstream bool, poolReplicas int32) kitOutcome {
	t.Helper()
	sc, ok := conformance.Lookup("both-at-once/machinepool-first")
	if !ok {
		t.Fatal("the table has no both-at-once/machinepool-first")
	}
	// The scenario's waits follow its shape.
	sc.Shape.PoolReplicas = poolReplicas
	s := startScenario(t, name)
	from, err := sc.From(chain)
	s.g.Expect(err).NotTo(HaveOccurred())
	c := s.createCluster(framework.ClusterSpec{ControlPlaneVersion: from, ControlPlaneReplicas: int(sc.Shape.ControlPlaneReplicas), PoolVersion: from, PoolReplicas: int(poolReplicas), UpstreamPool: upstream})
	report, err := s.run(sc, c.KitCluster())
	s.logf("kit: %s; %d violations in %s; ended: %v", report.Coverage, len(report.Violations), report.Duration.Round(time.Second), err)
	for i, v := range report.Violations {
		if i == 3 {
			s.logf("kit: ... %d more, the last %s", len(report.Violations)-3, report.Violations[len(report.Violations)-1])
			break
		}
		s.logf("kit: %s", v)
	}
	k := kitOutcome{Name: name, Pool: poolReplicas, Samples: report.Coverage.Samples, Judged: report.Coverage.Judged, Violations: len(report.Violations), Seconds: report.Duration.Seconds()}
	if len(report.Violations) > 0 {
		first, last := report.Violations[0], report.Violations[len(report.Violations)-1]
		k.FirstAt, k.LastAt, k.First = first.At.Seconds(), last.At.Seconds(), first.Detail
	}
	if !upstream {
		s.check(report, err)
		return k
	}
	s.res.samples, s.res.finding = report.Coverage.Samples, k.String()
	s.g.Expect(report.Coverage.Judged).To(BeNumerically(">", 0))
	s.g.Expect(report.Violations).NotTo(BeEmpty(), "the kit must see upstream CAPD's pool break the policy")
	return k
}

// kitUpstream is what the kit saw of upstream CAPD's pool, for the suite's summary; its violations
// are the kit's finding, not the suite's.
var kitUpstream string
