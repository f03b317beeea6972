package local

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/controllers"
	"github.com/capdmp/capdmp/pkg/skew"
)

// skewViolationsTotal counts, over the whole suite, the moments a monitor saw a kubelet break the
// skew policy; TestMain prints it.
var skewViolationsTotal int

// TestUpgradeBothAtOnce applies a new version to the control plane and to the pool together, in
// each order, and drives the control plane's upgrade as a control plane provider reports it. A
// monitor samples every 50 ms that no container or Node ever runs a version newer than the oldest
// control-plane version.
func TestUpgradeBothAtOnce(t *testing.T) {
	tests := []struct {
		name        string
		customImage bool
		// writes are the user's writes, in order; gap is the pause between them.
		writes []string
		gap    time.Duration
	}{
		{name: "control plane first, no delay", writes: []string{"controlplane", "machinepool"}},
		{name: "machine pool first, no delay", writes: []string{"machinepool", "controlplane"}},
		{name: "machine pool first, 2s apart", writes: []string{"machinepool", "controlplane"}, gap: 2 * time.Second},
		{name: "custom image first, then machine pool, then control plane", customImage: true, writes: []string{"image", "machinepool", "controlplane"}, gap: time.Second},
		{name: "control plane, custom image, machine pool", customImage: true, writes: []string{"controlplane", "image", "machinepool"}},
	}
	// Only the watch on the control plane may re-open the gate: a periodic re-list would hide a
	// broken one behind its period.
	withLongSyncPeriod(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			o := clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 2}
			if tt.customImage {
				o.customImage = "kindest/node:" + v131
			}
			c := newTestCluster(t, o)
			c.waitForReady(2, v131, 2*time.Minute)
			m := c.startMonitor(50 * time.Millisecond)
			start := time.Now()

			for i, w := range tt.writes {
				if i > 0 {
					time.Sleep(tt.gap)
				}
				switch w {
				case "controlplane":
					c.setControlPlaneSpecVersion(v132)
				case "machinepool":
					c.setPoolVersion(v132)
				case "image":
					c.setCustomImage("kindest/node:" + v132)
				}
			}

			// The control plane provider upgrades machine by machine: for a while it runs both.
			g.Consistently(func() []string { return versionsOf(c) }, 3*time.Second, 100*time.Millisecond).
				ShouldNot(ContainElement(v132), "no new-version container while the control plane is older")
			g.Expect(conditions.Get(c.pool(), infrav1.VersionSkewCondition).Reason).To(Equal(string(skew.ControlPlaneOlder)))
			c.setControlPlaneStatus(v131, v132)
			g.Consistently(func() []string { return versionsOf(c) }, 2*time.Second, 100*time.Millisecond).
				ShouldNot(ContainElement(v132), "the oldest kube-apiserver bounds the pool")
			c.setControlPlaneStatus(v132)
			reopened := time.Now()

			// The engine lists creation times to the second only: measure when the container is
			// first seen instead, an upper bound of the latency (polling every 20 ms).
			var latency time.Duration
			g.Eventually(func() []string { return versionsOf(c) }, 30*time.Second, 20*time.Millisecond).Should(ContainElement(v132))
			latency = time.Since(reopened)
			c.waitForReady(2, v132, 2*time.Minute)

			samples, violations := m.finish(t)
			skewViolationsTotal += len(violations)
			t.Logf("gate re-open latency (control plane at %s -> first %s container created): %s; upgrade took %s; %d samples",
				v132, v132, latency.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), samples)
			// Generous for a loaded machine (about 1 s quiet), far below the hour-long sync period
			// and the pool's 30 s retries: only the watch can have re-opened it.
			g.Expect(latency).To(BeNumerically("<", 10*time.Second), "gate re-open latency")
			g.Expect(violations).To(BeEmpty())
			g.Expect(samples).To(BeNumerically(">", 100))
		})
	}
}

// TestPauseOutlivesTokenTTL keeps the pool paused longer than CABPK's bootstrap token TTL, scales
// it up during the pause (replacements and scale-up at the admitted version join), then lets the
// control plane finish: the first new-version node joins with data newer than the pause, and the
// stub kubeadm in it proves the token against the workload API server (an expired token is 401).
func TestPauseOutlivesTokenTTL(t *testing.T) {
	testPause(t, false)
}

// TestControllerRestartWhilePaused restarts the manager during a pause: the pause, its bootstrap
// data record and the admitted version survive in status, and the upgrade completes.
func TestControllerRestartWhilePaused(t *testing.T) {
	testPause(t, true)
}

func testPause(t *testing.T, restart bool) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 1})
	c.waitForReady(1, v131, 2*time.Minute)
	m := c.startMonitor(100 * time.Millisecond)

	c.setPoolVersion(v132)
	c.setControlPlaneSpecVersion(v132)
	g.Eventually(func(g Gomega) {
		pool := c.pool()
		g.Expect(pool.Status.VersionGate.WaitingReason).To(Equal(string(skew.ControlPlaneOlder)))
		g.Expect(pool.Status.VersionGate.WaitingSince).ToNot(BeNil())
		g.Expect(pool.Status.VersionGate.BootstrapDataHashAtPause).ToNot(BeEmpty())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	hashAtPause := c.pool().Status.VersionGate.BootstrapDataHashAtPause

	// During the pause the pool has CABPK re-render the data, and scale-up goes on at v1.31.
	g.Eventually(func(g Gomega) {
		config := &bootstrapv1.KubeadmConfig{}
		g.Expect(mgmt.Get(ctx, c.key(), config)).To(Succeed())
		g.Expect(config.Annotations).To(HaveKey(controllers.BootstrapRefreshRequestedAnnotation))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	c.setReplicas(2)
	c.waitForReady(2, v131, 2*time.Minute)
	for _, ct := range c.containers() {
		if ct.Labels[infrav1.BootstrapDataHashLabel] == hashAtPause {
			// The first container was created before the pause; any created during it is fresh.
			g.Expect(ct.CreatedAt.Before(c.pool().Status.VersionGate.WaitingSince.Time)).To(BeTrue(), "container %s was created during the pause with data older than it", ct.Name)
		}
	}
	if restart {
		restartManager(t)
	}

	// Outlive the token TTL.
	pauseEnd := c.pool().Status.VersionGate.WaitingSince.Add(tokenTTL + 5*time.Second)
	time.Sleep(time.Until(pauseEnd))
	g.Expect(versionsOf(c)).ToNot(ContainElement(v132))

	c.setControlPlaneStatus(v132)
	c.waitForReady(2, v132, 3*time.Minute)
	pool := c.pool()
	g.Expect(pool.Status.VersionGate.WaitingSince).To(BeNil(), "the pause is over once a container joined with fresh data")
	for _, ct := range c.containers() {
		g.Expect(ct.Labels[infrav1.BootstrapDataHashLabel]).ToNot(Equal(hashAtPause))
	}
	samples, violations := m.finish(t)
	skewViolationsTotal += len(violations)
	t.Logf("pause of %s outlived the %s token TTL; %d samples", tokenTTL+5*time.Second, tokenTTL, samples)
	g.Expect(violations).To(BeEmpty())
}

// TestPoolAheadOfControlPlane: a pool set one minor ahead of a control plane that is not upgraded
// waits with a clear condition and creates nothing new; set back, it recovers.
func TestPoolAheadOfControlPlane(t *testing.T) {
	g := NewWithT(t)
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 1})
	c.waitForReady(1, v131, 2*time.Minute)
	c.setPoolVersion(v132)
	g.Eventually(func(g Gomega) {
		cond := conditions.Get(c.pool(), infrav1.VersionSkewCondition)
		g.Expect(cond).ToNot(BeNil())
		g.Expect(cond.Reason).To(Equal(string(skew.ControlPlaneOlder)))
		g.Expect(cond.Message).To(And(ContainSubstring(v132), ContainSubstring(v131)))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Consistently(func() []string { return versionsOf(c) }, 3*time.Second, 100*time.Millisecond).ShouldNot(ContainElement(v132))
	c.setPoolVersion(v131)
	g.Eventually(func(g Gomega) {
		g.Expect(conditions.IsTrue(c.pool(), infrav1.VersionSkewCondition)).To(BeTrue())
		g.Expect(c.pool().Status.VersionGate.WaitingReason).To(BeEmpty())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	c.waitForReady(1, v131, time.Minute)
}

func versionsOf(c *testCluster) []string {
	var out []string
	for _, ct := range c.containers() {
		out = append(out, ct.Labels[infrav1.KubernetesVersionLabel])
	}
	slices.Sort(out)
	return out
}
