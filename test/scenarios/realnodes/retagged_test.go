//go:build e2e_local

package realnodes

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/clusterops"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/test/dockerengine"
	"github.com/capdmp/capdmp/test/framework"
)

// retaggedImage is the real node image of vNewer under a tag that says vOlder: only this test uses
// the name, and it removes the tag when it ends.
var retaggedImage = "capdmp.test/retagged-node:" + vOlder

// TestRetaggedImageRefused gives a pool at vOlder the node image of vNewer retagged as vOlder, which
// the gate admits by its tag, and scales the pool from 1 to 4: the pool must read the image's
// /kind/version, refuse it (MachinesCreated=False ImageVersionMismatch, a Warning event) and start
// nothing of it, while the monitor, on from the cluster's creation, sees no violation.
func TestRetaggedImageRefused(t *testing.T) {
	t.Parallel()
	s := startScenario(t, "retagged-image-refused")
	imageID := s.retagNodeImage(framework.NodeImage(vNewer), retaggedImage)
	c := s.createCluster(framework.ClusterSpec{ControlPlaneVersion: vOlder, ControlPlaneReplicas: 1, PoolVersion: vOlder, PoolReplicas: 1})
	s.watch(c)
	s.wait("the control plane at "+vOlder, budgets.ClusterReady, func(ctx context.Context) (bool, string, error) { return c.ControlPlaneAt(ctx, vOlder, 1) })
	s.wait("the pool at "+vOlder, budgets.ClusterReady, func(ctx context.Context) (bool, string, error) { return framework.PoolAt(ctx, c, vOlder, 1) })
	original := s.poolContainerNames()
	s.g.Expect(original).To(HaveLen(1), "the pool's containers before the retagged image")

	s.setCustomImage(retaggedImage)
	s.logf("customImage = %s (%s, the image of %s)", retaggedImage, imageID, vNewer)
	s.waitImageRefused("the pool to refuse the retagged image", "")
	s.g.Expect(clusterops.SetMachinePool(s.ctx, c, "replicas 4", func(mp *clusterv1.MachinePool) { mp.Spec.Replicas = ptr.To(int32(4)) })).To(Succeed())
	s.logf("MachinePool scaled from 1 to 4")
	s.waitImageRefused("the pool to refuse the scale-up", "Not creating 4 containers")

	// Past the pool's next look at the image (every 30 s): nothing of it is created meanwhile.
	const hold = 45 * time.Second
	s.logf("watching the pool's containers for %s", hold)
	s.g.Consistently(func(g Gomega) { s.checkNothingOf(g, original, imageID) }, hold, time.Second).Should(Succeed())
	s.waitImageRefused("the pool to refuse the image still", "Not creating 4 containers")

	s.checkKubelets(2, vOlder)
	s.wait("a Warning event "+infrav1.ImageVersionMismatchReason+" of the pool", 30*time.Second, func(ctx context.Context) (bool, string, error) {
		return s.poolEvent(ctx, corev1.EventTypeWarning, infrav1.ImageVersionMismatchReason, retaggedImage)
	})
}

// retagNodeImage tags image as name, a name only this test uses, and removes that tag when the
// test ends; it returns the image's ID. A name that holds another image already is left alone and
// fails the test: the test never moves a tag it did not make.
func (s *scenario) retagNodeImage(image, name string) string {
	s.t.Helper()
	imageID, err := s.imageID(image)
	s.g.Expect(err).NotTo(HaveOccurred(), "the node image of %s, built by `make node-images`", vNewer)
	if held, err := s.imageID(name); err == nil {
		s.g.Expect(held).To(Equal(imageID), "%s exists on the engine as another image than %s: not moving it", name, image)
		s.logf("%s is %s already (left by an earlier run)", name, image)
	}
	_, err = dockerengine.Docker(s.ctx, world.DockerHost, nil, "image", "tag", imageID, name)
	s.g.Expect(err).NotTo(HaveOccurred(), "tagging %s as %s", image, name)
	s.t.Cleanup(func() {
		// Only the tag goes: the image keeps its own.
		if _, err := dockerengine.Docker(context.Background(), world.DockerHost, nil, "image", "rm", name); err != nil {
			s.t.Errorf("removing the tag %s: %v", name, err)
		}
	})
	s.logf("tagged %s (%s) as %s", image, imageID, name)
	return imageID
}

// imageID is the ID of the image on the engine.
func (s *scenario) imageID(image string) (string, error) {
	out, err := dockerengine.Docker(s.ctx, world.DockerHost, nil, "image", "inspect", "--format", "{{.Id}}", image)
	return strings.TrimSpace(out), err
}

// setCustomImage writes the DockerMachinePool's spec.template.customImage, as a user's apply does.
func (s *scenario) setCustomImage(image string) {
	s.t.Helper()
	pool := &infrav1.DockerMachinePool{}
	s.g.Expect(s.c.Management.Get(s.ctx, s.c.Key, pool)).To(Succeed(), "reading DockerMachinePool %s", s.c.Key)
	patch := client.MergeFrom(pool.DeepCopy())
	pool.Spec.Template.CustomImage = image
	s.g.Expect(s.c.Management.Patch(s.ctx, pool, patch)).To(Succeed(), "writing customImage %s to DockerMachinePool %s", image, s.c.Key)
}

// waitImageRefused waits until the pool's MachinesCreated condition refuses retaggedImage for
// ImageVersionMismatch, with a message that starts with prefix.
func (s *scenario) waitImageRefused(what, prefix string) {
	s.t.Helper()
	want := fmt.Sprintf("image %s (", retaggedImage)
	wantVersions := fmt.Sprintf("holds Kubernetes %s by its /kind/version, not the %s it is used as; none of it is started", vNewer, vOlder)
	s.wait(what, 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		pool := &infrav1.DockerMachinePool{}
		if err := s.c.Management.Get(ctx, s.c.Key, pool); err != nil {
			return false, "", err
		}
		cond := conditions.Get(pool, infrav1.MachinesCreatedCondition)
		if cond == nil {
			return false, "no condition " + infrav1.MachinesCreatedCondition, nil
		}
		ok := cond.Status == metav1.ConditionFalse && cond.Reason == infrav1.ImageVersionMismatchReason && strings.HasPrefix(cond.Message, prefix) &&
			strings.Contains(cond.Message, want) && strings.Contains(cond.Message, wantVersions)
		return ok, fmt.Sprintf("%s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message), nil
	})
}

// poolContainerNames lists the pool's containers by the labels CAPDMP gives them.
func (s *scenario) poolContainerNames() []string {
	s.t.Helper()
	containers, err := s.poolContainers(s.ctx)
	s.g.Expect(err).NotTo(HaveOccurred())
	names := make([]string, 0, len(containers))
	for _, c := range containers {
		names = append(names, c.Name)
	}
	return names
}

func (s *scenario) poolContainers(ctx context.Context) ([]container.Container, error) {
	return s.c.Engine.List(ctx, map[string]string{infrav1.ClusterNameLabel: s.c.Name, infrav1.PoolNameLabel: s.c.Pool})
}

// checkNothingOf checks that the pool has exactly the containers original, none made from
// retaggedImage, that no container of the cluster is of the image imageID, and that no container
// made to read an image's files was ever started.
func (s *scenario) checkNothingOf(g Gomega, original []string, imageID string) {
	pool, err := s.poolContainers(s.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	names := []string{}
	for _, c := range pool {
		names = append(names, c.Name)
		g.Expect(c.Labels).NotTo(HaveKeyWithValue(infrav1.ImageLabel, retaggedImage), "container %s of the pool is made from %s", c.Name, retaggedImage)
	}
	g.Expect(names).To(Equal(original), "the pool's containers")
	cluster, err := s.c.Engine.List(s.ctx, map[string]string{container.KindClusterLabel: s.c.Name})
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range cluster {
		g.Expect(c.ImageID).NotTo(Equal(imageID), "container %s of the cluster is of the image of %s (%s)", c.Name, vNewer, c.Image)
	}
	readers, err := s.c.Engine.List(s.ctx, map[string]string{container.ImageReaderLabel: "true"})
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range readers {
		g.Expect(c.NeverStarted).To(BeTrue(), "image reader container %s (%s) was started", c.Name, c.Image)
	}
}

// checkKubelets checks that the workload cluster has nodes Nodes, every kubelet at version.
func (s *scenario) checkKubelets(nodes int, version string) {
	s.t.Helper()
	cfg, err := s.c.WorkloadConfig(s.ctx)
	s.g.Expect(err).NotTo(HaveOccurred(), "the workload cluster's kubeconfig")
	workload, err := client.New(cfg, client.Options{})
	s.g.Expect(err).NotTo(HaveOccurred())
	list := &corev1.NodeList{}
	s.g.Expect(workload.List(s.ctx, list)).To(Succeed(), "listing the workload cluster's Nodes")
	kubelets := map[string]string{}
	for _, n := range list.Items {
		kubelets[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	s.logf("the workload cluster's kubelets: %v", kubelets)
	s.g.Expect(kubelets).To(HaveLen(nodes), "the workload cluster's Nodes")
	for name, kubelet := range kubelets {
		s.g.Expect(kubelet).NotTo(Equal(vNewer), "Node %s runs kubelet %s", name, kubelet)
		s.g.Expect(kubelet).To(Equal(version), "Node %s's kubelet", name)
	}
}

// poolEvent tells whether the DockerMachinePool has an event of type and reason whose message
// names image.
func (s *scenario) poolEvent(ctx context.Context, eventType, reason, image string) (bool, string, error) {
	events := &corev1.EventList{}
	if err := s.c.Management.List(ctx, events, client.InNamespace(s.c.Namespace)); err != nil {
		return false, "", fmt.Errorf("listing the events of namespace %s: %w", s.c.Namespace, err)
	}
	var seen []string
	for _, e := range events.Items {
		if e.InvolvedObject.Kind != "DockerMachinePool" || e.InvolvedObject.Name != s.c.Pool {
			continue
		}
		if e.Type == eventType && e.Reason == reason && strings.Contains(e.Message, image) {
			s.logf("event %s %s (x%d): %s", e.Type, e.Reason, e.Count, e.Message)
			return true, "", nil
		}
		seen = append(seen, e.Type+" "+e.Reason)
	}
	return false, fmt.Sprintf("the pool's events: %v", seen), nil
}
