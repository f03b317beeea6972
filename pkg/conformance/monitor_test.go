package conformance

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestSampleViolations(t *testing.T) {
	tests := []struct {
		name   string
		sample Sample
		want   []string
	}{
		{name: "no kube-apiserver: nothing to compare", sample: Sample{Instances: []string{"v1.37.2"}}},
		{name: "same minor, newer patch: the gate's rule, stricter than the policy", sample: Sample{APIServers: []string{"v1.36.1"}, Kubelets: []string{"v1.36.3"}},
			want: []string{"Node's kubelet v1.36.3 newer than kube-apiserver v1.36.1"}},
		{name: "instance at the oldest kube-apiserver's version", sample: Sample{APIServers: []string{"v1.36.3", "v1.37.2"}, Instances: []string{"v1.36.3"}}},
		{name: "instance newer than the oldest kube-apiserver", sample: Sample{APIServers: []string{"v1.36.3", "v1.37.2"}, Instances: []string{"v1.37.2"}},
			want: []string{"instance's kubelet v1.37.2 newer than kube-apiserver v1.36.3"}},
		{name: "three minors older: allowed", sample: Sample{APIServers: []string{"v1.37.2"}, Kubelets: []string{"v1.34.0"}}},
		{name: "four minors older", sample: Sample{APIServers: []string{"v1.37.2"}, Kubelets: []string{"v1.33.9"}},
			want: []string{"Node's kubelet v1.33.9 more than 3 minors older than kube-apiserver v1.37.2"}},
		{name: "a version that cannot be read counts", sample: Sample{APIServers: []string{"v1.37.2"}, Instances: []string{"latest"}},
			want: []string{`instance's kubelet version: "latest" is not a Kubernetes version`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := tt.sample.violations()
			g.Expect(got).To(HaveLen(len(tt.want)), "%v", got)
			for i := range tt.want {
				g.Expect(got[i]).To(ContainSubstring(tt.want[i]))
			}
		})
	}
}

func TestSampleString(t *testing.T) {
	tests := []struct {
		name   string
		sample Sample
		want   []string
	}{
		{name: "pool waiting", sample: Sample{APIServers: []string{"v1.36.3"}, ControlPlaneStatus: []string{"v1.36.3"},
			Instances: []string{"v1.36.3", "v1.36.3"}, Kubelets: []string{"v1.36.3"}, Gate: "ControlPlaneOlder"},
			want: []string{"apiservers [v1.36.3]", "control plane status [v1.36.3]", "pool instances [v1.36.3×2]", "pool kubelets [v1.36.3]", "gate ControlPlaneOlder"}},
		{name: "no gate word: admitted", sample: Sample{},
			want: []string{"apiservers []", "pool instances []", "gate admitted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			for _, part := range tt.want {
				g.Expect(tt.sample.String()).To(ContainSubstring(part))
			}
		})
	}
}

func TestCoverage(t *testing.T) {
	judged := Sample{APIServers: []string{"v1.36.3"}, Instances: []string{"v1.36.3"}}
	blind := Sample{Instances: []string{"v1.36.3"}}
	noInstance := Sample{APIServers: []string{"v1.36.3"}}
	nothing := Sample{}
	unreadable := errors.New("connection refused")
	type read struct {
		s   Sample
		err error
	}
	tests := []struct {
		name      string
		reads     []read
		want      Coverage
		wantBlind string
	}{
		{name: "no sample", wantBlind: "judged none of its 0 samples"},
		{name: "never reached a kube-apiserver", reads: []read{{s: nothing}, {s: blind}, {s: blind}, {s: blind}},
			want: Coverage{Samples: 4, NoAPIServer: 3, Nothing: 1}, wantBlind: "judged none of its 4 samples"},
		{name: "could read nothing", reads: []read{{err: unreadable}, {s: judged, err: unreadable}},
			want: Coverage{Samples: 2, Unknown: 2}, wantBlind: "judged none of its 2 samples"},
		{name: "judged half of what could show a violation", reads: []read{{s: nothing}, {s: judged}, {s: blind}, {s: blind}, {s: noInstance}, {s: judged}},
			want: Coverage{Samples: 6, Judged: 2, NoAPIServer: 2, NoInstance: 1, Nothing: 1}, wantBlind: "judged 2 of the 4 samples"},
		{name: "a pool empty for long while the control plane comes up is no blindness", reads: []read{{s: nothing}, {s: noInstance}, {s: noInstance}, {s: noInstance}, {s: noInstance}, {s: judged}, {s: judged}, {s: blind}},
			want: Coverage{Samples: 8, Judged: 2, NoAPIServer: 1, NoInstance: 4, Nothing: 1}},
		{name: "a pool never seen with an instance judges nothing", reads: []read{{s: noInstance}, {s: noInstance}},
			want: Coverage{Samples: 2, NoInstance: 2}, wantBlind: "judged none of its 2 samples"},
		{name: "unreadable samples count against it", reads: []read{{s: judged}, {err: unreadable}, {err: unreadable}},
			want: Coverage{Samples: 3, Judged: 1, Unknown: 2}, wantBlind: "judged 1 of the 3 samples"},
		{name: "judged most once the cluster showed a node", reads: []read{{s: nothing}, {s: nothing}, {s: noInstance}, {s: judged}, {s: judged}, {s: blind}, {s: judged}},
			want: Coverage{Samples: 7, Judged: 3, NoAPIServer: 1, NoInstance: 1, Nothing: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var c Coverage
			for _, r := range tt.reads {
				c.add(r.s, r.err)
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
	old, target := []string{"v1.36.3"}, []string{"v1.37.2"}
	tests := []struct {
		name           string
		changes        []Sample
		wantLatency    time.Duration
		wantFromStatus time.Duration
		wantOK         bool
	}{
		{
			name: "old kube-apiserver gone, the status follows, then the first new instance",
			changes: []Sample{
				{At: at(0), APIServers: old, Instances: old, ControlPlaneStatus: old},
				{At: at(10), APIServers: []string{"v1.36.3", "v1.37.2"}, Instances: old, ControlPlaneStatus: old},
				{At: at(20), APIServers: target, Instances: old, ControlPlaneStatus: old},
				{At: at(25), APIServers: target, Instances: old, ControlPlaneStatus: target},
				{At: at(26), APIServers: target, Instances: []string{"v1.36.3", "v1.37.2"}, ControlPlaneStatus: target},
			},
			wantLatency: 6 * time.Second, wantFromStatus: time.Second, wantOK: true,
		},
		{
			name: "an old kube-apiserver that missed samples while busy does not count as gone",
			changes: []Sample{
				{At: at(0), APIServers: []string{"v1.36.3", "v1.37.2"}, ControlPlaneStatus: old},
				{At: at(5), APIServers: target, ControlPlaneStatus: old},
				{At: at(6), APIServers: []string{"v1.36.3", "v1.37.2"}, ControlPlaneStatus: old},
				{At: at(30), APIServers: target, ControlPlaneStatus: old},
				{At: at(31), APIServers: []string{}, ControlPlaneStatus: target},
				{At: at(33), APIServers: target, Instances: target, ControlPlaneStatus: target},
			},
			wantLatency: 3 * time.Second, wantFromStatus: 2 * time.Second, wantOK: true,
		},
		{name: "no new instance yet", changes: []Sample{{At: at(0), APIServers: target, Instances: old}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			latency, fromStatus, ok := reopenLatency(tt.changes, "v1.37.2")
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
			m := &monitor{state: monitorState{start: start}}
			for _, ms := range tt.offsetsMS {
				m.record(Sample{At: start.Add(time.Duration(ms) * time.Millisecond)}, nil)
			}
			r := m.report()
			g.Expect(r.SampleInterval).To(Equal(tt.wantMean))
			g.Expect(r.LongestGap).To(Equal(tt.wantLongest))
			g.Expect(r.LongestGapEnd).To(Equal(tt.wantEnd))
		})
	}
}
