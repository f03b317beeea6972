package conformance

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capdmp/capdmp/internal/clusterops"
	"github.com/capdmp/capdmp/pkg/skew"
)

// violations judges a sample with the one rule of pkg/skew: each instance and each kubelet
// against the kube-apiservers. A version that cannot be read counts as a violation: a monitor
// that cannot judge must not pass.
func (s Sample) violations() []string {
	var problems []string
	for _, pool := range []struct {
		whose    string
		versions []string
	}{{"instance's ", s.Instances}, {"Node's ", s.Kubelets}} {
		violations, err := skew.Violations(pool.versions, s.APIServers)
		if err != nil {
			problems = append(problems, pool.whose+err.Error())
		}
		for _, v := range violations {
			problems = append(problems, pool.whose+v.String())
		}
	}
	return problems
}

func (s Sample) key() string {
	return fmt.Sprint(s.APIServers, s.Instances, s.Kubelets, s.Gate, s.ControlPlaneStatus)
}

// contractSource reads a Cluster through the contract: the control plane's status.versions, then
// the pool's instances.
type contractSource struct {
	cluster      Cluster
	controlPlane clusterops.ControlPlaneReader
}

func (s *contractSource) Observe(ctx context.Context) (Sample, error) {
	status, err := s.controlPlane.Read(ctx)
	if err != nil {
		return Sample{}, err
	}
	instances, err := s.cluster.Instances(ctx)
	if err != nil {
		return Sample{}, err
	}
	sample := Sample{APIServers: status.Versions, ControlPlaneStatus: status.Versions}
	for _, i := range instances {
		sample.Instances = append(sample.Instances, i.Version)
	}
	if g, ok := s.cluster.(Gated); ok {
		sample.Gate, _, _ = g.Gate(ctx)
	}
	return sample, nil
}

// sourceOf is how the kit samples c: its Observer's Source, else the contract.
func sourceOf(c Cluster) Source {
	if obs, ok := c.(Observer); ok {
		return obs.Source()
	}
	return &contractSource{cluster: c, controlPlane: clusterops.ControlPlaneReader{Cluster: c}}
}

// monitor samples a Source at an interval and judges every sample.
type monitor struct {
	src      Source
	interval time.Duration
	onChange func(Sample)
	stop     context.CancelFunc
	done     chan struct{}

	mu    sync.Mutex
	state monitorState
}

// monitorState is what a monitor saw.
type monitorState struct {
	start      time.Time
	coverage   Coverage
	violations []Violation
	// changes are the samples that differ from the one before, in order: the timeline.
	changes   []Sample
	lastError error
	// first and last sample, and the longest gap between two, measure the sampling itself.
	first, last time.Time
	longestGap  time.Duration
	gapEnd      time.Time
}

// startMonitor samples src every interval until stop; onChange, when not nil, gets each sample
// that differs from the one before.
func startMonitor(ctx context.Context, src Source, interval time.Duration, onChange func(Sample)) *monitor {
	ctx, cancel := context.WithCancel(ctx)
	m := &monitor{src: src, interval: interval, onChange: onChange, stop: cancel, done: make(chan struct{}),
		state: monitorState{start: time.Now()}}
	go m.run(ctx)
	return m
}

func (m *monitor) run(ctx context.Context) {
	defer close(m.done)
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		readCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		s, err := m.src.Observe(readCtx)
		if ctx.Err() != nil {
			return
		}
		s.At = time.Now()
		m.record(s, err)
	}, m.interval)
}

func (m *monitor) record(s Sample, err error) {
	for _, l := range [][]string{s.APIServers, s.Instances, s.Kubelets, s.ControlPlaneStatus} {
		slices.SortFunc(l, compareVersions)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &m.state
	if r.first.IsZero() {
		r.first = s.At
	} else if gap := s.At.Sub(r.last); gap > r.longestGap {
		r.longestGap, r.gapEnd = gap, s.At
	}
	r.last = s.At
	r.coverage.add(s, err)
	if err != nil {
		r.lastError = err
		return
	}
	for _, v := range s.violations() {
		r.violations = append(r.violations, Violation{At: s.At.Sub(r.start), Sample: s, Detail: v})
	}
	if len(r.changes) > 0 && r.changes[len(r.changes)-1].key() == s.key() {
		return
	}
	r.changes = append(r.changes, s)
	if m.onChange != nil {
		m.onChange(s)
	}
}

// report is what the monitor saw so far.
func (m *monitor) report() Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.state
	report := Report{
		Start: r.start, Duration: time.Since(r.start), Coverage: r.coverage, LastError: r.lastError,
		Violations: slices.Clone(r.violations), Timeline: slices.Clone(r.changes),
	}
	for _, target := range upgradeTargets(r.changes) {
		if latency, fromStatus, ok := reopenLatency(r.changes, target); ok {
			report.Latencies = append(report.Latencies, Latency{Target: target, FromAPIServers: latency, FromStatus: fromStatus})
		}
	}
	if r.coverage.Samples >= 2 {
		report.SampleInterval = r.last.Sub(r.first) / time.Duration(r.coverage.Samples-1)
		report.LongestGap, report.LongestGapEnd = r.longestGap, r.gapEnd.Sub(r.start)
	}
	return report
}

// stopAndReport stops sampling, closes the Source when it is an io.Closer, and returns what the
// monitor saw.
func (m *monitor) stopAndReport() Report {
	m.stop()
	<-m.done
	if c, ok := m.src.(io.Closer); ok {
		_ = c.Close()
	}
	return m.report()
}

// sawWhileWaiting tells whether a sample saw kube-apiservers of two versions while the pool said
// it waited for reason: the scenario exercised the window it is about.
func (m *monitor) sawWhileWaiting(reason string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.ContainsFunc(m.state.changes, func(s Sample) bool {
		return len(s.APIServers) > 1 && s.APIServers[0] != s.APIServers[len(s.APIServers)-1] && s.Gate == reason
	})
}

// upgradeTargets are the versions the pool was upgraded to: those its instances reached, newer
// than every instance of the first sample that saw one, oldest first. A version that does not
// parse is no target: it is a violation already.
func upgradeTargets(changes []Sample) []string {
	var first, targets []string
	for _, s := range changes {
		if len(s.Instances) == 0 {
			continue
		}
		if first == nil {
			first = s.Instances
			continue
		}
		for _, v := range s.Instances {
			if _, err := skew.ParseVersion(v); err != nil || slices.Contains(targets, v) ||
				slices.ContainsFunc(first, func(f string) bool { return compareVersions(f, v) >= 0 }) {
				continue
			}
			targets = append(targets, v)
		}
	}
	slices.SortFunc(targets, compareVersions)
	return targets
}

// reopenLatency is the time from the control plane's last kube-apiserver reaching target (the
// first sample after the last one in which an older kube-apiserver counted) to the first sample
// with an instance of target; fromStatus is the part of it after the control plane's
// status.versions reached target, which is what a gate reads. ok is false when either did not
// happen.
func reopenLatency(changes []Sample, target string) (latency, fromStatus time.Duration, ok bool) {
	var allAtTarget, statusAtTarget time.Time
	for i, s := range changes {
		if slices.Contains(s.Instances, target) {
			if allAtTarget.IsZero() {
				return 0, 0, false
			}
			if statusAtTarget.IsZero() {
				statusAtTarget = s.At
			}
			return s.At.Sub(allAtTarget), s.At.Sub(statusAtTarget), true
		}
		if len(s.APIServers) > 0 && compareVersions(s.APIServers[0], target) < 0 {
			allAtTarget = time.Time{}
			if i+1 < len(changes) {
				allAtTarget = changes[i+1].At
			}
		} else if allAtTarget.IsZero() && len(s.APIServers) > 0 {
			allAtTarget = s.At
		}
		if statusAtTarget.IsZero() && len(s.ControlPlaneStatus) > 0 && compareVersions(s.ControlPlaneStatus[0], target) >= 0 {
			statusAtTarget = s.At
		}
	}
	return 0, 0, false
}

func (c *Coverage) add(s Sample, err error) {
	c.Samples++
	switch apiServers, pool := len(s.APIServers) > 0, len(s.Instances) > 0; {
	case err != nil:
		c.Unknown++
	case apiServers && pool:
		c.Judged++
	case pool:
		c.NoAPIServer++
	case apiServers:
		c.NoInstance++
	default:
		c.Nothing++
	}
}

// summarize shows versions compactly, oldest first: [v1.36.3×2 v1.37.2].
func summarize(versions []string) string {
	parts := []string{}
	for i := 0; i < len(versions); {
		j := i
		for j < len(versions) && versions[j] == versions[i] {
			j++
		}
		v := versions[i]
		if v == "" {
			v = "?"
		}
		if j-i > 1 {
			v = fmt.Sprintf("%s×%d", v, j-i)
		}
		parts = append(parts, v)
		i = j
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// compareVersions orders versions for display; one that does not parse goes first.
func compareVersions(a, b string) int {
	va, _ := skew.ParseVersion(a)
	vb, _ := skew.ParseVersion(b)
	return va.Compare(vb)
}
