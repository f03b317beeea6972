//go:build e2e_local

package real

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/pkg/skew"
	"github.com/capdmp/capdmp/test/realworld"
)

const (
	// Budgets on a loaded 2-core machine: a control-plane node boots and joins in about a minute,
	// a one-node KCP rollout takes two to four. A join that fails costs the MachineHealthCheck's
	// node startup timeout (controlPlaneNodeStartup) and a new join before KCP's rollout goes on:
	// the control plane's waits leave room for one remediation.
	clusterReady   = 8 * time.Minute
	upgradeDone    = 12 * time.Minute
	remediation    = controlPlaneNodeStartup + 6*time.Minute
	nodeImageOfTag = "kindest/node:"
)

// write is one object of a user's apply.
type write struct {
	what string
	do   func(s *scenario, version string) error
}

var (
	writeControlPlane = write{"KubeadmControlPlane spec.version", func(s *scenario, v string) error { return s.c.SetControlPlaneVersion(s.ctx, v) }}
	writeMachinePool  = write{"MachinePool spec.template.spec.version", func(s *scenario, v string) error { return s.c.SetPoolVersion(s.ctx, v) }}
	writeCustomImage  = write{"DockerMachinePool spec.template.customImage", func(s *scenario, v string) error { return s.c.SetCustomImage(s.ctx, nodeImageOfTag+v) }}
)

// apply writes the objects in order, delay apart, as kubectl apply or helm upgrade would.
func (s *scenario) apply(version string, delay time.Duration, writes ...write) {
	s.t.Helper()
	for i, w := range writes {
		if i > 0 && delay > 0 {
			time.Sleep(delay)
		}
		s.g.Expect(w.do(s, version)).To(Succeed(), w.what)
		s.logf("applied %s = %s", w.what, version)
	}
}

// upgrade applies version in order and waits for the control plane and the pool to run it.
func (s *scenario) upgrade(version string, cpReplicas, poolReplicas int32, delay time.Duration, writes ...write) {
	s.t.Helper()
	s.apply(version, delay, writes...)
	// KCP replaces the control-plane machines one at a time: beside another scenario on two cores
	// each took 2.5-4 minutes to join and turn ready, and a three-node rollout outlasted 12 minutes.
	s.waitControlPlane(version, cpReplicas, upgradeDone+remediation+time.Duration(cpReplicas-1)*5*time.Minute)
	s.waitPool(version, poolReplicas, upgradeDone)
	s.recordLatency(version)
}

// waitGate waits until the pool's gate reports reason.
func (s *scenario) waitGate(reason string, timeout time.Duration) {
	s.t.Helper()
	err := realworld.WaitFor(s.ctx, timeout, nil, func(ctx context.Context) (bool, string, error) {
		pool, err := s.c.DockerMachinePool(ctx)
		if err != nil {
			return false, "", err
		}
		return pool.Status.VersionGate.WaitingReason == reason, pool.Status.VersionGate.WaitingReason, nil
	})
	s.g.Expect(err).NotTo(HaveOccurred(), "gate waiting with %s", reason)
	s.logf("gate waits: %s", reason)
}

// sawMixedControlPlaneWhileWaiting tells whether a sample had kube-apiservers of two versions
// while the gate held the pool: the scenario exercised the window it is about.
func (s *scenario) sawMixedControlPlaneWhileWaiting() bool {
	return slices.ContainsFunc(s.mon.Changes(), func(c realworld.Sample) bool {
		return len(c.APIServers) > 1 && c.APIServers[0] != c.APIServers[len(c.APIServers)-1] && c.Gate == string(skew.ControlPlaneOlder)
	})
}

// Scenario 2: a three-node control plane mid-upgrade runs kube-apiservers of two versions; the
// pool waits for the last one.
// It is the longest scenario (six control-plane joins): first in the file, so that it starts first.
func TestThreeNodeControlPlane(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "s2-three-node-control-plane", realworld.ClusterSpec{ControlPlaneVersion: v136, ControlPlaneReplicas: 3, PoolVersion: v136, PoolReplicas: 1})
	s.waitControlPlane(v136, 3, clusterReady+4*time.Minute+remediation)
	s.waitPool(v136, 1, clusterReady)
	s.upgrade(v137, 3, 1, 0, writeMachinePool, writeControlPlane)
	s.g.Expect(s.sawMixedControlPlaneWhileWaiting()).To(BeTrue(), "the monitor saw kube-apiservers of two versions while the gate held the pool")
}

// Scenario 1: control plane and pool upgraded at once, in each order, the writes back to back.
// machinepool-first is in the blocking tier (make test-e2e-local); scenario 7 (manager restart)
// is TestManagerRestartMidUpgrade.
func TestUpgradeBothAtOnce(t *testing.T) {
	// Parallel with the other scenarios too: they share -parallel slots instead of waiting for
	// these three.
	t.Parallel()
	tests := []struct {
		name   string
		writes []write
	}{
		{name: "kcp-first", writes: []write{writeControlPlane, writeMachinePool}},
		{name: "machinepool-first", writes: []write{writeMachinePool, writeControlPlane}},
		{name: "customimage-first", writes: []write{writeCustomImage, writeMachinePool, writeControlPlane}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newScenario(t, "s1-"+tt.name, realworld.ClusterSpec{ControlPlaneVersion: v136, ControlPlaneReplicas: 1, PoolVersion: v136, PoolReplicas: 2})
			s.waitControlPlane(v136, 1, clusterReady)
			s.waitPool(v136, 2, clusterReady)
			s.upgrade(v137, 1, 2, 0, tt.writes...)
		})
	}
}

// Scenario 5: the chain v1.35 -> v1.36 -> v1.37, the pool following each step, with 10 s between
// the writes: pool first, then the custom image first.
func TestUpgradeChain(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "s5-chain", realworld.ClusterSpec{ControlPlaneVersion: v135, ControlPlaneReplicas: 1, PoolVersion: v135, PoolReplicas: 2})
	s.waitControlPlane(v135, 1, clusterReady)
	s.waitPool(v135, 2, clusterReady)
	s.upgrade(v136, 1, 2, 10*time.Second, writeMachinePool, writeControlPlane)
	s.upgrade(v137, 1, 2, 10*time.Second, writeCustomImage, writeMachinePool, writeControlPlane)
}

// Scenario 3: the control-plane upgrade starts after the pool's pause outlived CABPK's token TTL;
// the first new node joins with fresh bootstrap data.
func TestPauseLongerThanTokenTTL(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "s3-pause-outlives-token-ttl", realworld.ClusterSpec{ControlPlaneVersion: v136, ControlPlaneReplicas: 1, PoolVersion: v136, PoolReplicas: 1})
	s.waitControlPlane(v136, 1, clusterReady)
	s.waitPool(v136, 1, clusterReady)
	s.apply(v137, 0, writeMachinePool)
	s.waitGate(string(skew.ControlPlaneOlder), 2*time.Minute)
	pool, err := s.c.DockerMachinePool(s.ctx)
	s.g.Expect(err).NotTo(HaveOccurred())
	hashAtPause := pool.Status.VersionGate.BootstrapDataHashAtPause
	s.logf("paused with bootstrap data %s; holding the control plane back for the token TTL (%s) and 15 s", short(hashAtPause), tokenTTL())
	time.Sleep(tokenTTL() + 15*time.Second)
	s.apply(v137, 0, writeControlPlane)
	s.waitControlPlane(v137, 1, upgradeDone+remediation)
	s.waitPool(v137, 1, upgradeDone)
	s.recordLatency(v137)

	// The nodes made after the pause (the old one may still be on its way out).
	machines := &infrav1.DockerMachinePoolMachineList{}
	s.g.Expect(world.Client.List(s.ctx, machines, client.InNamespace(s.c.Namespace),
		client.MatchingLabels{infrav1.KubernetesVersionLabel: v137})).To(Succeed())
	s.g.Expect(machines.Items).NotTo(BeEmpty())
	for _, m := range machines.Items {
		s.g.Expect(m.Labels[infrav1.BootstrapDataHashLabel]).NotTo(BeEmpty())
		s.g.Expect(hashAtPause).NotTo(HavePrefix(m.Labels[infrav1.BootstrapDataHashLabel]), "machine %s joined with data newer than the pause", m.Name)
		s.logf("machine %s joined with bootstrap data %s (pause: %s)", m.Name, m.Labels[infrav1.BootstrapDataHashLabel], short(hashAtPause))
	}
}

// Scenario 4: while paused, a scale-up and a deleted node are served at the last admitted
// version, and those nodes join.
func TestScaleAndReplaceWhilePaused(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "s4-scale-and-replace-while-paused", realworld.ClusterSpec{ControlPlaneVersion: v136, ControlPlaneReplicas: 1, PoolVersion: v136, PoolReplicas: 2})
	s.waitControlPlane(v136, 1, clusterReady)
	s.waitPool(v136, 2, clusterReady)
	s.apply(v137, 0, writeMachinePool)
	s.waitGate(string(skew.ControlPlaneOlder), 2*time.Minute)

	s.g.Expect(s.c.SetPoolReplicas(s.ctx, 3)).To(Succeed())
	s.logf("scaled the MachinePool to 3 while paused")
	machines := &clusterv1.MachineList{}
	s.g.Expect(world.Client.List(s.ctx, machines, client.InNamespace(s.c.Namespace), client.MatchingLabels{clusterv1.MachinePoolNameLabel: s.c.Pool})).To(Succeed())
	s.g.Expect(machines.Items).NotTo(BeEmpty())
	victim := machines.Items[0]
	s.g.Expect(world.Client.Delete(s.ctx, &victim)).To(Succeed())
	s.logf("deleted Machine %s while paused", victim.Name)
	s.waitPool(v136, 3, upgradeDone)
	s.g.Expect(s.c.Containers(s.ctx)).NotTo(ContainElement(victim.Name))

	s.apply(v137, 0, writeControlPlane)
	s.waitControlPlane(v137, 1, upgradeDone+remediation)
	s.waitPool(v137, 3, upgradeDone)
	s.recordLatency(v137)
}

// Scenario 6: a pool set one minor ahead of a control plane that is not upgraded waits with a
// clear condition and creates nothing new; set back, it recovers.
func TestPoolAheadOfControlPlane(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "s6-pool-ahead", realworld.ClusterSpec{ControlPlaneVersion: v136, ControlPlaneReplicas: 1, PoolVersion: v136, PoolReplicas: 1})
	s.waitControlPlane(v136, 1, clusterReady)
	s.waitPool(v136, 1, clusterReady)
	before, err := s.c.Containers(s.ctx)
	s.g.Expect(err).NotTo(HaveOccurred())

	s.apply(v137, 0, writeMachinePool)
	s.waitGate(string(skew.ControlPlaneOlder), 2*time.Minute)
	pool, err := s.c.DockerMachinePool(s.ctx)
	s.g.Expect(err).NotTo(HaveOccurred())
	var cond string
	for _, c := range pool.Status.Conditions {
		if c.Type == infrav1.VersionSkewCondition {
			cond = string(c.Status) + " " + c.Reason + ": " + c.Message
		}
	}
	s.logf("condition %s %s", infrav1.VersionSkewCondition, cond)
	s.g.Expect(cond).To(And(HavePrefix("False "+string(skew.ControlPlaneOlder)), ContainSubstring(v137), ContainSubstring(v136)))
	time.Sleep(30 * time.Second)
	s.g.Expect(s.c.Containers(s.ctx)).To(Equal(before), "nothing new is created while waiting")

	s.apply(v136, 0, writeMachinePool)
	s.waitGate("", 2*time.Minute)
	s.waitPool(v136, 1, clusterReady)
	s.g.Expect(s.c.Containers(s.ctx)).To(Equal(before), "set back, the pool keeps its nodes")
}

// Scenario 7: the CAPDMP manager restarted in the middle of scenario 1. It runs beside the
// other scenarios: the restart lands in their timelines too, and they must not mind.
func TestManagerRestartMidUpgrade(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "s7-manager-restart", realworld.ClusterSpec{ControlPlaneVersion: v136, ControlPlaneReplicas: 1, PoolVersion: v136, PoolReplicas: 2})
	s.waitControlPlane(v136, 1, clusterReady)
	s.waitPool(v136, 2, clusterReady)
	s.apply(v137, 0, writeMachinePool, writeControlPlane)
	s.waitGate(string(skew.ControlPlaneOlder), 2*time.Minute)
	s.g.Expect(world.RestartCAPDMP(s.ctx)).To(Succeed())
	s.logf("restarted the CAPDMP manager while the gate waits")
	s.waitControlPlane(v137, 1, upgradeDone+remediation)
	s.waitPool(v137, 2, upgradeDone)
	s.recordLatency(v137)
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}
