//go:build e2e_local

package realnodes

import (
	"os"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/test/framework"
)

// TestScenarios runs the scenarios of pkg/conformance's table on real nodes, each on a cluster of
// its own, in parallel (make's E2E_LOCAL_PARALLEL bounds how many at once); the table's order
// starts the longest first. CAPDMP_SCENARIOS names those to run, space-separated (make's
// SCENARIOS); empty runs them all, and a name the table does not have fails the test.
func TestScenarios(t *testing.T) {
	for _, sc := range selectedScenarios(t) {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			s := startScenario(t, sc.Name)
			from, err := sc.From(chain)
			s.g.Expect(err).NotTo(HaveOccurred())
			c := s.createCluster(framework.ClusterSpec{
				ControlPlaneVersion: from, ControlPlaneReplicas: int(sc.Shape.ControlPlaneReplicas),
				PoolVersion: from, PoolReplicas: int(sc.Shape.PoolReplicas),
			})
			if sc.Shape.CustomImage {
				s.g.Expect(c.SetImage(s.ctx, from)).To(Succeed())
			}
			s.check(s.run(sc, c))
		})
	}
}

// selectedScenarios are the scenarios CAPDMP_SCENARIOS names, in the table's order.
func selectedScenarios(t *testing.T) []conformance.Scenario {
	t.Helper()
	names := strings.Fields(os.Getenv("CAPDMP_SCENARIOS"))
	if len(names) == 0 {
		return conformance.Scenarios()
	}
	for _, name := range names {
		if _, ok := conformance.Lookup(name); !ok {
			t.Fatalf("CAPDMP_SCENARIOS names %q, which is not in pkg/conformance's table", name)
		}
	}
	var selected []conformance.Scenario
	for _, sc := range conformance.Scenarios() {
		if slices.Contains(names, sc.Name) {
			selected = append(selected, sc)
		}
	}
	return selected
}
