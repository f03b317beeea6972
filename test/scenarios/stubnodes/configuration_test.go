package stubnodes

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/clusterops"
)

// TestConfigurationChangeRollsThePool edits the pool's KubeadmConfig (a file added): CABPK
// renders the edit only when the pool asks, and the pool then replaces every node, one at a
// time by default, with nodes that got the file. At every sample the pool runs at most one
// container above the desired count, not counting those whose Machine is being deleted (a
// draining node, as a Deployment's terminating Pods), and keeps the desired count of Nodes.
func TestConfigurationChangeRollsThePool(t *testing.T) {
	const desired = 3
	g := NewWithT(t)
	ctx := context.Background()
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: desired})
	c.waitForReady(desired, v131, 2*time.Minute)
	before := containerNames(c)
	configHash := c.pool().Status.BootstrapData.ConfigHash

	var (
		mu                  sync.Mutex
		most, fewestNodes   = 0, desired
		samples             int
		stopSampling, ended = make(chan struct{}), make(chan struct{})
	)
	go func() {
		defer close(ended)
		for {
			containers, nodes := c.containersStaying(), len(c.nodes())
			mu.Lock()
			most, fewestNodes, samples = max(most, containers), min(fewestNodes, nodes), samples+1
			mu.Unlock()
			select {
			case <-stopSampling:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	const path, content = "/etc/capdmp-test/edited", "edited\n"
	g.Expect(clusterops.AddBootstrapFile(ctx, c.conformanceCluster(), path, content)).To(Succeed())
	g.Eventually(func(g Gomega) {
		names := containerNames(c)
		g.Expect(names).To(HaveLen(desired))
		g.Expect(slices.ContainsFunc(names, func(n string) bool { return slices.Contains(before, n) })).To(BeFalse(), "old nodes left: %v", names)
	}, 3*time.Minute, 500*time.Millisecond).Should(Succeed())
	c.waitForReady(desired, v131, time.Minute)
	close(stopSampling)
	<-ended

	for _, ct := range c.containers() {
		res, err := engine.Exec(ctx, ct.Name, []string{"cat", path}, nil)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(string(res.Stdout)).To(Equal(content), "node %s got the edited configuration", ct.Name)
	}
	pool := c.pool()
	g.Expect(pool.Status.BootstrapData.ConfigHash).ToNot(Equal(configHash), "the data was rendered from the edited KubeadmConfig")
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d samples: at most %d containers not being removed, at least %d Nodes", samples, most, fewestNodes)
	g.Expect(most).To(BeNumerically("<=", desired+1), "maxSurge 1")
	g.Expect(fewestNodes).To(BeNumerically(">=", desired), "maxUnavailable 0")
}

// containersStaying counts the pool's containers but those whose Machine is being deleted (the
// container is named as the Machine's DockerMachinePoolMachine). A failed read counts them all.
func (c *testCluster) containersStaying() int {
	containers := c.containers()
	machines := &clusterv1.MachineList{}
	if err := mgmt.List(context.Background(), machines, client.InNamespace(c.namespace)); err != nil {
		return len(containers)
	}
	going := map[string]bool{}
	for _, m := range machines.Items {
		if !m.DeletionTimestamp.IsZero() {
			going[m.Spec.InfrastructureRef.Name] = true
		}
	}
	n := 0
	for _, ct := range containers {
		if !going[ct.Name] {
			n++
		}
	}
	return n
}

func containerNames(c *testCluster) []string {
	var names []string
	for _, ct := range c.containers() {
		names = append(names, ct.Name)
	}
	return names
}
