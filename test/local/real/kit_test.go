//go:build e2e_local

package real

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/test/realworld"
)

// TestConformanceKit runs pkg/conformance's upgrade of both at once, pool first, against two
// providers in one run on the same management plane: CAPDMP's DockerMachinePool, which must show
// no violation, and upstream CAPD's DockerMachinePool (sigs.k8s.io/cluster-api/test v1.14.2),
// which has no gate: the kit must report its violations, with times and versions.
func TestConformanceKit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		upstream bool
	}{
		{name: "kit-capdmp"},
		{name: "kit-capd", upstream: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := startScenario(t, tt.name)
			c := s.createCluster(realworld.ClusterSpec{ControlPlaneVersion: v136, ControlPlaneReplicas: 1, PoolVersion: v136, PoolReplicas: 2, UpstreamPool: tt.upstream})
			if tt.upstream {
				s.c = c
				t.Cleanup(func() {
					s.logf("deleting the cluster")
					if err := c.Delete(context.Background(), 5*time.Minute); err != nil {
						t.Errorf("deleting cluster %s: %v", c.Name, err)
					}
				})
			} else {
				// CAPDMP's pool is also watched by the suite's monitor, at every kube-apiserver.
				s.watch(c)
			}
			pool, err := c.KitPool()
			s.g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(func() { _ = pool.Close() })
			s.waitControlPlane(v136, 1, clusterReady)
			s.waitMachinePool(pool, v136, 2, clusterReady)

			// A pool with no gate never completes: its new nodes' kubeadm refuses to join an
			// older control plane. Its run ends at the timeout, with what it saw.
			timeout := upgradeDone + remediation
			if tt.upstream {
				timeout = 6 * time.Minute
			}
			report, err := conformance.UpgradeBothAtOnce(s.ctx, conformance.Input{
				Client: world.Client, MachinePool: client.ObjectKey{Namespace: c.Namespace, Name: c.Pool}, Pool: pool,
				To: v137, PoolFirst: true, Interval: 100 * time.Millisecond, Timeout: timeout,
			})
			s.logf("kit: %d samples, %d judged, %d violations in %s; ended: %v", report.Samples, report.Judged, len(report.Violations), report.Duration.Round(time.Second), err)
			for i, v := range report.Violations {
				if i == 3 {
					s.logf("kit: ... %d more, the last %s", len(report.Violations)-3, report.Violations[len(report.Violations)-1])
					break
				}
				s.logf("kit: %s", v)
			}
			if !tt.upstream {
				s.g.Expect(err).NotTo(HaveOccurred())
				s.g.Expect(report.Violations).To(BeEmpty())
				return
			}
			s.g.Expect(report.Judged).To(BeNumerically(">", 0))
			s.g.Expect(report.Violations).NotTo(BeEmpty(), "the kit must see upstream CAPD's pool break the policy")
			kitUpstream = fmt.Sprintf("%s: %d violations of %d judged samples, first at %.1fs: %s", tt.name, len(report.Violations), report.Judged, report.Violations[0].At.Seconds(), report.Violations[0].Detail)
		})
	}
}

// kitUpstream is what the kit saw of upstream CAPD's pool, for the suite's summary; its violations
// are the kit's finding, not the suite's.
var kitUpstream string

// waitMachinePool waits, through the contract and pool, until the MachinePool has replicas ready
// instances, all made for version.
func (s *scenario) waitMachinePool(pool *realworld.KitPool, version string, replicas int32, timeout time.Duration) {
	s.t.Helper()
	s.logf("waiting for the MachinePool at %s x%d", version, replicas)
	err := realworld.WaitFor(s.ctx, timeout, func(d string) { s.logf("%s", d) }, func(ctx context.Context) (bool, string, error) {
		mp := &clusterv1.MachinePool{}
		if err := world.Client.Get(ctx, client.ObjectKey{Namespace: s.c.Namespace, Name: s.c.Pool}, mp); err != nil {
			return false, "", err
		}
		versions, err := pool.InstanceVersions(ctx)
		if err != nil {
			return false, "", err
		}
		ready := ptr.Deref(mp.Status.ReadyReplicas, 0)
		done := ready == replicas && len(versions) == int(replicas)
		for _, v := range versions {
			done = done && v == version
		}
		return done, fmt.Sprintf("MachinePool ready=%d instances=%v", ready, versions), nil
	})
	s.g.Expect(err).NotTo(HaveOccurred(), "MachinePool at %s", version)
}
