package realworld

import (
	"context"
	"fmt"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/pkg/skew"
)

// KitPool is the conformance kit's view of the cluster's pool on this engine: its worker
// containers, each about to run or running the kubelet of its image's tag. CAPDMP's and upstream
// CAPD's pools both make their nodes from kindest/node:<version> with kind's labels.
func (c *Cluster) KitPool() conformance.Pool { return kitPool{c: c} }

type kitPool struct{ c *Cluster }

func (p kitPool) InstanceVersions(ctx context.Context) ([]string, error) {
	engine, err := container.NewDocker()
	if err != nil {
		return nil, err
	}
	defer engine.Close()
	workers, err := engine.List(ctx, map[string]string{clusterLabel: p.c.Name, container.KindRoleLabel: container.KindWorkerRole})
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
func (p kitPool) MakeVersionAvailable(ctx context.Context, version string) error {
	engine, err := container.NewDocker()
	if err != nil {
		return err
	}
	defer engine.Close()
	image := "kindest/node:" + version
	ok, err := engine.ImageExists(ctx, image)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s is not on the engine (make node-images builds it)", image)
	}
	return nil
}

// clusterLabel is kind's cluster label, on every node of CAPD's and CAPDMP's.
const clusterLabel = "io.x-k8s.kind.cluster"
