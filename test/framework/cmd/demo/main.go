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
	"strings"
	"syscall"
	"time"

	"github.com/capdmp/capdmp/internal/kubeversions"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/test/framework"
)

func main() {
	scenario := flag.String("scenario", "both-at-once/machinepool-first", "the scenario of pkg/conformance's table to play (needs at most the versions of -versions)")
	versions := flag.String("versions", kubeversions.Older+","+kubeversions.Newer, "the Kubernetes versions of the chain, oldest first (a kindest/node image of each must exist)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *scenario, strings.Split(*versions, ","))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, name string, versions []string) (err error) {
	sc, ok := conformance.Lookup(name)
	if !ok {
		return fmt.Errorf("no scenario %q in the table", name)
	}
	from, err := sc.From(versions)
	if err != nil {
		return err
	}
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("%7.1fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	say("starting the management plane (kube-apiserver, etcd, Cluster API, KCP, CABPK, CAPD, CAPDMP)")
	world, err := framework.Start(context.WithoutCancel(ctx), framework.Options{
		Artifacts: filepath.Join(testenv.RepoRoot(), "_artifacts", "demo"),
		TokenTTL:  15 * time.Minute,
		Progress:  os.Stdout,
	})
	if err != nil {
		return err
	}
	defer world.Stop()
	const cluster = "capdmp-demo"
	// A run that was killed outright (SIGKILL) leaves its containers: clear them first.
	if err := world.RemoveClusterContainers(context.WithoutCancel(ctx), cluster); err != nil {
		return err
	}
	c, err := world.CreateCluster(ctx, framework.ClusterSpec{Name: cluster, ControlPlaneVersion: from, ControlPlaneReplicas: int(sc.Shape.ControlPlaneReplicas), PoolVersion: from, PoolReplicas: int(sc.Shape.PoolReplicas)})
	if err != nil {
		return err
	}
	defer func() {
		say("deleting the cluster")
		err = errors.Join(err, c.Delete(context.WithoutCancel(ctx), 5*time.Minute))
	}()
	if sc.Shape.CustomImage {
		if err := c.SetImage(ctx, from); err != nil {
			return err
		}
	}
	say("scenario %s: %s", sc.Name, sc.Doc)
	report, runErr := sc.Run(ctx, c, conformance.Options{
		Versions: versions, Interval: 50 * time.Millisecond, TokenTTL: 15 * time.Minute, Logf: say,
		Budgets: conformance.Budgets{ClusterReady: 10 * time.Minute, ControlPlaneMachine: 10 * time.Minute, ControlPlaneUpgrade: 15 * time.Minute,
			PoolUpgrade: 15 * time.Minute, Gate: 2 * time.Minute, Settle: 30 * time.Second},
		OnChange: func(x conformance.Sample) { say("%s", x) },
	})
	for _, l := range report.Latencies {
		say("gate re-open latency to %s: %s after the last old kube-apiserver, %s after the control plane's status", l.Target,
			l.FromAPIServers.Round(10*time.Millisecond), l.FromStatus.Round(10*time.Millisecond))
	}
	for _, v := range report.Violations {
		say("VIOLATION %s", v)
	}
	mean, longest := report.SampleInterval, report.LongestGap
	say("skew-violations: %d (%s; one every %s, longest gap %s; new containers seen within %s)", len(report.Violations),
		report.Coverage, mean.Round(time.Millisecond), longest.Round(time.Millisecond), c.ContainerLag().Round(time.Millisecond))
	if runErr == nil && len(report.Violations) > 0 {
		runErr = fmt.Errorf("%d skew violations", len(report.Violations))
	}
	return runErr
}
