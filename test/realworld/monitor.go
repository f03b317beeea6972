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
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/skew"
)

// Sample is what the monitor saw at one instant.
type Sample struct {
	At time.Time
	// APIServers are the versions the control-plane nodes' kube-apiservers answer on /version,
	// each asked at its node's own address (not through the load balancer) and counted from its
	// first answer until its container stops or goes.
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
// serves, or more than three minors older than the newest. A sample reads only memory, kept
// current by watches (the engine's events, the workload Nodes, the manager's informers) and by
// one poller per kube-apiserver, so that a loaded machine slows the sources, not the sampling.
type Monitor struct {
	c        *Cluster
	interval time.Duration
	out      io.Writer
	start    time.Time

	containers *containerView
	apiServers *apiServerVersions
	workload   atomic.Pointer[workloadClients]
	management atomic.Pointer[managementStatus]
	wg         sync.WaitGroup

	mu         sync.Mutex
	samples    int
	coverage   Coverage
	changes    []Sample
	violations []Violation
	stop       context.CancelFunc
	done       chan struct{}
	// first, last and maxGap measure the sampling itself.
	first, last time.Time
	maxGap      time.Duration
	maxGapEnd   time.Time
}

// workloadClients reach the workload cluster once its kubeconfig exists: an HTTP client for the
// kube-apiservers' /version and a watch on its Nodes.
type workloadClients struct {
	http          *http.Client
	nodes         ctrlcache.Cache
	nodesInformer ctrlcache.Informer
}

// askInterval is how often each kube-apiserver is asked its version, on its own schedule.
const askInterval = 100 * time.Millisecond

// StartMonitor starts sampling every interval; each change is printed to out as a timeline line
// stamped with the time since start.
func (c *Cluster) StartMonitor(ctx context.Context, start time.Time, interval time.Duration, out io.Writer) (*Monitor, error) {
	engine, err := container.NewDocker()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	m := &Monitor{
		c: c, interval: interval, out: out, start: start, stop: cancel, done: make(chan struct{}),
		containers: newContainerView(engine, map[string]string{container.KindClusterLabel: c.Name}),
	}
	m.apiServers = &apiServerVersions{interval: askInterval, ask: m.askVersion, wg: &m.wg, pollers: map[string]*apiServerPoller{}}
	go m.run(ctx)
	return m, nil
}

func (m *Monitor) run(ctx context.Context) {
	defer close(m.done)
	defer m.containers.engine.Close()
	defer m.wg.Wait()
	m.wg.Go(func() { m.containers.run(ctx, m.interval) })
	m.wg.Go(func() { m.connect(ctx) })
	m.wg.Go(func() { m.readManagement(ctx) })
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
	// Reads from caches answer at once, but the first read of a kind starts its informer and
	// waits for it to sync.
	readCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s := Sample{At: time.Now()}
	// The kube-apiservers first, the pool after: versions only go up during an upgrade, so a pool
	// read later can only look newer than it was when the kube-apiservers answered, and the
	// sample errs toward counting a violation. The kube-apiservers are those of the containers
	// running at the previous sample: one that stopped since still counts once, one that started
	// since counts from the next sample.
	workload := m.workload.Load()
	var apiServers []string
	if workload != nil {
		apiServers = m.apiServers.versions()
	}
	nodes, ok := m.containers.containers()
	if !ok {
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
	if workload != nil {
		s.APIServers = apiServers
		m.apiServers.track(ctx, controlPlane)
	}
	if workload != nil && workload.nodesInformer.HasSynced() && len(poolNames) > 0 {
		nodeList := &corev1.NodeList{}
		// Read only, every sample: no copy of every Node's status.
		if err := workload.nodes.List(readCtx, nodeList, client.UnsafeDisableDeepCopy); err == nil {
			for _, n := range nodeList.Items {
				if poolNames[n.Name] {
					s.PoolKubelets = append(s.PoolKubelets, n.Status.NodeInfo.KubeletVersion)
				}
			}
		}
	}
	if status := m.management.Load(); status != nil {
		s.Gate, s.ControlPlaneStatus = status.gate, status.controlPlane
	}
	for _, l := range [][]string{s.APIServers, s.PoolContainers, s.PoolKubelets} {
		slices.SortFunc(l, compareVersions)
	}
	m.record(s)
}

// managementStatus is what the management cluster last said of the cluster: the timeline's gate
// and control-plane status (the skew verdict does not read them).
type managementStatus struct {
	gate, controlPlane string
}

// readManagement keeps managementStatus current, every interval, apart from the samples: a plane
// reached through its kubeconfig (Attach) answers in tens of milliseconds, not from memory.
func (m *Monitor) readManagement(ctx context.Context) {
	ticker := time.NewTicker(m.interval)
	defer ticker.Stop()
	for {
		readCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		// What could not be read (a plane restarting) stays as last read.
		status := managementStatus{}
		if last := m.management.Load(); last != nil {
			status = *last
		}
		if pool, err := m.c.poolFrom(readCtx, m.c.w.cached); err == nil {
			status.gate = pool.Status.VersionGate.WaitingReason
		}
		if kcp, err := m.c.controlPlaneFrom(readCtx, m.c.w.cached); err == nil {
			status.controlPlane = StatusVersions(kcp)
		}
		cancel()
		m.management.Store(&status)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// connect makes the workload clients as soon as the workload kubeconfig exists; the watch on
// Nodes lives as long as the monitor.
func (m *Monitor) connect(ctx context.Context) {
	ticker := time.NewTicker(m.interval)
	defer ticker.Stop()
	for {
		if w, err := m.dialWorkload(ctx); err == nil {
			m.workload.Store(w)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (m *Monitor) dialWorkload(ctx context.Context) (*workloadClients, error) {
	getCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cfg, err := m.c.WorkloadConfig(getCtx)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 2 * time.Second
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	// No timeout for the watch itself: rest.Config's Timeout would end every watch after 2 s.
	watchCfg := rest.CopyConfig(cfg)
	watchCfg.Timeout = 0
	// A fixed mapping: discovery would wait here until the workload kube-apiserver first answers.
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	nodes, err := ctrlcache.New(watchCfg, ctrlcache.Options{Mapper: mapper, ReaderFailOnMissingInformer: true})
	if err != nil {
		return nil, err
	}
	informer, err := nodes.GetInformer(ctx, &corev1.Node{}, ctrlcache.BlockUntilSynced(false))
	if err != nil {
		return nil, err
	}
	m.wg.Go(func() { _ = nodes.Start(ctx) })
	return &workloadClients{http: httpClient, nodes: nodes, nodesInformer: informer}, nil
}

// askVersion asks the kube-apiserver at ip, a control-plane node's own address rather than the
// load balancer's, for its version.
func (m *Monitor) askVersion(ctx context.Context, ip string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+ip+":6443/version", http.NoBody)
	if err != nil {
		return "", err
	}
	resp, err := m.workload.Load().http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("kube-apiserver at %s answered /version with %s", ip, resp.Status)
	}
	info := version.Info{}
	if err := decodeJSON(resp.Body, &info); err != nil {
		return "", err
	}
	return info.GitVersion, nil
}

func (m *Monitor) record(s Sample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples++
	if m.first.IsZero() {
		m.first = s.At
	} else if gap := s.At.Sub(m.last); gap > m.maxGap {
		m.maxGap, m.maxGapEnd = gap, s.At
	}
	m.last = s.At
	m.coverage.Add(s)
	if v := s.Violation(); v != "" {
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

// Violation judges the sample with the one rule of pkg/skew: each pool container (the kubelet it
// runs or is about to run, from its version label) and each pool kubelet against the
// kube-apiservers that answered. A version that cannot be read counts as a violation: a monitor
// that cannot judge must not pass.
func (s Sample) Violation() string {
	var problems []string
	judge := func(whose string, versions []string) {
		violations, err := skew.Violations(versions, s.APIServers)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s%v", whose, err))
		}
		for _, v := range violations {
			problems = append(problems, fmt.Sprintf("%s%s", whose, v))
		}
	}
	containers := make([]string, 0, len(s.PoolContainers))
	for _, label := range s.PoolContainers {
		v, err := skew.VersionFromLabelValue(label)
		if err != nil {
			problems = append(problems, fmt.Sprintf("pool container's version label %q: %v", label, err))
			continue
		}
		containers = append(containers, v)
	}
	judge("pool container's ", containers)
	judge("pool ", s.PoolKubelets)
	slices.Sort(problems)
	return strings.Join(problems, "; ")
}

// Coverage counts samples by what they could judge: a sample with no kube-apiserver, or with no
// pool container, can break no rule and proves nothing, so it is counted apart, never as "no
// violation".
type Coverage struct {
	Samples int
	// Judged samples saw at least one kube-apiserver's version and one pool container.
	Judged int
	// NoAPIServer samples saw pool containers while no kube-apiserver answered: blind.
	NoAPIServer int
	// NoPoolNode samples saw kube-apiservers and no pool container.
	NoPoolNode int
	// Nothing samples saw neither, as before a cluster's first node.
	Nothing int
}

// Add counts s.
func (c *Coverage) Add(s Sample) {
	c.Samples++
	switch apiServers, pool := len(s.APIServers) > 0, len(s.PoolContainers) > 0; {
	case apiServers && pool:
		c.Judged++
	case pool:
		c.NoAPIServer++
	case apiServers:
		c.NoPoolNode++
	default:
		c.Nothing++
	}
}

// Blind says why a monitor's samples prove nothing, "" when they do: it judged no sample, or
// judged fewer than half of those taken once the cluster showed a kube-apiserver or a pool node.
func (c Coverage) Blind() string {
	seen := c.Samples - c.Nothing
	switch {
	case c.Judged == 0:
		return fmt.Sprintf("the monitor judged none of its %d samples: it never saw a kube-apiserver's version and a pool node at once", c.Samples)
	case c.Judged*2 <= seen:
		return fmt.Sprintf("the monitor judged %d of the %d samples taken once the cluster showed a node: not most", c.Judged, seen)
	}
	return ""
}

func (c Coverage) String() string {
	return fmt.Sprintf("%d samples: %d judged, %d with pool nodes and no kube-apiserver, %d with no pool node, %d with neither",
		c.Samples, c.Judged, c.NoAPIServer, c.NoPoolNode, c.Nothing)
}

// Coverage is what the samples so far could judge.
func (m *Monitor) Coverage() Coverage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.coverage
}

// Stop stops sampling.
func (m *Monitor) Stop() {
	m.stop()
	<-m.done
}

// Interval is the mean time between samples, the longest gap between two of them and when,
// since the monitor's start, that gap ended.
func (m *Monitor) Interval() (mean, maxGap, maxGapEnd time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.samples < 2 {
		return 0, 0, 0
	}
	return m.last.Sub(m.first) / time.Duration(m.samples-1), m.maxGap, m.maxGapEnd.Sub(m.start)
}

// ContainerLag is the longest a container created while the monitor ran took to reach it after
// the engine's event for it; the next sample, at most one interval later, shows it.
func (m *Monitor) ContainerLag() time.Duration {
	return m.containers.lag()
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
// first sample after the last one in which an older kube-apiserver counted, so that one that
// went missing for a while does not count as gone) to the first sample with a pool container
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

// compareVersions orders versions for display; one that does not parse goes first.
func compareVersions(a, b string) int {
	va, _ := skew.ParseVersion(a)
	vb, _ := skew.ParseVersion(b)
	return va.Compare(vb)
}

func decodeJSON(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }
