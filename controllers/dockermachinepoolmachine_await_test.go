package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// TestBootstrapEnds: a machine whose bootstrap runs is enqueued once the await exec in its
// container returns, whether the bootstrap ended or the await gave up at its limit (the machine
// then stops the bootstrap), one await per machine at a time, none before the manager starts:
// follow says whether an await follows the machine, and the machine polls when none does.
func TestBootstrapEnds(t *testing.T) {
	g := NewWithT(t)
	rt := fakeruntime.NewWithNodeImages()
	for _, name := range []string{"pool-ends", "pool-limit"} {
		rt.Add(container.Container{Name: name, Running: true})
	}
	release := map[string]chan container.ExecResult{
		"pool-ends":  make(chan container.ExecResult),
		"pool-limit": make(chan container.ExecResult),
	}
	rt.ExecHandler = func(c container.Container, cmd []string, _ []byte) (container.ExecResult, error) {
		if !strings.Contains(strings.Join(cmd, " "), "finished-at") {
			return container.ExecResult{}, nil
		}
		return <-release[c.Name], nil
	}
	awaits := func() int {
		n := 0
		for _, e := range rt.Execs() {
			if strings.Contains(strings.Join(e.Cmd, " "), "finished-at") {
				n++
			}
		}
		return n
	}
	machine := func(name string) *infrav1.DockerMachinePoolMachine {
		return &infrav1.DockerMachinePoolMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	}

	b := newBootstrapEnds(rt)
	g.Expect(b.follow(machine("pool-ends"), time.Minute)).To(BeFalse(), "no await before the manager starts")
	g.Consistently(awaits, 200*time.Millisecond).Should(BeZero(), "no await before the manager starts")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = b.Start(ctx) }()
	g.Eventually(func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.ctx != nil }).Should(BeTrue())

	g.Expect(b.follow(machine("pool-ends"), time.Minute)).To(BeTrue())
	g.Expect(b.follow(machine("pool-ends"), time.Minute)).To(BeTrue(), "followed already")
	g.Expect(b.follow(machine("pool-limit"), time.Minute)).To(BeTrue())
	g.Eventually(awaits).Should(Equal(2))
	g.Consistently(awaits, 200*time.Millisecond).Should(Equal(2), "one await per machine")
	g.Consistently(b.events, 200*time.Millisecond).ShouldNot(Receive(), "nothing ended yet")

	// The await command's exit code at its limit (bootstrap.ErrAwaitLimit).
	release["pool-limit"] <- container.ExecResult{ExitCode: 85}
	var ended event.TypedGenericEvent[*infrav1.DockerMachinePoolMachine]
	g.Eventually(b.events).Should(Receive(&ended), "an await that gave up enqueues its machine")
	g.Expect(client.ObjectKeyFromObject(ended.Object)).To(Equal(client.ObjectKey{Namespace: "ns", Name: "pool-limit"}))

	release["pool-ends"] <- container.ExecResult{}
	g.Eventually(b.events).Should(Receive(&ended))
	g.Expect(client.ObjectKeyFromObject(ended.Object)).To(Equal(client.ObjectKey{Namespace: "ns", Name: "pool-ends"}))

	b.follow(machine("pool-ends"), time.Minute)
	g.Eventually(awaits).Should(Equal(3), "a machine is awaited again once its await returned")
	cancel()
	release["pool-ends"] <- container.ExecResult{}
}
