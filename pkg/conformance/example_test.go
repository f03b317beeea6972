package conformance_test

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/pkg/conformance"
)

// launchTemplateCluster is how a provider whose instances come from machine images (a launch
// template per version) answers the kit for one workload cluster: each instance's version is its
// image's, a new version needs a new image first, and the pool's image is written apart from the
// MachinePool's version. It says why its pool waits (Gated); it cannot restart its controllers
// nor tell the bootstrap data each instance used, so the scenarios that need those are skipped.
type launchTemplateCluster struct {
	management client.Client
	pool       client.ObjectKey
	// cloud stands for the provider's own API.
	cloud *cloud
}

// cloud is the provider's API as the example fakes it.
type cloud struct {
	imageVersion map[string]string // instance ID -> Kubernetes version of its machine image
	template     string            // the launch template's Kubernetes version
	waiting      string            // why the pool holds its template back, "" when it does not
}

var (
	_ conformance.Cluster     = launchTemplateCluster{}
	_ conformance.Gated       = launchTemplateCluster{}
	_ conformance.ImageWriter = launchTemplateCluster{}
)

func (c launchTemplateCluster) Client() client.Client { return c.management }

func (c launchTemplateCluster) MachinePool() client.ObjectKey { return c.pool }

// Instances lists the instances the cloud runs for the pool, from the moment they exist.
func (c launchTemplateCluster) Instances(context.Context) ([]conformance.Instance, error) {
	instances := make([]conformance.Instance, 0, len(c.cloud.imageVersion))
	for id, v := range c.cloud.imageVersion {
		instances = append(instances, conformance.Instance{Name: id, Version: v})
	}
	return instances, nil
}

// MakeVersionAvailable would build or look up the machine image of version.
func (c launchTemplateCluster) MakeVersionAvailable(context.Context, string) error { return nil }

// Gate is the pool's waiting reason ("ControlPlaneOlder") and its condition's message.
func (c launchTemplateCluster) Gate(context.Context) (string, string, error) {
	return c.cloud.waiting, "the launch template stays at the control plane's version", nil
}

// SetImage writes the launch template's image, as a user's apply would.
func (c launchTemplateCluster) SetImage(_ context.Context, version string) error {
	c.cloud.template = version
	return nil
}

// runScenario is a provider's e2e step for one scenario: a cluster of the scenario's shape at its
// first version, the run, and the verdict. newCluster makes the workload cluster (the provider's
// own e2e code) and returns the kit's view of it.
func runScenario(ctx context.Context, s conformance.Scenario, versions []string,
	newCluster func(from string, shape conformance.Shape) (launchTemplateCluster, error)) error {
	from, err := s.From(versions)
	if err != nil {
		return err
	}
	c, err := newCluster(from, s.Shape)
	if err != nil {
		return err
	}
	if s.Shape.CustomImage {
		if err := c.SetImage(ctx, from); err != nil {
			return err
		}
	}
	report, err := s.Run(ctx, c, conformance.Options{
		Versions: versions, Interval: 100 * time.Millisecond, TokenTTL: 15 * time.Minute,
		Budgets: conformance.Budgets{ClusterReady: 20 * time.Minute, ControlPlaneMachine: 10 * time.Minute,
			ControlPlaneUpgrade: 30 * time.Minute, PoolUpgrade: 20 * time.Minute, Gate: 5 * time.Minute, Settle: time.Minute},
		Logf:     func(format string, args ...any) { fmt.Printf(format+"\n", args...) },
		OnChange: func(s conformance.Sample) { fmt.Println(s) },
	})
	if err != nil {
		return err // a step failed, or the monitor could not judge most of its samples
	}
	for _, v := range report.Violations {
		fmt.Println("VIOLATION", v)
	}
	if len(report.Violations) > 0 {
		return fmt.Errorf("%s: %d violations of the skew policy (%s)", s.Name, len(report.Violations), report.Coverage)
	}
	return nil
}

// A provider's e2e suite runs every scenario of the table that its Cluster can run, each on a
// cluster it makes in the scenario's shape at the scenario's first version. Here no management
// cluster is at hand: the example shows which scenarios this provider runs, and on what.
func Example() {
	versions := []string{"v1.36.3", "v1.37.2"} // the chain the suite has images of, oldest first
	var management client.Client               // the e2e suite's management cluster, nil here
	for _, s := range conformance.Scenarios() {
		from, err := s.From(versions)
		if err != nil {
			fmt.Printf("%-34s skipped: %v\n", s.Name, err)
			continue
		}
		if ok, missing := s.RunnableOn(launchTemplateCluster{}); !ok {
			fmt.Printf("%-34s skipped: needs %v\n", s.Name, missing)
			continue
		}
		fmt.Printf("%-34s control plane x%d, pool x%d at %s\n", s.Name, s.Shape.ControlPlaneReplicas, s.Shape.PoolReplicas, from)
		if management == nil {
			continue
		}
		newCluster := func(from string, _ conformance.Shape) (launchTemplateCluster, error) {
			// The provider's e2e code applies its cluster template in shape at from here.
			return launchTemplateCluster{management: management, pool: client.ObjectKey{Namespace: "e2e", Name: "workers"},
				cloud: &cloud{imageVersion: map[string]string{}, template: from}}, nil
		}
		if err := runScenario(context.Background(), s, versions, newCluster); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// both-at-once/3-node-controlplane   control plane x3, pool x1 at v1.36.3
	// both-at-once/controlplane-first    control plane x1, pool x2 at v1.36.3
	// both-at-once/machinepool-first     control plane x1, pool x2 at v1.36.3
	// both-at-once/machinepool-2s-first  control plane x1, pool x2 at v1.36.3
	// both-at-once/image-first           control plane x1, pool x2 at v1.36.3
	// both-at-once/image-between         control plane x1, pool x2 at v1.36.3
	// paused/outlives-token-ttl          skipped: needs [BootstrapRecorder]
	// paused/scale-and-replace           control plane x1, pool x2 at v1.36.3
	// both-at-once/chain-of-two          skipped: scenario both-at-once/chain-of-two needs 3 versions, got [v1.36.3 v1.37.2]
	// pool-alone/ahead-and-back          control plane x1, pool x1 at v1.36.3
	// paused/config-change               control plane x1, pool x2 at v1.36.3
	// paused/provider-restart            skipped: needs [Restarter]
}
