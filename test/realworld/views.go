package realworld

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capdmp/capdmp/internal/container"
)

// containerView holds a cluster's containers as the engine reports them, kept current from its
// event stream between lists the way an informer keeps objects, so that a sample reads them from
// memory instead of waiting for a list on a loaded engine.
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
	for ctx.Err() == nil {
		_ = v.listAndWatch(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

func (v *containerView) listAndWatch(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Watching from a second before the list leaves no gap between the two; the engine replays
	// what happened since, and inspecting a container twice is harmless.
	changes, errs := v.engine.Watch(ctx, v.labels, time.Now().Add(-time.Second))
	list, err := v.engine.List(ctx, v.labels)
	if err != nil {
		return err
	}
	v.mu.Lock()
	v.byID = map[string]container.Container{}
	for _, c := range list {
		v.byID[c.ID] = c
	}
	v.synced = true
	v.mu.Unlock()
	for change := range changes {
		c, err := v.engine.Inspect(ctx, change.ID)
		if err != nil && !errors.Is(err, container.ErrNotFound) {
			return err
		}
		v.mu.Lock()
		if err != nil {
			delete(v.byID, change.ID)
		} else {
			if _, known := v.byID[change.ID]; !known {
				v.maxLag = max(v.maxLag, time.Since(change.At))
			}
			v.byID[change.ID] = c
		}
		v.mu.Unlock()
	}
	return <-errs
}

// containers returns the view's containers by name; ok is false until the first list.
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
	ticker := time.NewTicker(a.interval)
	defer ticker.Stop()
	for {
		askCtx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := a.ask(askCtx, p.ip)
		cancel()
		if err == nil && v != "" {
			p.mu.Lock()
			p.version = v
			p.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
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
