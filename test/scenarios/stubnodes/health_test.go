package stubnodes

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// createHealthCheck creates a MachineHealthCheck of the pool's Machines, selected as the
// machinepool template selects them.
func (c *testCluster) createHealthCheck(checks clusterv1.MachineHealthCheckChecks) {
	c.t.Helper()
	mhc := &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.key().Name},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: c.name,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachinePoolNameLabel: c.key().Name}},
			Checks:      checks,
		},
	}
	NewWithT(c.t).Expect(mgmt.Create(context.Background(), mhc)).To(Succeed())
}

// remediationEvents counts the pool's RemediatingMachine events.
func (c *testCluster) remediationEvents() int {
	c.t.Helper()
	events := &corev1.EventList{}
	NewWithT(c.t).Expect(mgmt.List(context.Background(), events, client.InNamespace(c.namespace))).To(Succeed())
	n := 0
	for _, e := range events.Items {
		if e.Reason == "RemediatingMachine" && e.InvolvedObject.Name == c.key().Name {
			n += int(max(e.Count, 1))
		}
	}
	return n
}

// TestPoolMachineHealthCheck: a pool Node that stops being Ready is found unhealthy by a
// MachineHealthCheck, handed to the pool, and replaced: the pool is back to its replicas with a
// new container, the old one and its Node gone. The manager runs as a process with the shipped
// RBAC, so that a permission remediation needs and the role lacks fails here.
func TestPoolMachineHealthCheck(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	startManagerProcess(t, false)
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 2})
	c.waitForReady(2, v131, 2*time.Minute)
	c.createHealthCheck(clusterv1.MachineHealthCheckChecks{
		NodeStartupTimeoutSeconds: ptr.To(clusterv1.DefaultNodeStartupTimeoutSeconds),
		UnhealthyNodeConditions:   []clusterv1.UnhealthyNodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](5)}},
	})

	before := c.containers()
	victim := before[0].Name
	node := &corev1.Node{}
	g.Expect(testEnv.Workload.Client.Get(ctx, client.ObjectKey{Name: victim}, node)).To(Succeed())
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			node.Status.Conditions[i].Status = corev1.ConditionFalse
			node.Status.Conditions[i].Reason = "KubeletStopped"
			node.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	g.Expect(testEnv.Workload.Client.Status().Update(ctx, node)).To(Succeed())
	start := time.Now()

	g.Eventually(func(g Gomega) {
		names := map[string]bool{}
		for _, ct := range c.containers() {
			names[ct.Name] = true
		}
		g.Expect(names).ToNot(HaveKey(victim))
		g.Expect(c.nodes()).ToNot(HaveKey(victim))
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	c.waitForReady(2, v131, 2*time.Minute)
	t.Logf("Node %s NotReady -> replaced and the pool back to 2 ready in %s (the check's timeout is 5s)", victim, time.Since(start).Round(time.Millisecond))
	g.Expect(c.remediationEvents()).To(Equal(1), "the pool remediated one Machine, the NotReady one")
	g.Expect(c.containers()).To(ContainElement(HaveField("Name", before[1].Name)), "the healthy container stays")
}
