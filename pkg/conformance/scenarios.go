package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/clusterops"
	"github.com/capdmp/capdmp/pkg/skew"
)

// Shape is the cluster a scenario starts from; the caller makes it before Scenario.Run.
type Shape struct {
	// ControlPlaneReplicas and PoolReplicas are the control plane's and the MachinePool's
	// replicas.
	ControlPlaneReplicas, PoolReplicas int32
	// CustomImage: the pool names its image apart from the MachinePool's version from the start
	// (ImageWriter), e.g. CAPDMP's spec.template.customImage; the caller writes it (SetImage of
	// the first version) before the run.
	CustomImage bool
	// Versions is how many versions of the caller's chain the scenario goes through (2, or 3 for
	// a chain of two upgrades): it starts at the oldest of them (Scenario.From).
	Versions int
}

// Scenario is one row of the table: a cluster's shape and the user's steps on it.
type Scenario struct {
	// Name is the scenario's stable name, the same in every tier and report: a group and a case,
	// "both-at-once/machinepool-first". No name is part of another, so that an unanchored
	// pattern of one selects it alone.
	Name string
	// Doc says what the scenario proves.
	Doc   string
	Shape Shape
	// Needs names the optional interfaces the scenario needs of a Cluster ("Gated",
	// "ImageWriter", "Restarter", "BootstrapRecorder"); RunnableOn checks them.
	Needs []string
	steps func(*run) error
}

// The optional interfaces a scenario can need, by name.
const (
	needsGate              = "Gated"
	needsImageWriter       = "ImageWriter"
	needsRestarter         = "Restarter"
	needsBootstrapRecorder = "BootstrapRecorder"
)

// implements tells whether c implements the optional interface named need.
func implements(c Cluster, need string) bool {
	var ok bool
	switch need {
	case needsGate:
		_, ok = c.(Gated)
	case needsImageWriter:
		_, ok = c.(ImageWriter)
	case needsRestarter:
		_, ok = c.(Restarter)
	case needsBootstrapRecorder:
		_, ok = c.(BootstrapRecorder)
	}
	return ok
}

// write is one object of a user's apply.
type write string

const (
	writeControlPlane write = "control plane spec.version"
	writeMachinePool  write = "MachinePool spec.template.spec.version"
	// writeImage writes the pool's image (ImageWriter).
	writeImage write = "pool image"
)

// table is the scenarios, in the order a tier should start them (the longest first). Callers
// get copies (Scenarios, Lookup): a tier that changes a shape changes its own.
var table = []Scenario{
	{
		Name: "both-at-once/3-node-controlplane", Doc: "a three-node control plane mid-upgrade runs kube-apiservers of two versions; the pool waits for the last one",
		Shape: Shape{ControlPlaneReplicas: 3, PoolReplicas: 1, Versions: 2}, Needs: []string{needsGate},
		steps: func(r *run) error {
			if err := r.upgrade(r.version(1), 0, writeMachinePool, writeControlPlane); err != nil {
				return err
			}
			if !r.watch.m.sawWhileWaiting(string(skew.ControlPlaneOlder)) {
				return errors.New("the monitor never saw kube-apiservers of two versions while the gate held the pool")
			}
			return nil
		},
	},
	upgradeBothAtOnce("both-at-once/controlplane-first", Shape{}, 0, writeControlPlane, writeMachinePool),
	upgradeBothAtOnce("both-at-once/machinepool-first", Shape{}, 0, writeMachinePool, writeControlPlane),
	upgradeBothAtOnce("both-at-once/machinepool-2s-first", Shape{}, 2*time.Second, writeMachinePool, writeControlPlane),
	upgradeBothAtOnce("both-at-once/image-first", Shape{CustomImage: true}, time.Second, writeImage, writeMachinePool, writeControlPlane),
	upgradeBothAtOnce("both-at-once/image-between", Shape{CustomImage: true}, 0, writeControlPlane, writeImage, writeMachinePool),
	{
		Name: "paused/outlives-token-ttl", Doc: "the control plane's upgrade starts after the pool's pause outlived the bootstrap token's TTL; the first new instance joins with data newer than the pause",
		Shape: Shape{ControlPlaneReplicas: 1, PoolReplicas: 1, Versions: 2}, Needs: []string{needsGate, needsBootstrapRecorder},
		steps: pauseOutlivesTokenTTL,
	},
	{
		Name: "paused/scale-and-replace", Doc: "while paused, a scale-up and a deleted Machine are served at the last admitted version, then the upgrade completes",
		Shape: Shape{ControlPlaneReplicas: 1, PoolReplicas: 2, Versions: 2}, Needs: []string{needsGate},
		steps: scaleAndReplaceWhilePaused,
	},
	{
		Name: "both-at-once/chain-of-two", Doc: "two upgrades in a row, the pool following each, 10 s between the writes: MachinePool first, then the image first",
		Shape: Shape{ControlPlaneReplicas: 1, PoolReplicas: 2, Versions: 3}, Needs: []string{needsImageWriter},
		steps: func(r *run) error {
			if err := r.upgrade(r.version(1), 10*time.Second, writeMachinePool, writeControlPlane); err != nil {
				return err
			}
			return r.upgrade(r.version(2), 10*time.Second, writeImage, writeMachinePool, writeControlPlane)
		},
	},
	{
		Name: "pool-alone/ahead-and-back", Doc: "a pool set one minor ahead of a control plane that is not upgraded waits with a clear condition and creates nothing; set back, it keeps its instances",
		Shape: Shape{ControlPlaneReplicas: 1, PoolReplicas: 1, Versions: 2}, Needs: []string{needsGate},
		steps: poolAhead,
	},
	{
		Name: "paused/config-change", Doc: "the pool's bootstrap config is edited while the pool waits in an upgrade of both at once (MachinePool first): every instance is replaced at the admitted version, then the upgrade completes",
		Shape: Shape{ControlPlaneReplicas: 1, PoolReplicas: 2, Versions: 2}, Needs: []string{needsGate},
		steps: configChangeWhilePaused,
	},
	{
		Name: "paused/provider-restart", Doc: "the provider restarted while the pool waits in an upgrade of both at once; the upgrade completes",
		Shape: Shape{ControlPlaneReplicas: 1, PoolReplicas: 2, Versions: 2}, Needs: []string{needsGate, needsRestarter},
		steps: func(r *run) error {
			if err := r.apply(r.version(1), 0, writeMachinePool, writeControlPlane); err != nil {
				return err
			}
			if err := r.waitGate(string(skew.ControlPlaneOlder)); err != nil {
				return err
			}
			if err := r.c.(Restarter).RestartProvider(r.ctx); err != nil {
				return fmt.Errorf("restarting the provider: %w", err)
			}
			r.logf("restarted the provider while the pool waits")
			return r.waitUpgraded(r.version(1))
		},
	},
}

// upgradeBothAtOnce is an upgrade of both at once in one order: the writes gap apart, then both
// upgrade.
func upgradeBothAtOnce(name string, shape Shape, gap time.Duration, writes ...write) Scenario {
	shape.ControlPlaneReplicas, shape.PoolReplicas, shape.Versions = 1, 2, 2
	order := make([]string, 0, len(writes))
	for _, w := range writes {
		order = append(order, string(w))
	}
	s := Scenario{
		Name: name, Shape: shape,
		Doc:   fmt.Sprintf("control plane and pool upgraded at once, %s apart: %s", gap, strings.Join(order, ", ")),
		steps: func(r *run) error { return r.upgrade(r.version(1), gap, writes...) },
	}
	if slices.Contains(writes, writeImage) {
		s.Needs = []string{needsImageWriter}
	}
	return s
}

func pauseOutlivesTokenTTL(r *run) error {
	if err := r.apply(r.version(1), 0, writeMachinePool); err != nil {
		return err
	}
	if err := r.waitGate(string(skew.ControlPlaneOlder)); err != nil {
		return err
	}
	recorder := r.c.(BootstrapRecorder)
	atPause, err := recorder.BootstrapDataAtPause(r.ctx)
	if err != nil || atPause == "" {
		return fmt.Errorf("reading the bootstrap data at the pause (%q): %w", atPause, err)
	}
	before, err := r.instanceNames()
	if err != nil {
		return err
	}
	hold := r.o.TokenTTL + 15*time.Second
	r.logf("paused with bootstrap data %s; holding the control plane back for the token TTL and 15 s (%s)", cut(atPause, 12), hold)
	if err := sleep(r.ctx, hold); err != nil {
		return err
	}
	// The token was rotated or refreshed meanwhile: the data changed, the configuration did not.
	if after, err := r.instanceNames(); err != nil || !slices.Equal(before, after) {
		return fmt.Errorf("instances replaced during the pause, with no configuration change: %v before, %v after (%v)", before, after, err)
	}
	if err := r.apply(r.version(1), 0, writeControlPlane); err != nil {
		return err
	}
	if err := r.waitUpgraded(r.version(1)); err != nil {
		return err
	}
	joined, err := recorder.BootstrapData(r.ctx, r.version(1))
	if err != nil {
		return fmt.Errorf("reading the bootstrap data of the new instances: %w", err)
	}
	if len(joined) == 0 {
		return fmt.Errorf("no instance of %s records its bootstrap data", r.version(1))
	}
	for instance, data := range joined {
		if data == "" || strings.HasPrefix(atPause, data) {
			return fmt.Errorf("instance %s joined with bootstrap data %q, not newer than the pause's %s", instance, data, cut(atPause, 12))
		}
		r.logf("instance %s joined with bootstrap data %s (pause: %s)", instance, data, cut(atPause, 12))
	}
	return nil
}

func scaleAndReplaceWhilePaused(r *run) error {
	if err := r.apply(r.version(1), 0, writeMachinePool); err != nil {
		return err
	}
	if err := r.waitGate(string(skew.ControlPlaneOlder)); err != nil {
		return err
	}
	replicas := r.s.Shape.PoolReplicas + 1
	if err := clusterops.SetMachinePool(r.ctx, r.c, "replicas", func(mp *clusterv1.MachinePool) { mp.Spec.Replicas = ptr.To(replicas) }); err != nil {
		return err
	}
	r.logf("scaled the MachinePool to %d while paused", replicas)
	machines := &clusterv1.MachineList{}
	if err := r.c.Client().List(r.ctx, machines, client.InNamespace(r.c.MachinePool().Namespace),
		client.MatchingLabels{clusterv1.MachinePoolNameLabel: r.c.MachinePool().Name}); err != nil {
		return fmt.Errorf("listing the pool's Machines: %w", err)
	}
	if len(machines.Items) == 0 {
		return errors.New("the pool has no Machine to delete")
	}
	victim := machines.Items[0]
	if err := r.c.Client().Delete(r.ctx, &victim); err != nil {
		return fmt.Errorf("deleting Machine %s: %w", victim.Name, err)
	}
	r.logf("deleted Machine %s while paused", victim.Name)
	if err := r.waitPool(r.version(0), replicas, r.o.Budgets.PoolUpgrade); err != nil {
		return err
	}
	if names, err := r.instanceNames(); err != nil || slices.Contains(names, victim.Name) {
		return fmt.Errorf("the deleted Machine's instance %s is still there (%v, %v)", victim.Name, names, err)
	}
	if err := r.apply(r.version(1), 0, writeControlPlane); err != nil {
		return err
	}
	return r.waitUpgraded(r.version(1))
}

func configChangeWhilePaused(r *run) error {
	if err := r.apply(r.version(1), 0, writeMachinePool); err != nil {
		return err
	}
	if err := r.waitGate(string(skew.ControlPlaneOlder)); err != nil {
		return err
	}
	before, err := r.instanceNames()
	if err != nil {
		return err
	}
	const path = "/etc/capdmp-conformance/edited"
	if err := clusterops.AddBootstrapFile(r.ctx, r.c, path, "edited while the pool waits\n"); err != nil {
		return err
	}
	r.logf("added %s to the pool's bootstrap config while paused", path)
	if err := r.waitReplaced(before, r.version(0), r.s.Shape.PoolReplicas, r.o.Budgets.PoolUpgrade); err != nil {
		return err
	}
	if err := r.apply(r.version(1), 0, writeControlPlane); err != nil {
		return err
	}
	return r.waitUpgraded(r.version(1))
}

func poolAhead(r *run) error {
	before, err := r.instanceNames()
	if err != nil {
		return err
	}
	if err := r.apply(r.version(1), 0, writeMachinePool); err != nil {
		return err
	}
	if err := r.waitGate(string(skew.ControlPlaneOlder)); err != nil {
		return err
	}
	_, message, err := r.c.(Gated).Gate(r.ctx)
	if err != nil {
		return err
	}
	r.logf("the pool waits: %s", message)
	if !strings.Contains(message, r.version(0)) || !strings.Contains(message, r.version(1)) {
		return fmt.Errorf("the pool's word on why it waits names neither %s nor %s: %q", r.version(0), r.version(1), message)
	}
	if err := sleep(r.ctx, r.o.Budgets.Settle); err != nil {
		return err
	}
	if after, err := r.instanceNames(); err != nil || !slices.Equal(before, after) {
		return fmt.Errorf("the pool's instances changed while it waited: %v, then %v (%v)", before, after, err)
	}
	if err := r.apply(r.version(0), 0, writeMachinePool); err != nil {
		return err
	}
	if err := r.waitGate(""); err != nil {
		return err
	}
	if err := r.waitPool(r.version(0), r.s.Shape.PoolReplicas, r.o.Budgets.ClusterReady); err != nil {
		return err
	}
	if after, err := r.instanceNames(); err != nil || !slices.Equal(before, after) {
		return fmt.Errorf("set back, the pool replaced its instances: %v, then %v (%v)", before, after, err)
	}
	return nil
}

// Scenarios returns the table, in the order a tier should start them (the longest first): copies,
// which the caller may change.
func Scenarios() []Scenario {
	out := make([]Scenario, 0, len(table))
	for _, s := range table {
		out = append(out, s.copy())
	}
	return out
}

// Lookup returns a copy of the table's scenario named name.
func Lookup(name string) (Scenario, bool) {
	i := slices.IndexFunc(table, func(s Scenario) bool { return s.Name == name })
	if i < 0 {
		return Scenario{}, false
	}
	return table[i].copy(), true
}

func (s Scenario) copy() Scenario {
	s.Needs = slices.Clone(s.Needs)
	return s
}

// RunnableOn tells whether c implements every optional interface the scenario needs, and names
// those it lacks.
func (s Scenario) RunnableOn(c Cluster) (bool, []string) {
	var missing []string
	for _, n := range s.Needs {
		if !implements(c, n) {
			missing = append(missing, n)
		}
	}
	return len(missing) == 0, missing
}

// From is the version the scenario's cluster starts at, out of the caller's chain (oldest first):
// the oldest of the newest Shape.Versions.
func (s Scenario) From(versions []string) (string, error) {
	if len(versions) < s.Shape.Versions {
		return "", fmt.Errorf("scenario %s needs %d versions, got %v", s.Name, s.Shape.Versions, versions)
	}
	return versions[len(versions)-s.Shape.Versions], nil
}

// Budgets bound the scenario's waits: a caller sets them for its machines. A wait that passes its
// budget fails the run, saying where it stood.
type Budgets struct {
	// ClusterReady bounds the wait for a new cluster's first control-plane machine, and for its
	// pool.
	ClusterReady time.Duration
	// ControlPlaneMachine is added for each further control-plane machine.
	ControlPlaneMachine time.Duration
	// ControlPlaneUpgrade bounds a control plane's upgrade of its first machine.
	ControlPlaneUpgrade time.Duration
	// PoolUpgrade bounds the pool's rollout once the control plane is upgraded.
	PoolUpgrade time.Duration
	// Gate bounds the wait for the pool to say it waits.
	Gate time.Duration
	// Settle is how long a waiting pool is watched to create nothing.
	Settle time.Duration
}

// Options configure a scenario's run.
type Options struct {
	// Versions the caller can run, oldest first; the scenario uses the newest Shape.Versions.
	Versions []string
	// Interval between the monitor's samples; zero is a second. A violation shorter than it can
	// be missed.
	Interval time.Duration
	Budgets  Budgets
	// TokenTTL is the bootstrap token's TTL, which paused/outlives-token-ttl's pause outlives.
	TokenTTL time.Duration
	// Logf prints the scenario's steps; nil prints nothing.
	Logf func(format string, args ...any)
	// OnChange gets each sample that differs from the one before: the timeline. Nil ignores them.
	OnChange func(Sample)
	// AfterControlPlaneWait is called after each wait for the control plane, with its error: a
	// caller can record why a rollout stalled. Nil calls nothing.
	AfterControlPlaneWait func(error)
}

func (o Options) interval() time.Duration {
	if o.Interval <= 0 {
		return time.Second
	}
	return o.Interval
}

// Run runs the scenario on c, which the caller made in s.Shape at s.From(o.Versions): it
// samples c from the start (Observer, else the contract), waits for the cluster to be ready,
// runs the steps and stops. The error says which step failed, or that the monitor judged too
// little (Coverage.Blind); violations are in the report, for the caller to judge.
func (s Scenario) Run(ctx context.Context, c Cluster, o Options) (Report, error) {
	if ok, missing := s.RunnableOn(c); !ok {
		return Report{Scenario: s.Name}, fmt.Errorf("scenario %s needs %v of the cluster", s.Name, missing)
	}
	if _, err := s.From(o.Versions); err != nil {
		return Report{Scenario: s.Name}, err
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	r := &run{ctx: ctx, s: s, c: c, o: o, versions: o.Versions[len(o.Versions)-s.Shape.Versions:]}
	r.watch = Watch(ctx, c, o)
	err := r.waitReady()
	if err == nil {
		err = s.steps(r)
	}
	report := r.watch.Stop()
	report.Scenario = s.Name
	if blind := report.Coverage.Blind(); blind != "" {
		err = errors.Join(err, fmt.Errorf("%s (%s)", blind, report.Coverage))
	}
	return report, err
}

// run is one scenario's run on one cluster: the steps scenarios are made of.
type run struct {
	ctx      context.Context //nolint:containedctx // a run's steps share its context
	s        Scenario
	c        Cluster
	o        Options
	versions []string
	watch    *Watcher
}

// version is the i-th version of the scenario's chain: 0 is where it starts.
func (r *run) version(i int) string { return r.versions[i] }

func (r *run) logf(format string, args ...any) { r.o.Logf(format, args...) }

func (r *run) waitReady() error {
	replicas := r.s.Shape.ControlPlaneReplicas
	budget := r.o.Budgets.ClusterReady + time.Duration(replicas-1)*r.o.Budgets.ControlPlaneMachine
	if err := r.waitControlPlane(r.version(0), replicas, budget); err != nil {
		return err
	}
	return r.waitPool(r.version(0), r.s.Shape.PoolReplicas, r.o.Budgets.ClusterReady)
}

// apply writes version to the objects in order, gap apart, as kubectl apply or helm upgrade.
func (r *run) apply(version string, gap time.Duration, writes ...write) error {
	if slices.Contains(writes, writeControlPlane) || slices.Contains(writes, writeMachinePool) {
		if err := r.c.MakeVersionAvailable(r.ctx, version); err != nil {
			return fmt.Errorf("making %s available to the pool: %w", version, err)
		}
	}
	for i, w := range writes {
		if i > 0 {
			if err := sleep(r.ctx, gap); err != nil {
				return err
			}
		}
		var err error
		switch w {
		case writeControlPlane:
			if w, ok := r.c.(ControlPlaneWriter); ok {
				err = w.SetControlPlaneVersion(r.ctx, version)
			} else {
				err = clusterops.SetControlPlaneVersion(r.ctx, r.c, version)
			}
		case writeMachinePool:
			err = clusterops.SetMachinePool(r.ctx, r.c, "version "+version, func(mp *clusterv1.MachinePool) { mp.Spec.Template.Spec.Version = version })
		case writeImage:
			w, ok := r.c.(ImageWriter)
			if !ok {
				return fmt.Errorf("scenario %s writes the pool's image, and the cluster is no ImageWriter", r.s.Name)
			}
			err = w.SetImage(r.ctx, version)
		}
		if err != nil {
			return err
		}
		r.logf("applied %s = %s", w, version)
	}
	return nil
}

// upgrade applies version and waits until the control plane and the pool run it.
func (r *run) upgrade(version string, gap time.Duration, writes ...write) error {
	if err := r.apply(version, gap, writes...); err != nil {
		return err
	}
	return r.waitUpgraded(version)
}

func (r *run) waitUpgraded(version string) error {
	replicas := r.s.Shape.ControlPlaneReplicas
	if err := r.waitControlPlane(version, replicas, r.o.Budgets.ControlPlaneUpgrade+time.Duration(replicas-1)*r.o.Budgets.ControlPlaneMachine); err != nil {
		return err
	}
	poolReplicas := r.s.Shape.PoolReplicas
	mp := &clusterv1.MachinePool{}
	if err := r.c.Client().Get(r.ctx, r.c.MachinePool(), mp); err == nil {
		poolReplicas = ptr.Deref(mp.Spec.Replicas, poolReplicas)
	}
	return r.waitPool(version, poolReplicas, r.o.Budgets.PoolUpgrade)
}

// waitControlPlane waits until the control plane runs version on replicas machines.
func (r *run) waitControlPlane(version string, replicas int32, timeout time.Duration) error {
	r.logf("waiting for the control plane at %s x%d", version, replicas)
	err := clusterops.WaitFor(r.ctx, timeout, func(p string) { r.logf("%s", p) }, func(ctx context.Context) (bool, string, error) {
		return controlPlaneAt(ctx, r.c, version, replicas)
	})
	if r.o.AfterControlPlaneWait != nil {
		r.o.AfterControlPlaneWait(err)
	}
	if err != nil {
		return fmt.Errorf("control plane at %s: %w", version, err)
	}
	return nil
}

// waitPool waits until the pool has replicas ready instances of version.
func (r *run) waitPool(version string, replicas int32, timeout time.Duration) error {
	r.logf("waiting for the pool at %s x%d", version, replicas)
	err := clusterops.WaitFor(r.ctx, timeout, func(p string) { r.logf("%s", p) }, func(ctx context.Context) (bool, string, error) {
		return poolAt(ctx, r.c, version, replicas)
	})
	if err != nil {
		return fmt.Errorf("pool at %s: %w", version, err)
	}
	return nil
}

// waitGate waits until the pool says it waits for reason ("": it does not wait).
func (r *run) waitGate(reason string) error {
	gated := r.c.(Gated)
	err := clusterops.WaitFor(r.ctx, r.o.Budgets.Gate, nil, func(ctx context.Context) (bool, string, error) {
		got, _, err := gated.Gate(ctx)
		return got == reason, got, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the pool to wait with %q: %w", reason, err)
	}
	r.logf("the pool's gate: %q", reason)
	return nil
}

// waitReplaced waits until no instance of before is left and the pool runs replicas of version.
func (r *run) waitReplaced(before []string, version string, replicas int32, timeout time.Duration) error {
	r.logf("waiting for the pool's %d instances to be replaced at %s", len(before), version)
	err := clusterops.WaitFor(r.ctx, timeout, func(p string) { r.logf("%s", p) }, func(ctx context.Context) (bool, string, error) {
		names, err := r.instanceNames()
		if err != nil {
			return false, "", err
		}
		if left := slices.DeleteFunc(names, func(n string) bool { return !slices.Contains(before, n) }); len(left) > 0 {
			return false, fmt.Sprintf("not replaced yet: %v", left), nil
		}
		return poolAt(ctx, r.c, version, replicas)
	})
	if err != nil {
		return fmt.Errorf("replacing the instances at %s: %w", version, err)
	}
	return nil
}

func (r *run) instanceNames() ([]string, error) {
	instances, err := r.c.Instances(r.ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(instances))
	for _, i := range instances {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	return names, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
