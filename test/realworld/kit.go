package realworld

import (
	"context"
	"fmt"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/skew"
)

// KitPool is the conformance kit's view of a cluster's pool on this engine: its worker
// containers, each about to run or running the kubelet of its image's tag. CAPDMP's and upstream
// CAPD's pools both make their nodes from kindest/node:<version> with kind's labels.
type KitPool struct {
	c      *Cluster
	engine *container.Docker
}

// KitPool returns the conformance kit's view of the cluster's pool; Close releases it.
func (c *Cluster) KitPool() (*KitPool, error) {
	engine, err := container.NewDocker()
	if err != nil {
		return nil, err
	}
	return &KitPool{c: c, engine: engine}, nil
}

// Close closes the pool's engine client.
func (p *KitPool) Close() error { return p.engine.Close() }

// InstanceVersions lists the version of each worker container of the cluster.
func (p *KitPool) InstanceVersions(ctx context.Context) ([]string, error) {
	workers, err := p.engine.List(ctx, map[string]string{container.KindClusterLabel: p.c.Name, container.KindRoleLabel: container.KindWorkerRole})
	if err != nil {
		return nil, err
	}
	versions := make([]string, 0, len(workers))
	for _, w := range workers {
		v, err := skew.VersionFromImageTag(w.Image)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", w.Name, err)
		}
		versions = append(versions, v)
	}
	return versions, nil
}

// MakeVersionAvailable checks that the node image of version is on the engine: images are built
// here, never pulled.
func (p *KitPool) MakeVersionAvailable(ctx context.Context, version string) error {
	image := "kindest/node:" + version
	ok, err := p.engine.ImageExists(ctx, image)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s is not on the engine (make node-images builds it)", image)
	}
	return nil
}
