package conformance_test

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/pkg/conformance"
)

// launchTemplatePool is how a provider whose instances come from machine images would answer
// the kit: each instance's version is its image's, and a new version needs a new image first.
type launchTemplatePool struct {
	imageVersions map[string]string // instance ID -> Kubernetes version of its machine image
}

func (p launchTemplatePool) InstanceVersions(context.Context) ([]string, error) {
	versions := make([]string, 0, len(p.imageVersions))
	for _, v := range p.imageVersions {
		versions = append(versions, v)
	}
	return versions, nil
}

func (p launchTemplatePool) MakeVersionAvailable(_ context.Context, _ string) error {
	// e.g. look up or build the machine image of version, so the MachinePool can use it.
	return nil
}

// A provider runs the kit in its e2e suite against a cluster it made, with its own Pool.
func ExampleUpgradeBothAtOnce() {
	var management client.Client // the e2e suite's management cluster client
	if management == nil {
		return
	}
	report, err := conformance.UpgradeBothAtOnce(context.Background(), conformance.Input{
		Client:      management,
		MachinePool: client.ObjectKey{Namespace: "default", Name: "workers"},
		Pool:        launchTemplatePool{},
		To:          "v1.37.2",
		PoolFirst:   true,
		Interval:    time.Second,
		Timeout:     30 * time.Minute,
	})
	if err != nil {
		fmt.Println(err)
	}
	for _, v := range report.Violations {
		fmt.Println(v)
	}
}
