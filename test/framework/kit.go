package framework

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/clusterops"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/pkg/skew"
)

// KitCluster is the cluster as the conformance kit sees any provider's: the contract, and the
// cluster's worker containers, each about to run or running the kubelet of its image's tag.
// CAPDMP's and upstream CAPD's pools both make their nodes from kindest/node:<version> with
// kind's labels. Of the kit's optional interfaces it has only ControlPlaneWriter, which belongs to
// the control plane Template makes, not to the pool's provider.
type KitCluster struct{ c *Cluster }

// KitCluster returns the conformance kit's view of the cluster.
func (c *Cluster) KitCluster() KitCluster { return KitCluster{c: c} }

var (
	_ conformance.Cluster            = KitCluster{}
	_ conformance.ControlPlaneWriter = KitCluster{}
	_ conformance.ControlPlaneWriter = &Cluster{}
)

// Client implements conformance.Cluster.
func (k KitCluster) Client() client.Client { return k.c.w.Client }

// MachinePool implements conformance.Cluster.
func (k KitCluster) MachinePool() client.ObjectKey {
	return client.ObjectKey{Namespace: k.c.Namespace, Name: k.c.Pool}
}

// Instances lists the cluster's worker containers with the version of their image's tag.
func (k KitCluster) Instances(ctx context.Context) ([]conformance.Instance, error) {
	workers, err := k.c.Engine.List(ctx, map[string]string{container.KindClusterLabel: k.c.Name, container.KindRoleLabel: container.KindWorkerRole})
	if err != nil {
		return nil, err
	}
	instances := make([]conformance.Instance, 0, len(workers))
	for _, w := range workers {
		v, err := skew.VersionFromImageTag(w.Image)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", w.Name, err)
		}
		instances = append(instances, conformance.Instance{Name: w.Name, Version: v})
	}
	return instances, nil
}

// SetControlPlaneVersion implements conformance.ControlPlaneWriter (Cluster.SetControlPlaneVersion).
func (k KitCluster) SetControlPlaneVersion(ctx context.Context, version string) error {
	return k.c.SetControlPlaneVersion(ctx, version)
}

// MakeVersionAvailable checks that the node image of version is on the engine.
func (k KitCluster) MakeVersionAvailable(ctx context.Context, version string) error {
	return k.c.CAPDMPPool.MakeVersionAvailable(ctx, version)
}

// PoolAt tells whether c's MachinePool has replicas instances, all of version, each ready with a
// Node: the wait of the kit's scenarios, for tests that drive a pool themselves.
func PoolAt(ctx context.Context, c conformance.Cluster, version string, replicas int32) (bool, string, error) {
	versions := func(ctx context.Context) ([]string, error) {
		instances, err := c.Instances(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]string, 0, len(instances))
		for _, i := range instances {
			out = append(out, i.Version)
		}
		return out, nil
	}
	return clusterops.PoolAt(ctx, c, versions, version, replicas)
}
