package controllers

import (
	"context"
	"errors"
	"sync"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
)

// bootstrapEnds tells the DockerMachinePoolMachine controller when a bootstrap it follows ends,
// so that the machine is provisioned then rather than at its next look (up to
// bootstrapPollInterval later, each batch of a rollout waiting on it): one exec per running
// bootstrap that returns when its runner is done. The looks stay; they are what a restarted
// manager, or an await that failed, falls back on. It is a manager Runnable: awaits run as long
// as the manager, not as one reconcile.
type bootstrapEnds struct {
	runtime bootstrap.Execer
	events  chan event.TypedGenericEvent[*infrav1.DockerMachinePoolMachine]

	mu sync.Mutex
	// ctx is the manager's, once Start runs; nil before, when follow does nothing.
	ctx     context.Context //nolint:containedctx // the awaits' lifetime, not a request's
	waiting map[client.ObjectKey]struct{}
}

func newBootstrapEnds(runtime bootstrap.Execer) *bootstrapEnds {
	return &bootstrapEnds{
		runtime: runtime,
		events:  make(chan event.TypedGenericEvent[*infrav1.DockerMachinePoolMachine]),
		waiting: map[client.ObjectKey]struct{}{},
	}
}

// Start implements manager.Runnable.
func (b *bootstrapEnds) Start(ctx context.Context) error {
	b.mu.Lock()
	b.ctx = ctx
	b.mu.Unlock()
	<-ctx.Done()
	return nil
}

// source enqueues each machine whose bootstrap ended.
func (b *bootstrapEnds) source() source.Source {
	return source.Channel(b.events, &handler.TypedEnqueueRequestForObject[*infrav1.DockerMachinePoolMachine]{})
}

// follow awaits the end of the machine's bootstrap, for at most limit, unless it is awaited
// already, and tells whether an await follows it. The machine is woken when the await returns,
// whatever it returns: the bootstrap ended, it outlived limit (to be stopped), or the await
// failed (the container may be gone).
func (b *bootstrapEnds) follow(machine *infrav1.DockerMachinePoolMachine, limit time.Duration) bool {
	key := client.ObjectKeyFromObject(machine)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil {
		return false
	}
	if _, ok := b.waiting[key]; ok {
		return true
	}
	b.waiting[key] = struct{}{}
	ctx := b.ctx
	go func() {
		err := bootstrap.Await(ctx, b.runtime, key.Name, limit)
		b.mu.Lock()
		delete(b.waiting, key)
		b.mu.Unlock()
		if err != nil && !errors.Is(err, bootstrap.ErrAwaitLimit) && ctx.Err() == nil {
			ctrl.LoggerFrom(ctx).V(4).Info("Awaiting a bootstrap failed", "container", key.Name, "error", err.Error())
		}
		ended := &infrav1.DockerMachinePoolMachine{}
		ended.Namespace, ended.Name = key.Namespace, key.Name
		select {
		case b.events <- event.TypedGenericEvent[*infrav1.DockerMachinePoolMachine]{Object: ended}:
		case <-ctx.Done():
		}
	}()
	return true
}
