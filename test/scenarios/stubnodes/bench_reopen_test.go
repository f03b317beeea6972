//go:build bench

package stubnodes

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/skew"
	"github.com/capdmp/capdmp/test/framework"
)

// reopenProofHops are one trial's moments, from the old control-plane container's destroy.
type reopenProofHops struct {
	// InfraGoneMs is when the old DockerMachine's finalizer was removed (as CAPD does after the
	// container's removal and the load balancer's update).
	InfraGoneMs float64 `json:"infraGoneMs"`
	// MachineGoneMs is when the old Machine was first seen gone (-1: not before the create).
	MachineGoneMs float64 `json:"machineGoneMs"`
	// StatusMs is when the control plane's status was written without the old version.
	StatusMs float64 `json:"statusMs"`
	CreateMs float64 `json:"createMs"`
	StartMs  float64 `json:"startMs"`
}

type reopenProofResults struct {
	Date   string `json:"date"`
	Commit string `json:"commit"`
	// StatusDelayMs is how long after the destroy the control plane's status was written.
	StatusDelayMs float64             `json:"statusDelayMs"`
	ToCreate      framework.Quantiles `json:"toCreate"`
	ToStart       framework.Quantiles `json:"toStart"`
	Trials        []reopenProofHops   `json:"trials"`
}

// TestBenchGateReopenProof measures the gate's re-open from the old control-plane container's
// destroy to the pool's first container of the new version, when the control plane's status
// moves only BENCH_REOPEN_STATUS_DELAY (5s) later, over BENCH_TRIALS (20) trials: each a
// cluster of its own whose control plane has an old Machine on a DockerMachine with a container,
// being deleted as Cluster API and CAPD delete it, and a new one. A create before the destroy,
// or before the DockerMachine is gone, fails the trial. It writes
// _artifacts/bench/results-reopen.json.
func TestBenchGateReopenProof(t *testing.T) {
	trials := framework.BenchSetting("BENCH_TRIALS", 20)
	delay := time.Duration(framework.BenchSetting("BENCH_REOPEN_STATUS_DELAY", 5)) * time.Second
	withManager(t, managerConfig{containerSyncPeriod: time.Hour, tokenTTL: 15 * time.Minute})
	results := reopenProofResults{Date: time.Now().UTC().Format(time.RFC3339), Commit: framework.Commit(), StatusDelayMs: ms(delay)}
	var toCreate, toStart []time.Duration
	for i := range trials {
		t.Run(fmt.Sprintf("trial-%02d", i), func(t *testing.T) {
			hops := gateReopenProofTrial(t, delay)
			results.Trials = append(results.Trials, hops)
			toCreate = append(toCreate, time.Duration(hops.CreateMs*float64(time.Millisecond)))
			toStart = append(toStart, time.Duration(hops.StartMs*float64(time.Millisecond)))
		})
	}
	results.ToCreate, results.ToStart = framework.QuantilesOf(toCreate), framework.QuantilesOf(toStart)
	fmt.Printf("bench: %-62s median %6.0fms  p95 %6.0fms  max %6.0fms  (%d trials)\n", "gate re-open: old control-plane destroy -> first create", results.ToCreate.MedianMs, results.ToCreate.P95Ms, results.ToCreate.MaxMs, len(toCreate))
	fmt.Printf("bench: %-62s median %6.0fms  p95 %6.0fms  max %6.0fms  (%d trials)\n", "gate re-open: old control-plane destroy -> first start", results.ToStart.MedianMs, results.ToStart.P95Ms, results.ToStart.MaxMs, len(toStart))
	out, err := framework.BenchJSON(results)
	NewWithT(t).Expect(err).ToNot(HaveOccurred())
	NewWithT(t).Expect(framework.WriteBenchFile("results-reopen.json", out)).To(Succeed())
}

// holdFinalizer keeps the trial's objects until the trial lets them go, as CAPD's finalizer
// keeps a DockerMachine until its container is removed.
const holdFinalizer = "bench.capdmp.dev/hold"

func gateReopenProofTrial(t *testing.T, statusDelay time.Duration) reopenProofHops {
	t.Helper()
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 1})
	c.waitForReady(1, v131, time.Minute)
	nodeImage := c.containers()[0].Image

	// The control plane mid-upgrade: an old and a new Machine, each on a DockerMachine with a
	// control-plane container named as CAPD names it; the control plane reports both versions.
	machines := map[string]string{"old": v131, "new": v132}
	for role, version := range machines {
		name := c.name + "-cp-" + role
		dm := &unstructured.Unstructured{}
		dm.SetAPIVersion("infrastructure.cluster.x-k8s.io/v1beta2")
		dm.SetKind("DockerMachine")
		dm.SetNamespace(c.namespace)
		dm.SetName(name)
		dm.SetFinalizers([]string{holdFinalizer})
		g.Expect(c.management.Create(ctx, dm)).To(Succeed())
		m := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: name,
				Labels: map[string]string{clusterv1.ClusterNameLabel: c.name, clusterv1.MachineControlPlaneLabel: ""}},
			Spec: clusterv1.MachineSpec{ClusterName: c.name, Version: version,
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(name)},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachine", Name: name}},
		}
		g.Expect(c.management.Create(ctx, m)).To(Succeed())
		// As Cluster API's Machine controller records it once the Node exists: the proof counts a
		// Machine under its kubelet's version too, and doubts one whose Node has not reported.
		m.Status.NodeInfo = &corev1.NodeSystemInfo{KubeletVersion: version}
		g.Expect(c.management.Status().Update(ctx, m)).To(Succeed())
		_, err := c.engine.Create(ctx, container.Spec{Name: name, Image: nodeImage,
			Labels: map[string]string{container.KindClusterLabel: c.name, container.KindRoleLabel: container.KindControlPlaneRole}})
		g.Expect(err).ToNot(HaveOccurred())
		t.Cleanup(func() { _ = c.engine.Delete(context.Background(), name) })
	}
	c.setControlPlaneStatus(v131, v132)
	mp := &clusterv1.MachinePool{}
	c.update(c.key(), mp, func() { mp.Spec.Template.Spec.Version = v132 })
	g.Eventually(func() string { return c.pool().Status.VersionGate.WaitingReason }, 30*time.Second, benchPoll).Should(Equal(string(skew.ControlPlaneOlder)))

	poolChanges, poolErrs := c.engine.Watch(ctx, map[string]string{infrav1.ClusterNameLabel: c.name, infrav1.KubernetesVersionLabel: versionLabel(g, v132)}, time.Now())
	cpChanges, cpErrs := c.engine.Watch(ctx, map[string]string{container.KindClusterLabel: c.name, container.KindRoleLabel: container.KindControlPlaneRole}, time.Now())
	// The engine's event streams are set up when their first byte comes; give them a moment.
	time.Sleep(200 * time.Millisecond)

	// Cluster API deletes the old Machine: its Machine controller deletes the DockerMachine, and
	// CAPD removes the container, then its finalizer.
	old := client.ObjectKey{Namespace: c.namespace, Name: c.name + "-cp-old"}
	g.Expect(c.management.Delete(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: old.Namespace, Name: old.Name}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		dm := &unstructured.Unstructured{}
		dm.SetAPIVersion("infrastructure.cluster.x-k8s.io/v1beta2")
		dm.SetKind("DockerMachine")
		g.Expect(c.management.Get(ctx, old, dm)).To(Succeed())
		g.Expect(dm.GetDeletionTimestamp()).ToNot(BeNil())
	}, 30*time.Second, 20*time.Millisecond).Should(Succeed(), "the Machine controller deletes the old DockerMachine")
	g.Expect(c.engine.Delete(ctx, old.Name)).To(Succeed())
	var destroyed time.Time
	for destroyed.IsZero() {
		select {
		case e := <-cpChanges:
			if e.Action == "destroy" && e.Attributes["name"] == old.Name {
				destroyed = e.At
			}
		case err := <-cpErrs:
			t.Fatalf("watching the engine: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("no destroy event for the old control-plane container")
		}
	}
	g.Expect(releaseHold(ctx, c.management, old)).To(Succeed())
	infraGone := time.Now()

	statusAt := destroyed.Add(statusDelay)
	statusTimer := time.AfterFunc(time.Until(statusAt), func() {
		if err := writeControlPlaneStatus(context.Background(), c.management, client.ObjectKey{Namespace: c.namespace, Name: c.name + "-cp"}, []string{v132}); err != nil {
			t.Errorf("writing the control plane's status: %v", err)
		}
	})
	defer statusTimer.Stop()

	hops := reopenProofHops{InfraGoneMs: ms(infraGone.Sub(destroyed)), MachineGoneMs: -1, StatusMs: ms(statusAt.Sub(destroyed))}
	machineGone := time.NewTicker(20 * time.Millisecond)
	defer machineGone.Stop()
	var created, started time.Time
	deadline := time.After(30 * time.Second)
	for started.IsZero() {
		select {
		case e := <-poolChanges:
			switch {
			case e.Action == "create" && created.IsZero():
				created = e.At
			case e.Action == "start" && started.IsZero():
				started = e.At
			}
		case err := <-poolErrs:
			t.Fatalf("watching the engine: %v", err)
		case <-machineGone.C:
			if hops.MachineGoneMs < 0 && created.IsZero() {
				if err := c.management.Get(ctx, old, &clusterv1.Machine{}); apierrors.IsNotFound(err) {
					hops.MachineGoneMs = ms(time.Since(destroyed))
				}
			}
		case <-deadline:
			t.Fatalf("no container of %s started within 30s of the old control-plane container's destroy", v132)
		}
	}
	// Never early: nothing of the new version before the old kube-apiserver's container and its
	// DockerMachine are gone.
	g.Expect(created).To(BeTemporally(">", destroyed), "a %s container was created before the old control-plane container was destroyed", v132)
	g.Expect(created).To(BeTemporally(">", infraGone.Add(-50*time.Millisecond)), "a %s container was created before the old DockerMachine was gone", v132)
	hops.CreateMs, hops.StartMs = ms(created.Sub(destroyed)), ms(started.Sub(destroyed))
	t.Logf("from the old control-plane container's destroy: DockerMachine gone %.0fms, Machine gone %.0fms, status %.0fms, create %.0fms, start %.0fms",
		hops.InfraGoneMs, hops.MachineGoneMs, hops.StatusMs, hops.CreateMs, hops.StartMs)
	if created.After(statusAt) {
		t.Logf("the gate re-opened only on the control plane's status, not on the proof")
	}
	statusTimer.Stop()

	// Let the new control-plane Machine go with the Cluster.
	newKey := client.ObjectKey{Namespace: c.namespace, Name: c.name + "-cp-new"}
	g.Expect(releaseHold(ctx, c.management, newKey)).To(Succeed())
	c.cleanup()
	return hops
}

// releaseHold removes the trial's finalizer from a DockerMachine with a merge patch: Cluster
// API's Machine controller writes the object too (owner references), so an update would conflict.
func releaseHold(ctx context.Context, c client.Client, key client.ObjectKey) error {
	dm := &unstructured.Unstructured{}
	dm.SetAPIVersion("infrastructure.cluster.x-k8s.io/v1beta2")
	dm.SetKind("DockerMachine")
	dm.SetNamespace(key.Namespace)
	dm.SetName(key.Name)
	if err := c.Patch(ctx, dm, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		return fmt.Errorf("removing the hold finalizer of DockerMachine %s: %w", key, err)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
