// Command demo plays "upgrade both at once" with real nodes as a live timeline: a management
// plane with Cluster API, KubeadmControlPlane, CAPD and CAPDMP, one workload cluster whose control
// plane and MachinePool are upgraded by a single apply, and the versions of every kube-apiserver,
// pool container and pool kubelet as they change. `make demo` builds the node images first.
// Everything it starts (containers, network, processes) is removed on exit or Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/capdmp/capdmp/internal/test/envtest"
	"github.com/capdmp/capdmp/test/realworld"
)

func main() {
	from := flag.String("from", "v1.36.3", "Kubernetes version the cluster starts at (a kindest/node image of it must exist)")
	to := flag.String("to", "v1.37.2", "Kubernetes version both the control plane and the pool are upgraded to")
	poolFirst := flag.Bool("pool-first", true, "write the MachinePool before the KubeadmControlPlane (the order that breaks unprotected pools)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *from, *to, *poolFirst)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, from, to string, poolFirst bool) (err error) {
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("%7.1fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	say("starting the management plane (kube-apiserver, etcd, Cluster API, KCP, CABPK, CAPD, CAPDMP)")
	world, err := realworld.Start(context.WithoutCancel(ctx), realworld.Options{
		Artifacts: filepath.Join(envtest.RepoRoot(), "_artifacts", "demo"),
		TokenTTL:  15 * time.Minute,
		Progress:  os.Stdout,
	})
	if err != nil {
		return err
	}
	defer world.Stop()

	const name = "capdmp-demo"
	// A run that was killed outright (SIGKILL) leaves its containers: clear them first.
	if err := world.RemoveClusterContainers(context.WithoutCancel(ctx), name); err != nil {
		return err
	}
	c, err := world.CreateCluster(ctx, realworld.ClusterSpec{Name: name, ControlPlaneVersion: from, ControlPlaneReplicas: 1, PoolVersion: from, PoolReplicas: 2})
	if err != nil {
		return err
	}
	defer func() {
		cleanup := context.WithoutCancel(ctx)
		if ctx.Err() != nil {
			// Interrupted: the API servers may be gone with the terminal's signal; remove the
			// containers directly.
			say("interrupted: removing the cluster's containers")
			err = errors.Join(err, world.RemoveClusterContainers(cleanup, name))
			return
		}
		say("deleting the cluster through Cluster API")
		err = errors.Join(err, c.Delete(cleanup, 5*time.Minute))
	}()
	say("cluster %s: control plane %s (1 node, CAPD + KubeadmControlPlane), MachinePool %s (2 CAPDMP nodes)", name, from, from)
	fmt.Println("\ntimeline, a line per change: every kube-apiserver's /version asked at its node, KCP's status.version,\nthe pool's containers (the kubelet each runs or will run), the pool's Nodes, and the gate")
	mon, err := c.StartMonitor(ctx, start, 50*time.Millisecond, os.Stdout)
	if err != nil {
		return err
	}
	defer mon.Stop()

	progress := func(d string) { say("%s", d) }
	if err := realworld.WaitFor(ctx, 10*time.Minute, progress, func(ctx context.Context) (bool, string, error) { return c.ControlPlaneAt(ctx, from, 1) }); err != nil {
		return err
	}
	if err := realworld.WaitFor(ctx, 10*time.Minute, progress, func(ctx context.Context) (bool, string, error) { return c.PoolAt(ctx, from, 2) }); err != nil {
		return err
	}

	say("applying %s to the MachinePool and the KubeadmControlPlane at once (pool first: %t)", to, poolFirst)
	writes := []func(context.Context, string) error{c.SetControlPlaneVersion, c.SetPoolVersion}
	if poolFirst {
		writes[0], writes[1] = writes[1], writes[0]
	}
	for _, w := range writes {
		if err := w(ctx, to); err != nil {
			return err
		}
	}
	if err := realworld.WaitFor(ctx, 15*time.Minute, progress, func(ctx context.Context) (bool, string, error) { return c.ControlPlaneAt(ctx, to, 1) }); err != nil {
		return err
	}
	if err := realworld.WaitFor(ctx, 15*time.Minute, progress, func(ctx context.Context) (bool, string, error) { return c.PoolAt(ctx, to, 2) }); err != nil {
		return err
	}
	mon.Stop()
	if d, fromStatus, ok := mon.ReopenLatency(to); ok {
		say("gate re-open latency: %s from the last kube-apiserver at %s to the first pool container of %s (%s after KCP's status said so)",
			d.Round(10*time.Millisecond), to, to, fromStatus.Round(10*time.Millisecond))
	}
	violations := mon.Violations()
	for _, v := range violations {
		say("VIOLATION at %.1fs: %s", v.At.Sub(start).Seconds(), v.Detail)
	}
	mean, longest, _ := mon.Interval()
	say("skew-violations: %d (%d samples, one every %s, longest gap %s; new containers seen within %s)", len(violations), mon.Samples(), mean.Round(time.Millisecond), longest.Round(time.Millisecond), mon.ContainerLag().Round(time.Millisecond))
	if len(violations) > 0 {
		return fmt.Errorf("%d samples broke the skew policy", len(violations))
	}
	return nil
}
