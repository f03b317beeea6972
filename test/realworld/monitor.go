package realworld

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/blang/semver/v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
)

// Sample is what the monitor saw at one instant.
type Sample struct {
	At time.Time
	// APIServers are the versions the control-plane nodes' kube-apiservers answer on /version,
	// asked one by one at their own addresses (not through the load balancer).
	APIServers []string
	// PoolContainers are the version labels of the pool's containers: the kubelet each one runs
	// or is about to run.
	PoolContainers []string
	// PoolKubelets are the kubeletVersions of the pool containers' Nodes.
	PoolKubelets []string
	// Gate is the DockerMachinePool's waiting reason, "" when the gate admits its target.
	Gate string
	// ControlPlaneStatus is the KubeadmControlPlane's status.versions, oldest first: what the
	// gate reads; it trails the kube-apiservers while KCP removes an old machine.
	ControlPlaneStatus string
}

func (s Sample) key() string {
	return fmt.Sprint(s.APIServers, s.PoolContainers, s.PoolKubelets, s.Gate, s.ControlPlaneStatus)
}

// Violation is a sample that breaks the version skew policy for a pool kubelet.
type Violation struct {
	At     time.Time
	Detail string
}

// Monitor samples a cluster's versions and records every violation of the skew policy: a pool
// kubelet (or a pool container, which will run one) newer than the oldest kube-apiserver that
// answers, or more than three minors older than the newest.
type Monitor struct {
	c        *Cluster
	interval time.Duration
	out      io.Writer
	start    time.Time
	engine   *container.Docker

	mu         sync.Mutex
	samples    int
	changes    []Sample
	violations []Violation
	stop       context.CancelFunc
	done       chan struct{}

	workload   client.Client
	httpClient *http.Client
}

// StartMonitor starts sampling every interval; each change is printed to out as a timeline line
// stamped with the time since start.
func (c *Cluster) StartMonitor(ctx context.Context, start time.Time, interval time.Duration, out io.Writer) (*Monitor, error) {
	engine, err := container.NewDocker()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	m := &Monitor{c: c, interval: interval, out: out, start: start, engine: engine, stop: cancel, done: make(chan struct{})}
	go m.run(ctx)
	return m, nil
}

func (m *Monitor) run(ctx context.Context) {
	defer close(m.done)
	ticker := time.NewTicker(m.interval)
	defer ticker.Stop()
	for {
		m.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (m *Monitor) sampleOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s := Sample{At: time.Now()}
	nodes, err := m.engine.List(ctx, map[string]string{"io.x-k8s.kind.cluster": m.c.Name})
	if err != nil {
		return
	}
	var controlPlane []container.Container
	poolNames := map[string]bool{}
	for _, n := range nodes {
		switch {
		case n.Labels["io.x-k8s.kind.role"] == "control-plane":
			controlPlane = append(controlPlane, n)
		case n.Labels[infrav1.PoolNameLabel] == m.c.Pool:
			s.PoolContainers = append(s.PoolContainers, n.Labels[infrav1.KubernetesVersionLabel])
			poolNames[n.Name] = true
		}
	}
	m.connect(ctx)
	if m.httpClient != nil {
		s.APIServers = m.apiServerVersions(ctx, controlPlane)
	}
	if m.workload != nil && len(poolNames) > 0 {
		nodeList := &corev1.NodeList{}
		if err := m.workload.List(ctx, nodeList); err == nil {
			for _, n := range nodeList.Items {
				if poolNames[n.Name] {
					s.PoolKubelets = append(s.PoolKubelets, n.Status.NodeInfo.KubeletVersion)
				}
			}
		}
	}
	if pool, err := m.c.DockerMachinePool(ctx); err == nil {
		s.Gate = pool.Status.VersionGate.WaitingReason
	}
	if kcp, err := m.c.ControlPlaneStatus(ctx); err == nil {
		s.ControlPlaneStatus = StatusVersions(kcp)
	}
	for _, l := range [][]string{s.APIServers, s.PoolContainers, s.PoolKubelets} {
		slices.SortFunc(l, compareVersions)
	}
	m.record(s)
}

// connect makes the workload clients once the workload kubeconfig exists.
func (m *Monitor) connect(ctx context.Context) {
	if m.workload != nil {
		return
	}
	cfg, err := m.c.WorkloadConfig(ctx)
	if err != nil {
		return
	}
	cfg.Timeout = 2 * time.Second
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return
	}
	workload, err := client.New(cfg, client.Options{})
	if err != nil {
		return
	}
	m.httpClient, m.workload = httpClient, workload
}

// apiServerVersions asks each control-plane node's kube-apiserver for its version at the node's
// own address; a server that does not answer (booting, stopping) is not counted.
func (m *Monitor) apiServerVersions(ctx context.Context, controlPlane []container.Container) []string {
	var mu sync.Mutex
	var wg sync.WaitGroup
	versions := []string{}
	for _, n := range controlPlane {
		if !n.Running || n.IPv4 == "" {
			continue
		}
		wg.Add(1)
		go func(ip string) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+ip+":6443/version", http.NoBody)
			if err != nil {
				return
			}
			resp, err := m.httpClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return
			}
			info := version.Info{}
			if err := decodeJSON(resp.Body, &info); err != nil {
				return
			}
			mu.Lock()
			versions = append(versions, info.GitVersion)
			mu.Unlock()
		}(n.IPv4)
	}
	wg.Wait()
	return versions
}

func (m *Monitor) record(s Sample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples++
	if v := violation(s); v != "" {
		m.violations = append(m.violations, Violation{At: s.At, Detail: v})
	}
	if len(m.changes) > 0 && m.changes[len(m.changes)-1].key() == s.key() {
		return
	}
	m.changes = append(m.changes, s)
	if m.out != nil {
		fmt.Fprintln(m.out, m.line(s))
	}
}

func (m *Monitor) line(s Sample) string {
	gate := s.Gate
	if gate == "" {
		gate = "admitted"
	}
	return fmt.Sprintf("  %7.1fs  apiservers %-24s KCP status %-16s pool containers %-24s pool kubelets %-24s gate %s",
		s.At.Sub(m.start).Seconds(), summarize(s.APIServers), s.ControlPlaneStatus, summarize(s.PoolContainers), summarize(s.PoolKubelets), gate)
}

// violation checks a sample against the skew policy, by minor version as the policy states it.
func violation(s Sample) string {
	if len(s.APIServers) == 0 {
		return ""
	}
	oldest, newest := parse(s.APIServers[0]), parse(s.APIServers[len(s.APIServers)-1])
	var problems []string
	for what, versions := range map[string][]string{"container": s.PoolContainers, "kubelet": s.PoolKubelets} {
		for _, v := range versions {
			k := parse(v)
			if minorOf(k) > minorOf(oldest) {
				problems = append(problems, fmt.Sprintf("pool %s %s newer than kube-apiserver %s", what, v, s.APIServers[0]))
			}
			if minorOf(k)+3 < minorOf(newest) {
				problems = append(problems, fmt.Sprintf("pool %s %s more than three minors older than kube-apiserver %s", what, v, s.APIServers[len(s.APIServers)-1]))
			}
		}
	}
	slices.Sort(problems)
	return strings.Join(problems, "; ")
}

// Stop stops sampling.
func (m *Monitor) Stop() {
	m.stop()
	<-m.done
}

// Samples is how many samples were taken.
func (m *Monitor) Samples() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.samples
}

// Violations are the samples that broke the policy.
func (m *Monitor) Violations() []Violation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.violations)
}

// Changes are the samples where something changed, in order.
func (m *Monitor) Changes() []Sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.changes)
}

// ReopenLatency is the time from the control plane's last kube-apiserver reaching target (the
// first sample after the last one in which an older kube-apiserver answered, so that one that
// missed a sample while busy does not count as gone) to the first sample with a pool container
// of target; fromStatus is the part of it after the KubeadmControlPlane's status.version reached
// target, which is what the gate reads. ok is false when either did not happen.
func (m *Monitor) ReopenLatency(target string) (latency, fromStatus time.Duration, ok bool) {
	var allAtTarget, statusAtTarget time.Time
	changes := m.Changes()
	for i, s := range changes {
		if slices.Contains(s.PoolContainers, target) {
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
		if oldest, _, _ := strings.Cut(s.ControlPlaneStatus, ","); statusAtTarget.IsZero() && oldest != "-" && oldest != "" && compareVersions(oldest, target) >= 0 {
			statusAtTarget = s.At
		}
	}
	return 0, 0, false
}

func summarize(versions []string) string {
	if len(versions) == 0 {
		return "[]"
	}
	var parts []string
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

func parse(v string) semver.Version {
	s, err := semver.ParseTolerant(v)
	if err != nil {
		return semver.Version{}
	}
	return s
}

func minorOf(v semver.Version) uint64 { return v.Major*1000 + v.Minor }

func compareVersions(a, b string) int { return parse(a).Compare(parse(b)) }

func decodeJSON(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }
