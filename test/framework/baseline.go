package framework

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/controllers"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
)

// EngineBaseline is the benchmarks' baseline: the Docker engine alone makes nodes as a pool
// would, with the same run options, image and bootstrap commands, without a controller. What it
// takes is the physical limit of the engine and the nodes here.
type EngineBaseline struct {
	Engine *container.Docker
	// Network is the nodes' Docker network.
	Network string
	// Concurrency is how many bootstraps start at once: the DockerMachinePoolMachine
	// controller's workers. A started bootstrap holds no slot while it runs, as a machine's
	// holds no worker: an await exec per node follows it.
	Concurrency int
	// CreateConcurrency is how many containers are created at once: the pool's create limit.
	// Concurrency when zero.
	CreateConcurrency int
	// MaxSurge, in a rollout, is how many new nodes may exist before the old nodes they replace
	// are removed: the pool's rollingUpdate.maxSurge, so that both replace at the same pace.
	// 0 means no limit.
	MaxSurge int
	// Labels mark the baseline's containers.
	Labels map[string]string
}

// Milestones of making nodes, from the call.
type Milestones struct {
	// Running is when the last container ran.
	Running time.Duration
	// Joined is when the last bootstrap finished: every node registered.
	Joined time.Duration
	// Done is when every node was made and every node it replaces was removed.
	Done time.Duration
}

// MakeNodes creates and starts a container per name from image, waits for each to boot (systemd
// and containerd on a real node; nothing on a stub), and bootstraps it with data as CAPDMP does:
// the commands staged and started in one exec (bootstrap.Start), their end awaited by one exec
// (bootstrap.Await), the result read by one more (bootstrap.Check). Creates (CreateConcurrency
// at once) and bootstrap starts (Concurrency at once) are two stages, as a pool creates
// containers while its machines bootstrap the ones it made; the awaits are not limited. After
// node i is made, replace(i) runs when not nil: a rollout removes an old node there, and MaxSurge
// holds back creates until as many old nodes are gone.
func (e EngineBaseline) MakeNodes(ctx context.Context, data *bootstrap.Data, image string, names []string, replace func(i int) error) (Milestones, error) {
	start := time.Now()
	// surge holds a slot per new node whose old node is not removed yet.
	var surge chan struct{}
	if replace != nil && e.MaxSurge > 0 {
		surge = make(chan struct{}, e.MaxSurge)
	}
	var (
		mu             sync.Mutex
		m              Milestones
		running, added int
	)
	// done counts one more node through a stage and notes when the last one is through.
	done := func(count *int, at *time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		*count++
		if *count == len(names) {
			*at = time.Since(start)
		}
	}
	// Made containers queue for the bootstraps: creates never wait for a bootstrap slot.
	made := make(chan int, len(names))
	// A failed bootstrap cancels the creates waiting for a surge slot it would have freed.
	bootstraps, ctx := errgroup.WithContext(ctx)
	for range e.Concurrency {
		bootstraps.Go(func() error {
			for i := range made {
				if err := e.startBootstrap(ctx, data, names[i]); err != nil {
					return err
				}
				// The worker is free once the bootstrap runs; its await goes on beside it.
				bootstraps.Go(func() error {
					if err := e.awaitBootstrap(ctx, names[i]); err != nil {
						return err
					}
					done(&added, &m.Joined)
					if replace != nil {
						if err := replace(i); err != nil {
							return err
						}
						if surge != nil {
							<-surge
						}
					}
					return nil
				})
			}
			return nil
		})
	}
	creates := errgroup.Group{}
	creates.SetLimit(cmp.Or(e.CreateConcurrency, e.Concurrency))
	for i, name := range names {
		creates.Go(func() error {
			if surge != nil {
				select {
				case surge <- struct{}{}:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			spec := container.NodeSpec(container.NodeSpecInput{Name: name, Image: image, ClusterName: "capdmp-baseline", Network: e.Network, Labels: e.Labels})
			if _, err := e.Engine.Create(ctx, spec); err != nil {
				return err
			}
			done(&running, &m.Running)
			made <- i
			return nil
		})
	}
	createErr := creates.Wait()
	close(made)
	err := errors.Join(createErr, bootstraps.Wait())
	m.Done = time.Since(start)
	return m, err
}

// startBootstrap waits for the node to boot, then stages its bootstrap commands and starts them
// in one exec.
func (e EngineBaseline) startBootstrap(ctx context.Context, data *bootstrap.Data, name string) error {
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		status, err := bootstrap.Check(ctx, e.Engine, name)
		return status.State != bootstrap.StateBooting, err
	}); err != nil {
		return fmt.Errorf("waiting for node %s to boot: %w", name, err)
	}
	cmds, err := bootstrap.Commands(data, bootstrap.Vars{Hostname: name, IgnorePreflightErrors: bootstrap.DefaultIgnorePreflightErrors})
	if err != nil {
		return fmt.Errorf("rendering the bootstrap commands of %s: %w", name, err)
	}
	return bootstrap.Start(ctx, e.Engine, name, cmds)
}

// awaitLimit bounds a baseline bootstrap.
const awaitLimit = 10 * time.Minute

// awaitBootstrap waits for the node's bootstrap to end and fails unless it succeeded.
func (e EngineBaseline) awaitBootstrap(ctx context.Context, name string) error {
	if err := bootstrap.Await(ctx, e.Engine, name, awaitLimit); err != nil {
		return err
	}
	status, err := bootstrap.Check(ctx, e.Engine, name)
	if err != nil {
		return err
	}
	if status.State != bootstrap.StateSucceeded {
		return fmt.Errorf("the bootstrap of %s ended %s at step %q (exit code %d): %s", name, status.State, status.Step, status.ExitCode, bootstrap.Redact(string(status.Output)))
	}
	return nil
}

// NodeNames names n baseline nodes, apart from any other run's.
func NodeNames(n int) []string {
	run := names.SimpleNameGenerator.GenerateName("bench-")
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", run, i)
	}
	return out
}

// RemoveNode removes a baseline node: its container, and its Node from workload.
func (e EngineBaseline) RemoveNode(ctx context.Context, workload client.Client, name string) error {
	if err := e.Engine.Delete(ctx, name); err != nil {
		return err
	}
	return client.IgnoreNotFound(workload.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}))
}

// Remove removes every baseline node left, with its Node.
func (e EngineBaseline) Remove(ctx context.Context, workload client.Client) error {
	left, err := e.Engine.List(ctx, e.Labels)
	if err != nil {
		return err
	}
	removals := errgroup.Group{}
	removals.SetLimit(e.Concurrency)
	for _, c := range left {
		removals.Go(func() error { return e.RemoveNode(ctx, workload, c.Name) })
	}
	return removals.Wait()
}

// EngineBaseline is the benchmarks' baseline on the world's engine and network: concurrency
// bootstrap starts at once (the manager's --dockermachinepoolmachine-concurrency) and the pool's
// default create limit (--container-create-concurrency).
func (w *World) EngineBaseline(concurrency int, labels map[string]string) EngineBaseline {
	return EngineBaseline{
		Engine: w.engine, Network: Network, Concurrency: concurrency,
		CreateConcurrency: controllers.DefaultMaxConcurrentCreates, Labels: labels,
	}
}
