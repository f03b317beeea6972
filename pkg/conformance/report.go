package conformance

import (
	"context"
	"fmt"
	"time"
)

// Report is what the monitor saw of a cluster during a scenario's run or a Watch. A conformant
// pool has no Violations in a Report whose Coverage is not Blind.
type Report struct {
	// Scenario is the scenario's name; "" for a Watch.
	Scenario string
	// Start is when the monitor's first sample was due; Duration is how long it sampled.
	Start    time.Time
	Duration time.Duration
	// Violations are the violations of the skew policy in the order seen: one per instance or
	// kubelet and sample, so a kubelet too new for a second gives as many as the samples of it.
	Violations []Violation
	// Coverage counts the samples by what they could judge.
	Coverage Coverage
	// Timeline is each sample that differs from the one before, in order (Options.OnChange gets
	// them as they come).
	Timeline []Sample
	// LastError is the last reason a sample could not be read.
	LastError error
	// Latencies are the gate's re-open latencies to each version the pool's instances were
	// upgraded to, oldest first; a version the pool reached before the control plane (no gate)
	// has none.
	Latencies []Latency
	// SampleInterval is the mean time between two samples; LongestGap is the longest, which ended
	// LongestGapEnd after Start: a stretch the monitor did not see.
	SampleInterval, LongestGap, LongestGapEnd time.Duration
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

// Latency is how long a gated pool took to make its first instance of Target once the control
// plane ran it: FromAPIServers since the last older kube-apiserver went, as the samples saw it,
// and FromStatus since the control plane's status.versions said Target, which is what a gate
// reads.
type Latency struct {
	Target                     string
	FromAPIServers, FromStatus time.Duration
}

// Watcher is a Watch under way.
type Watcher struct{ m *monitor }

// Watch samples c as a scenario's run does (its Observer's Source, else the contract) every
// o.Interval, handing o.OnChange the timeline, until Stop; it reads no other Options. It judges
// by the scenarios' rule what a provider's own tests do to a cluster: an upgrade of their own, a
// scale-up, a fault.
func Watch(ctx context.Context, c Cluster, o Options) *Watcher {
	return &Watcher{m: startMonitor(ctx, sourceOf(c), o.interval(), o.OnChange)}
}

// Report is what the watcher saw so far.
func (w *Watcher) Report() Report { return w.m.report() }

// Stop stops sampling, closes the Source when it is an io.Closer, and returns what the watcher
// saw.
func (w *Watcher) Stop() Report { return w.m.stopAndReport() }
