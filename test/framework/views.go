package framework

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capdmp/capdmp/internal/container"
)

// containerView holds a cluster's containers as the engine lists them, listed again as soon as
// its event stream reports a change, so that a sample reads them from memory instead of waiting
// for a list on a loaded engine, and the engine is not asked while nothing changes.
type containerView struct {
	engine *container.Docker
	labels map[string]string

	mu     sync.Mutex
	byID   map[string]container.Container
	synced bool
	// maxLag is the longest a container created after the first list took to reach the view,
	// from the engine's event (the engine runs on this host, on the same clock).
	maxLag time.Duration
}

func newContainerView(engine *container.Docker, labels map[string]string) *containerView {
	return &containerView{engine: engine, labels: labels, byID: map[string]container.Container{}}
}

// run keeps the view until ctx ends, listing again whenever the event stream fails.
func (v *containerView) run(ctx context.Context, retry time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) { _ = v.listAndWatch(ctx) }, retry)
}

func (v *containerView) listAndWatch(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Watching from a second before the first list leaves no gap between the two; the engine
	// replays what happened since.
	changes, errs := v.engine.Watch(ctx, v.labels, time.Now().Add(-time.Second))
	if err := v.list(ctx, nil); err != nil {
		return err
	}
	for change := range changes {
		// A list, not an inspect of the changed container: the engine answers an inspect only
		// once the container's start is done, seconds later on a loaded machine. Changes that
		// arrived meanwhile are served by the same list.
		changed := map[string]time.Time{change.ID: change.At}
	drain:
		for {
			select {
			case more, ok := <-changes:
				if !ok {
					break drain
				}
				if _, seen := changed[more.ID]; !seen {
					changed[more.ID] = more.At
				}
			default:
				break drain
			}
		}
		if err := v.list(ctx, changed); err != nil {
			return err
		}
	}
	return <-errs
}

// list replaces the view with the engine's list; changed are the containers whose events asked
// for it, with the time of the first, to measure how long a new one took to reach the view.
func (v *containerView) list(ctx context.Context, changed map[string]time.Time) error {
	list, err := v.engine.List(ctx, v.labels)
	if err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	byID := make(map[string]container.Container, len(list))
	for _, c := range list {
		if at, ok := changed[c.ID]; ok {
			if _, known := v.byID[c.ID]; !known {
				v.maxLag = max(v.maxLag, time.Since(at))
			}
		}
		byID[c.ID] = c
	}
	v.byID, v.synced = byID, true
	return nil
}

// containers returns the view's containers sorted by name; ok is false until the first list.
func (v *containerView) containers() (cs []container.Container, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	cs = slices.Collect(maps.Values(v.byID))
	slices.SortFunc(cs, func(a, b container.Container) int { return strings.Compare(a.Name, b.Name) })
	return cs, v.synced
}

func (v *containerView) lag() time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.maxLag
}

// apiServerVersions asks each running control-plane container's kube-apiserver for its version
// on its own schedule, so that one slow to answer under load delays no sample. A server counts
// from its first answer until its container stops or goes: an old kube-apiserver that misses an
// answer while busy still holds the oldest version down, as it still serves kubelets.
type apiServerVersions struct {
	interval time.Duration
	// ask returns the version the kube-apiserver at ip answers.
	ask func(ctx context.Context, ip string) (string, error)
	wg  *sync.WaitGroup

	pollers map[string]*apiServerPoller
}

type apiServerPoller struct {
	ip     string
	cancel context.CancelFunc

	mu      sync.Mutex
	version string
}

// track starts asking the running control-plane containers that are new and stops asking those
// that stopped or went; only the sampler calls it.
func (a *apiServerVersions) track(ctx context.Context, controlPlane []container.Container) {
	running := map[string]string{}
	for _, c := range controlPlane {
		if c.Running && c.IPv4 != "" {
			running[c.ID] = c.IPv4
		}
	}
	for id, p := range a.pollers {
		if running[id] != p.ip {
			p.cancel()
			delete(a.pollers, id)
		}
	}
	for id, ip := range running {
		if _, ok := a.pollers[id]; ok {
			continue
		}
		pollCtx, cancel := context.WithCancel(ctx)
		p := &apiServerPoller{ip: ip, cancel: cancel}
		a.pollers[id] = p
		a.wg.Go(func() { a.poll(pollCtx, p) })
	}
}

func (a *apiServerVersions) poll(ctx context.Context, p *apiServerPoller) {
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		askCtx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if v, err := a.ask(askCtx, p.ip); err == nil && v != "" {
			p.mu.Lock()
			p.version = v
			p.mu.Unlock()
		}
	}, a.interval)
}

// versions are the tracked kube-apiservers that have answered, in no order.
func (a *apiServerVersions) versions() []string {
	out := []string{}
	for _, p := range a.pollers {
		p.mu.Lock()
		if p.version != "" {
			out = append(out, p.version)
		}
		p.mu.Unlock()
	}
	return out
}
