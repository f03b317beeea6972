package controllers

import (
	"context"

	pkgerrors "github.com/pkg/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
)

// poolUID is the UID the pool's containers carry: the one its PoolUIDAnnotation recorded (its
// UID in the management cluster it was made in, which clusterctl move does not keep), else its
// own.
func poolUID(pool *infrav1.DockerMachinePool) string {
	if uid := pool.Annotations[infrav1.PoolUIDAnnotation]; uid != "" {
		return uid
	}
	return string(pool.UID)
}

// carriesPool says whether the container carries the pool's identity: the pool's own UID, which
// no one can choose, or the UID its annotation recorded together with the pool's namespace. The
// annotation can be written by whoever may create a pool; the namespace keeps it from reaching
// the containers of another namespace's pools.
func carriesPool(c container.Container, pool *infrav1.DockerMachinePool) bool {
	uid := c.Labels[infrav1.PoolUIDLabel]
	if uid == string(pool.UID) {
		return true
	}
	return uid == pool.Annotations[infrav1.PoolUIDAnnotation] && c.Labels[infrav1.NamespaceLabel] == pool.Namespace
}

// recordPoolUID writes the pool's UID in its PoolUIDAnnotation, once: from then on its containers
// are found by it, also after clusterctl move gave the pool another UID.
func recordPoolUID(ctx context.Context, c client.Client, pool *infrav1.DockerMachinePool) error {
	if _, ok := pool.Annotations[infrav1.PoolUIDAnnotation]; ok {
		return nil
	}
	helper, err := patch.NewHelper(pool, c)
	if err != nil {
		return pkgerrors.Wrapf(err, "failed to record the UID of DockerMachinePool %s", klog.KObj(pool))
	}
	annotations.AddAnnotations(pool, map[string]string{infrav1.PoolUIDAnnotation: string(pool.UID)})
	if err := helper.Patch(ctx, pool); err != nil {
		return pkgerrors.Wrapf(err, "failed to record the UID of DockerMachinePool %s", klog.KObj(pool))
	}
	return nil
}
