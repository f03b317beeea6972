package conformance_test

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/pkg/conformance"
)

// launchTemplateCluster is how a provider whose instances come from machine images would answer
// the kit: each instance's version is its image's, and a new version needs a new image first.
type launchTemplateCluster struct {
	management    client.Client
	imageVersions map[string]string // instance ID -> Kubernetes version of its machine image
}

func (c launchTemplateCluster) Client() client.Client { return c.management }

func (c launchTemplateCluster) MachinePool() client.ObjectKey {
	return client.ObjectKey{Namespace: "default", Name: "workers"}
}

func (c launchTemplateCluster) Instances(context.Context) ([]conformance.Instance, error) {
	instances := make([]conformance.Instance, 0, len(c.imageVersions))
	for id, v := range c.imageVersions {
		instances = append(instances, conformance.Instance{Name: id, Version: v})
	}
	return instances, nil
}

func (c launchTemplateCluster) MakeVersionAvailable(_ context.Context, _ string) error {
	// e.g. look up or build the machine image of version, so the MachinePool can use it.
	return nil
}

// A provider runs the table's scenarios in its e2e suite, each on a cluster it made in the
// scenario's shape, skipping those that need what it does not have.
func ExampleScenario_Run() {
	var management client.Client // the e2e suite's management cluster client
	if management == nil {
		return
	}
	versions := []string{"v1.36.3", "v1.37.2"}
	for _, s := range conformance.Scenarios {
		c := launchTemplateCluster{management: management} // made in s.Shape at s.From(versions)
		if ok, missing := s.RunnableOn(c); !ok {
			fmt.Printf("%s: needs %v\n", s.Name, missing)
			continue
		}
		report, err := s.Run(context.Background(), c, conformance.Options{
			Versions: versions, Interval: time.Second,
			Budgets: conformance.Budgets{ClusterReady: 20 * time.Minute, ControlPlaneMachine: 10 * time.Minute,
				ControlPlaneUpgrade: 30 * time.Minute, PoolUpgrade: 20 * time.Minute, Gate: 5 * time.Minute, Settle: time.Minute},
		})
		fmt.Printf("%s: %d violations, %s (%v)\n", s.Name, len(report.Monitor.Violations), report.Monitor.Coverage, err)
	}
}
