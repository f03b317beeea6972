package conformance

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/pkg/skew"
)

// Sample is what a monitor read of a cluster at one moment.
type Sample struct {
	At time.Time
	// APIServers are the versions of the kube-apiservers that serve: read from the servers where
	// the Source can reach them, else the control plane's status.versions.
	APIServers []string
	// Instances are the versions of the pool's instances: the kubelet each runs or is about to.
	Instances []string
	// Kubelets are the kubeletVersions of the pool instances' Nodes.
	Kubelets []string
	// ControlPlaneStatus is the control plane's status.versions, what a gate reads; it trails the
	// kube-apiservers while an old machine goes. For the timeline and ReopenLatency.
	ControlPlaneStatus []string
	// Gate is the pool's own word on why it waits, "" when it does not or cannot say; for the
	// timeline.
	Gate string
}

// String is the sample as a timeline shows it: each kind of version summarized, the gate's word
// or "admitted".
func (s Sample) String() string {
	gate := s.Gate
	if gate == "" {
		gate = "admitted"
	}
	return fmt.Sprintf("apiservers %-24s control plane status %-16s pool instances %-24s pool kubelets %-24s gate %s",
		Summarize(s.APIServers), Summarize(s.ControlPlaneStatus), Summarize(s.Instances), Summarize(s.Kubelets), gate)
}

// Violations judges the sample with the one rule of pkg/skew: each instance and each kubelet
// against the kube-apiservers. A version that cannot be read counts as a violation: a monitor
// that cannot judge must not pass.
func (s Sample) Violations() []string {
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

// Source reads a cluster's versions for the monitor.
type Source interface {
	// Observe reads the versions as of one moment. It reads the control plane before the pool:
	// versions only rise during an upgrade, so a pool read later can only look newer, and a
	// sample errs toward counting a violation, never toward missing one. A sample it could not
	// read whole is an error: the monitor counts it Unknown.
	Observe(ctx context.Context) (Sample, error)
}

// ContractSource reads a Cluster through the contract: the control plane's status.versions, then
// the pool's instances. It resolves the control plane once: a sample then costs one read of it.
type ContractSource struct {
	cluster      Cluster
	controlPlane *unstructured.Unstructured
}

// NewContractSource returns the contract's Source for c.
func NewContractSource(c Cluster) *ContractSource { return &ContractSource{cluster: c} }

// Observe implements Source.
func (s *ContractSource) Observe(ctx context.Context) (Sample, error) {
	sample, _, err := s.ObserveInstances(ctx)
	return sample, err
}

// ObserveInstances is Observe that also returns the instances it read, for a Source that adds to
// the contract's sample what it knows of them (their Nodes, say) without listing them again.
func (s *ContractSource) ObserveInstances(ctx context.Context) (Sample, []Instance, error) {
	if s.controlPlane == nil {
		cp, err := controlPlane(ctx, s.cluster)
		if err != nil {
			return Sample{}, nil, err
		}
		s.controlPlane = cp
	}
	cp := s.controlPlane.DeepCopy()
	if err := s.cluster.Client().Get(ctx, client.ObjectKeyFromObject(cp), cp); err != nil {
		return Sample{}, nil, fmt.Errorf("reading control plane %s: %w", cp.GetName(), err)
	}
	status, err := skew.ReadControlPlane(cp)
	if err != nil {
		return Sample{}, nil, err
	}
	instances, err := s.cluster.Instances(ctx)
	if err != nil {
		return Sample{}, nil, err
	}
	sample := Sample{APIServers: status.Versions, ControlPlaneStatus: status.Versions}
	for _, i := range instances {
		sample.Instances = append(sample.Instances, i.Version)
	}
	if g, ok := s.cluster.(Gated); ok {
		sample.Gate, _, _ = g.Gate(ctx)
	}
	return sample, instances, nil
}

// Violation is a sample in which an instance or a kubelet broke the policy.
type Violation struct {
	// At is the time since the monitor started.
	At     time.Duration
	Sample Sample
	// Detail says which rule broke (skew.Violation's words), or which version could not be read.
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%6.1fs kube-apiservers %v, instances %v: %s", v.At.Seconds(), v.Sample.APIServers, v.Sample.Instances, v.Detail)
}

// Coverage counts samples by what they could judge: a sample that could not be read, or that has
// no kube-apiserver or no instance, can break no rule and proves nothing, so it is counted
// apart, never as "no violation".
type Coverage struct {
	Samples int
	// Judged samples saw a kube-apiserver's version and an instance.
	Judged int
	// Unknown samples could not be read.
	Unknown int
	// NoAPIServer samples saw instances while no kube-apiserver answered: blind.
	NoAPIServer int
	// NoInstance samples saw kube-apiservers and no instance.
	NoInstance int
	// Nothing samples saw neither, as before a cluster's first node.
	Nothing int
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

// Blind says why the samples prove nothing, "" when they do: none was judged, or no more than
// half of those that could have shown a violation were judged. A sample that saw the
// kube-apiservers and a pool with no instance is not among them: it saw everything, and no kubelet
// of the pool existed to break the rule (a slow control plane keeps a pool empty for minutes).
// Samples that saw instances but no kube-apiserver, or could not be read, are.
func (c Coverage) Blind() string {
	seen := c.Samples - c.Nothing - c.NoInstance
	switch {
	case c.Judged == 0:
		return fmt.Sprintf("the monitor judged none of its %d samples: it never saw a kube-apiserver's version and an instance at once", c.Samples)
	case c.Judged*2 <= seen:
		return fmt.Sprintf("the monitor judged %d of the %d samples that could show a violation (an instance, or unreadable): not most", c.Judged, seen)
	}
	return ""
}

func (c Coverage) String() string {
	return fmt.Sprintf("%d samples: %d judged, %d unreadable, %d with instances and no kube-apiserver, %d with no instance, %d with neither",
		c.Samples, c.Judged, c.Unknown, c.NoAPIServer, c.NoInstance, c.Nothing)
}

// Monitor samples a Source at an interval and judges every sample.
type Monitor struct {
	src      Source
	interval time.Duration
	onChange func(Sample)
	stop     context.CancelFunc
	done     chan struct{}

	mu     sync.Mutex
	report MonitorReport
}

// MonitorReport is what a monitor saw.
type MonitorReport struct {
	Start    time.Time
	Coverage Coverage
	// Violations in the order seen.
	Violations []Violation
	// Changes are the samples that differ from the one before, in order: the timeline.
	Changes []Sample
	// LastError is the last reason a sample could not be read.
	LastError error
	// first and last sample, and the longest gap between two, measure the sampling itself.
	first, last time.Time
	longestGap  time.Duration
	gapEnd      time.Time
}

// StartMonitor samples src every interval until Stop; onChange, when not nil, gets each sample
// that differs from the one before.
func StartMonitor(ctx context.Context, src Source, interval time.Duration, onChange func(Sample)) *Monitor {
	ctx, cancel := context.WithCancel(ctx)
	m := &Monitor{src: src, interval: interval, onChange: onChange, stop: cancel, done: make(chan struct{}),
		report: MonitorReport{Start: time.Now()}}
	go m.run(ctx)
	return m
}

func (m *Monitor) run(ctx context.Context) {
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

func (m *Monitor) record(s Sample, err error) {
	for _, l := range [][]string{s.APIServers, s.Instances, s.Kubelets, s.ControlPlaneStatus} {
		slices.SortFunc(l, compareVersions)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &m.report
	if r.first.IsZero() {
		r.first = s.At
	} else if gap := s.At.Sub(r.last); gap > r.longestGap {
		r.longestGap, r.gapEnd = gap, s.At
	}
	r.last = s.At
	r.Coverage.add(s, err)
	if err != nil {
		r.LastError = err
		return
	}
	for _, v := range s.Violations() {
		r.Violations = append(r.Violations, Violation{At: s.At.Sub(r.Start), Sample: s, Detail: v})
	}
	if len(r.Changes) > 0 && r.Changes[len(r.Changes)-1].key() == s.key() {
		return
	}
	r.Changes = append(r.Changes, s)
	if m.onChange != nil {
		m.onChange(s)
	}
}

// Report is what the monitor saw so far.
func (m *Monitor) Report() MonitorReport {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.report
	r.Violations, r.Changes = slices.Clone(r.Violations), slices.Clone(r.Changes)
	return r
}

// Stop stops sampling, closes the Source when it is an io.Closer, and returns what the monitor
// saw.
func (m *Monitor) Stop() MonitorReport {
	m.stop()
	<-m.done
	if c, ok := m.src.(io.Closer); ok {
		_ = c.Close()
	}
	return m.Report()
}

// Interval is the mean time between samples, the longest gap between two of them and when,
// since the monitor's start, that gap ended.
func (r MonitorReport) Interval() (mean, longestGap, gapEnd time.Duration) {
	if r.Coverage.Samples < 2 {
		return 0, 0, 0
	}
	return r.last.Sub(r.first) / time.Duration(r.Coverage.Samples-1), r.longestGap, r.gapEnd.Sub(r.Start)
}

// SawWhileWaiting tells whether a sample saw kube-apiservers of two versions while the pool said
// it waited for reason: the scenario exercised the window it is about.
func (r MonitorReport) SawWhileWaiting(reason string) bool {
	return slices.ContainsFunc(r.Changes, func(s Sample) bool {
		return len(s.APIServers) > 1 && s.APIServers[0] != s.APIServers[len(s.APIServers)-1] && s.Gate == reason
	})
}

// ReopenLatency is the time from the control plane's last kube-apiserver reaching target (the
// first sample after the last one in which an older kube-apiserver counted) to the first sample
// with an instance of target; fromStatus is the part of it after the control plane's
// status.versions reached target, which is what a gate reads. ok is false when either did not
// happen.
func (r MonitorReport) ReopenLatency(target string) (latency, fromStatus time.Duration, ok bool) {
	var allAtTarget, statusAtTarget time.Time
	for i, s := range r.Changes {
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
			if i+1 < len(r.Changes) {
				allAtTarget = r.Changes[i+1].At
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

// Latencies are the gate's re-open latencies to each target that the monitor saw reached.
func (r MonitorReport) Latencies(targets ...string) []Latency {
	var latencies []Latency
	for _, target := range targets {
		if latency, fromStatus, ok := r.ReopenLatency(target); ok {
			latencies = append(latencies, Latency{Target: target, FromAPIServers: latency, FromStatus: fromStatus})
		}
	}
	return latencies
}

// Summarize shows versions compactly, oldest first: [v1.36.3×2 v1.37.2].
func Summarize(versions []string) string {
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
