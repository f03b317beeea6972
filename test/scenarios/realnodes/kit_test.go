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

// TestConformanceKit runs the table's s1-machinepool-first as another provider would, through
// the kit's view alone (the contract and the worker containers' images: framework.KitCluster),
// against two providers in one run on the same management plane: CAPDMP's DockerMachinePool,
// which must show no violation, and upstream CAPD's (sigs.k8s.io/cluster-api/test v1.14.2), which
// has no gate: the kit must report its violations, with times and versions.
func TestConformanceKit(t *testing.T) {
	t.Parallel()
	sc, ok := conformance.Lookup("s1-machinepool-first")
	if !ok {
		t.Fatal("the table has no s1-machinepool-first")
	}
	for _, tt := range []struct {
		name     string
		upstream bool
	}{
		{name: "kit-capdmp"},
		{name: "kit-capd", upstream: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := startScenario(t, tt.name)
			from, err := sc.From(chain)
			s.g.Expect(err).NotTo(HaveOccurred())
			c := s.createCluster(framework.ClusterSpec{ControlPlaneVersion: from, ControlPlaneReplicas: 1, PoolVersion: from, PoolReplicas: 2, UpstreamPool: tt.upstream})
			report, err := s.run(sc, c.KitCluster())
			m := report.Monitor
			s.logf("kit: %s; %d violations in %s; ended: %v", m.Coverage, len(m.Violations), report.Duration.Round(time.Second), err)
			for i, v := range m.Violations {
				if i == 3 {
					s.logf("kit: ... %d more, the last %s", len(m.Violations)-3, m.Violations[len(m.Violations)-1])
					break
				}
				s.logf("kit: %s", v)
			}
			if !tt.upstream {
				s.check(report, err)
				return
			}
			// A pool with no gate never completes: its new nodes' kubeadm refuses to join an older
			// control plane, and the run ends at the pool's budget with what it saw.
			s.g.Expect(m.Coverage.Judged).To(BeNumerically(">", 0))
			s.g.Expect(m.Violations).NotTo(BeEmpty(), "the kit must see upstream CAPD's pool break the policy")
			first, last := m.Violations[0], m.Violations[len(m.Violations)-1]
			kitUpstream = fmt.Sprintf("%s: %d violations of %d judged samples, first at %.1fs, last at %.1fs: %s",
				tt.name, len(m.Violations), m.Coverage.Judged, first.At.Seconds(), last.At.Seconds(), first.Detail)
		})
	}
}

// kitUpstream is what the kit saw of upstream CAPD's pool, for the suite's summary; its violations
// are the kit's finding, not the suite's.
var kitUpstream string
