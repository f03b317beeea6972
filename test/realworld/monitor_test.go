package realworld

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/skew"
)

func TestViolation(t *testing.T) {
	tests := []struct {
		name   string
		sample Sample
		want   string
	}{
		{name: "no kube-apiserver answers: nothing to compare", sample: Sample{PoolContainers: []string{"v1.37.2"}}},
		{name: "same minor, newer patch: the gate's rule, stricter than the policy", sample: Sample{APIServers: []string{"v1.36.1"}, PoolKubelets: []string{"v1.36.3"}},
			want: "pool kubelet v1.36.3 newer than kube-apiserver v1.36.1"},
		{name: "pool at the oldest apiserver's minor", sample: Sample{APIServers: []string{"v1.36.3", "v1.37.2"}, PoolContainers: []string{"v1.36.3"}}},
		{name: "container newer than the oldest apiserver", sample: Sample{APIServers: []string{"v1.36.3", "v1.37.2"}, PoolContainers: []string{"v1.37.2"}},
			want: "pool container's kubelet v1.37.2 newer than kube-apiserver v1.36.3"},
		{name: "kubelet newer", sample: Sample{APIServers: []string{"v1.36.3"}, PoolKubelets: []string{"v1.37.0"}},
			want: "pool kubelet v1.37.0 newer than kube-apiserver v1.36.3"},
		{name: "three minors older: allowed", sample: Sample{APIServers: []string{"v1.37.2"}, PoolKubelets: []string{"v1.34.0"}}},
		{name: "four minors older", sample: Sample{APIServers: []string{"v1.37.2"}, PoolKubelets: []string{"v1.33.9"}},
			want: "pool kubelet v1.33.9 more than 3 minors older than kube-apiserver v1.37.2"},
		{name: "a container label that is no version counts", sample: Sample{APIServers: []string{"v1.37.2"}, PoolContainers: []string{"latest"}},
			want: `pool container's version label "latest": ` + labelError("latest")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(tt.sample.Violation()).To(Equal(tt.want))
		})
	}
}

func TestCoverage(t *testing.T) {
	judged := Sample{APIServers: []string{"v1.36.3"}, PoolContainers: []string{"v1.36.3"}}
	blind := Sample{PoolContainers: []string{"v1.36.3"}}
	noPool := Sample{APIServers: []string{"v1.36.3"}}
	nothing := Sample{}
	tests := []struct {
		name      string
		samples   []Sample
		want      Coverage
		wantBlind string
	}{
		{name: "no sample", wantBlind: "judged none of its 0 samples"},
		{name: "never reached a kube-apiserver", samples: []Sample{nothing, blind, blind, blind},
			want: Coverage{Samples: 4, NoAPIServer: 3, Nothing: 1}, wantBlind: "judged none of its 4 samples"},
		{name: "saw nothing at all", samples: []Sample{nothing, nothing},
			want: Coverage{Samples: 2, Nothing: 2}, wantBlind: "judged none of its 2 samples"},
		{name: "judged half of what it saw", samples: []Sample{nothing, judged, blind, noPool, judged},
			want: Coverage{Samples: 5, Judged: 2, NoAPIServer: 1, NoPoolNode: 1, Nothing: 1}, wantBlind: "judged 2 of the 4 samples"},
		{name: "judged most once the cluster showed a node", samples: []Sample{nothing, nothing, nothing, noPool, judged, judged, blind, judged},
			want: Coverage{Samples: 8, Judged: 3, NoAPIServer: 1, NoPoolNode: 1, Nothing: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var c Coverage
			for _, s := range tt.samples {
				c.Add(s)
			}
			g.Expect(c).To(Equal(tt.want))
			if tt.wantBlind == "" {
				g.Expect(c.Blind()).To(BeEmpty())
			} else {
				g.Expect(c.Blind()).To(ContainSubstring(tt.wantBlind))
			}
		})
	}
}

func TestReopenLatency(t *testing.T) {
	start := time.Now()
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		name           string
		changes        []Sample
		wantLatency    time.Duration
		wantFromStatus time.Duration
		wantOK         bool
	}{
		{
			name: "old apiserver gone, KCP status follows, then the first new container",
			changes: []Sample{
				{At: at(0), APIServers: []string{"v1.36.3"}, PoolContainers: []string{"v1.36.3"}, ControlPlaneStatus: "v1.36.3"},
				{At: at(10), APIServers: []string{"v1.36.3", "v1.37.2"}, PoolContainers: []string{"v1.36.3"}, ControlPlaneStatus: "v1.36.3"},
				{At: at(20), APIServers: []string{"v1.37.2"}, PoolContainers: []string{"v1.36.3"}, ControlPlaneStatus: "v1.36.3"},
				{At: at(25), APIServers: []string{"v1.37.2"}, PoolContainers: []string{"v1.36.3"}, ControlPlaneStatus: "v1.37.2"},
				{At: at(26), APIServers: []string{"v1.37.2"}, PoolContainers: []string{"v1.36.3", "v1.37.2"}, ControlPlaneStatus: "v1.37.2"},
			},
			wantLatency: 6 * time.Second, wantFromStatus: time.Second, wantOK: true,
		},
		{
			name: "an old apiserver that missed samples while busy does not count as gone",
			changes: []Sample{
				{At: at(0), APIServers: []string{"v1.36.3", "v1.37.2"}, ControlPlaneStatus: "v1.36.3"},
				{At: at(5), APIServers: []string{"v1.37.2"}, ControlPlaneStatus: "v1.36.3"},
				{At: at(6), APIServers: []string{"v1.36.3", "v1.37.2"}, ControlPlaneStatus: "v1.36.3"},
				{At: at(30), APIServers: []string{"v1.37.2"}, ControlPlaneStatus: "v1.36.3"},
				{At: at(31), APIServers: []string{}, ControlPlaneStatus: "v1.37.2"},
				{At: at(33), APIServers: []string{"v1.37.2"}, PoolContainers: []string{"v1.37.2"}, ControlPlaneStatus: "v1.37.2"},
			},
			wantLatency: 3 * time.Second, wantFromStatus: 2 * time.Second, wantOK: true,
		},
		{
			name: "no new container yet",
			changes: []Sample{
				{At: at(0), APIServers: []string{"v1.37.2"}, PoolContainers: []string{"v1.36.3"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			m := &Monitor{changes: tt.changes}
			latency, fromStatus, ok := m.ReopenLatency("v1.37.2")
			g.Expect(ok).To(Equal(tt.wantOK))
			g.Expect(latency).To(Equal(tt.wantLatency))
			g.Expect(fromStatus).To(Equal(tt.wantFromStatus))
		})
	}
}

func TestInterval(t *testing.T) {
	start := time.Now()
	tests := []struct {
		name        string
		offsetsMS   []int
		wantMean    time.Duration
		wantLongest time.Duration
		wantEnd     time.Duration
	}{
		{name: "no sample"},
		{name: "one sample: no interval yet", offsetsMS: []int{0}},
		{name: "steady", offsetsMS: []int{0, 100, 200, 300}, wantMean: 100 * time.Millisecond, wantLongest: 100 * time.Millisecond, wantEnd: 100 * time.Millisecond},
		{name: "one slow sample shows as the longest gap", offsetsMS: []int{0, 100, 700, 800}, wantMean: 266666666 * time.Nanosecond, wantLongest: 600 * time.Millisecond, wantEnd: 700 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			m := &Monitor{start: start}
			for _, ms := range tt.offsetsMS {
				m.record(Sample{At: start.Add(time.Duration(ms) * time.Millisecond)})
			}
			mean, longest, end := m.Interval()
			g.Expect(mean).To(Equal(tt.wantMean))
			g.Expect(longest).To(Equal(tt.wantLongest))
			g.Expect(end).To(Equal(tt.wantEnd))
		})
	}
}

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

func labelError(label string) string {
	_, err := skew.VersionFromLabelValue(label)
	return err.Error()
}
