package framework

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/container/containertest"
)

func TestContainerView(t *testing.T) {
	engine := containertest.Engine(t)
	containertest.EnsureBusyboxImage(t, engine)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cluster := "capdmp-view-" + hex.EncodeToString(b)
	spec := func(name string) container.Spec {
		s := container.NodeSpec(container.NodeSpecInput{Name: cluster + "-" + name, Image: containertest.BusyboxImage, ClusterName: cluster, Network: "bridge"})
		s.Mounts = nil
		s.Cmd = []string{"/bin/sleep", "3600"}
		return s
	}
	t.Cleanup(func() {
		if cs, err := engine.List(context.Background(), map[string]string{"io.x-k8s.kind.cluster": cluster}); err == nil {
			for _, c := range cs {
				_ = engine.Delete(context.Background(), c.Name)
			}
		}
	})
	names := func(v *containerView) func() []string {
		return func() []string {
			cs, _ := v.containers()
			out := []string{}
			for _, c := range cs {
				out = append(out, c.Name)
			}
			return out
		}
	}

	before, err := engine.Create(ctx, spec("before"))
	g.Expect(err).ToNot(HaveOccurred())
	v := newContainerView(engine, map[string]string{"io.x-k8s.kind.cluster": cluster})
	done := make(chan struct{})
	go func() { defer close(done); v.run(ctx, 10*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	g.Eventually(func() bool { _, ok := v.containers(); return ok }).Should(BeTrue())
	g.Expect(names(v)()).To(Equal([]string{before.Name}), "the first list")

	after, err := engine.Create(ctx, spec("after"))
	g.Expect(err).ToNot(HaveOccurred())
	g.Eventually(names(v), 5*time.Second, time.Millisecond).Should(Equal([]string{after.Name, before.Name}), "a container created later, from the events")
	g.Eventually(func(g Gomega) {
		cs, _ := v.containers()
		g.Expect(cs[0].Running).To(BeTrue(), "its start, a later event")
		g.Expect(cs[0].IPv4).ToNot(BeEmpty())
	}, 5*time.Second, time.Millisecond).Should(Succeed())
	g.Expect(v.lag()).To(And(BeNumerically(">", 0), BeNumerically("<", 5*time.Second)))
	t.Logf("a new container reached the view %s after the engine's event", v.lag())

	g.Expect(engine.Delete(ctx, before.Name)).To(Succeed())
	g.Eventually(names(v), 5*time.Second, time.Millisecond).Should(Equal([]string{after.Name}), "a removed container leaves the view")
}
