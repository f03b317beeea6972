package framework

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container"
)

func TestAPIServerVersions(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	// answers is what each address answers; "" for no answer.
	var mu sync.Mutex
	answers := map[string]string{}
	asked := map[string]int{}
	answer := func(ip, v string) {
		mu.Lock()
		defer mu.Unlock()
		answers[ip] = v
	}
	timesAsked := func(ip string) int {
		mu.Lock()
		defer mu.Unlock()
		return asked[ip]
	}
	a := &apiServerVersions{interval: 5 * time.Millisecond, wg: &wg, pollers: map[string]*apiServerPoller{},
		ask: func(_ context.Context, ip string) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			asked[ip]++
			if answers[ip] == "" {
				return "", errors.New("connection refused")
			}
			return answers[ip], nil
		}}
	versions := func() []string {
		v := a.versions()
		slices.Sort(v)
		return v
	}
	old := container.Container{ID: "old", Running: true, IPv4: "10.0.0.1"}
	booting := container.Container{ID: "new", Running: true, IPv4: "10.0.0.2"}

	answer(old.IPv4, "v1.36.3")
	a.track(ctx, []container.Container{old, booting})
	g.Eventually(versions).Should(Equal([]string{"v1.36.3"}), "a kube-apiserver counts from its first answer; one that never answered does not")

	answer(old.IPv4, "")
	answer(booting.IPv4, "v1.37.2")
	g.Eventually(versions).Should(Equal([]string{"v1.36.3", "v1.37.2"}))
	asks := timesAsked(old.IPv4)
	g.Eventually(func() int { return timesAsked(old.IPv4) }).Should(BeNumerically(">", asks+3))
	g.Expect(versions()).To(Equal([]string{"v1.36.3", "v1.37.2"}), "an old kube-apiserver that stopped answering still counts while its container runs")

	stopped := old
	stopped.Running = false
	a.track(ctx, []container.Container{stopped, booting})
	g.Expect(versions()).To(Equal([]string{"v1.37.2"}), "a stopped container's kube-apiserver no longer counts")
	asks = timesAsked(old.IPv4)
	g.Consistently(func() int { return timesAsked(old.IPv4) }, 50*time.Millisecond).Should(BeNumerically("<=", asks+1), "nor is it asked")

	moved := booting
	moved.IPv4 = "10.0.0.3"
	a.track(ctx, []container.Container{moved})
	g.Expect(versions()).To(BeEmpty(), "a container restarted at another address is asked again there")
	answer(moved.IPv4, "v1.37.2")
	g.Eventually(versions).Should(Equal([]string{"v1.37.2"}))

	a.track(ctx, nil)
	g.Expect(versions()).To(BeEmpty(), "a removed container's kube-apiserver no longer counts")
	g.Expect(a.pollers).To(BeEmpty())
}
