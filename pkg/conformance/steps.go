package conformance

import (
	"context"

	"github.com/capdmp/capdmp/internal/clusterops"
)

// The scenarios' steps act as a user's apply does, through the Cluster API contract only
// (internal/clusterops): they read and write the MachinePool, its Cluster's control plane and its
// bootstrap config.

// controlPlaneAt tells whether the control plane runs version on replicas machines: a Cluster
// that is a ControlPlaneWaiter answers for itself, else the contract's status.versions does.
func controlPlaneAt(ctx context.Context, c Cluster, version string, replicas int32) (bool, string, error) {
	if w, ok := c.(ControlPlaneWaiter); ok {
		return w.ControlPlaneAt(ctx, version, replicas)
	}
	return clusterops.ControlPlaneAt(ctx, c, version)
}

// poolAt tells whether the MachinePool has replicas instances, all of version, each ready with a
// Node.
func poolAt(ctx context.Context, c Cluster, version string, replicas int32) (bool, string, error) {
	return clusterops.PoolAt(ctx, c, instanceVersions(c), version, replicas)
}

// instanceVersions reads the versions of c's instances.
func instanceVersions(c Pool) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		instances, err := c.Instances(ctx)
		if err != nil {
			return nil, err
		}
		versions := make([]string, 0, len(instances))
		for _, i := range instances {
			versions = append(versions, i.Version)
		}
		return versions, nil
	}
}
