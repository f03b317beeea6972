package controllers

import (
	"context"
	"strings"

	pkgerrors "github.com/pkg/errors"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/labels/format"
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

// carriesPool says whether the container carries the pool's identity: the UID the pool recorded
// (its own, or the one its annotation kept across clusterctl move) together with its namespace
// and name. The annotation can be written by whoever may create a pool, and a pool copied with
// `kubectl get -o yaml` keeps it: the name, which two live pools of a namespace never share, keeps
// a copy from adopting, and deleting, the original's containers, and the original the copy's.
// Containers made before the namespace label existed carry the pool's own UID and name only.
func carriesPool(c container.Container, pool *infrav1.DockerMachinePool) bool {
	if c.Labels[infrav1.PoolNameLabel] != pool.Name {
		return false
	}
	uid, namespace := c.Labels[infrav1.PoolUIDLabel], c.Labels[infrav1.NamespaceLabel]
	if uid == string(pool.UID) && (namespace == "" || namespace == pool.Namespace) {
		return true
	}
	return uid == pool.Annotations[infrav1.PoolUIDAnnotation] && namespace == pool.Namespace
}

// machinePoolName is the name of the MachinePool that owns the pool: from the MachinePool when
// this reconcile read it, else from the pool's owner reference (during deletion the MachinePool
// may be gone); empty when neither says.
func (s *poolScope) machinePoolName() string {
	if s.machinePool != nil {
		return s.machinePool.Name
	}
	for _, ref := range s.pool.OwnerReferences {
		if ref.Kind == "MachinePool" && strings.HasPrefix(ref.APIVersion, clusterv1.GroupVersion.Group+"/") {
			return ref.Name
		}
	}
	return ""
}

// machineOfPool says whether a Machine is one the pool's MachinePool made: it carries the
// MachinePool's name label, as Cluster API labels a MachinePool's Machines. A Machine of another
// pool is never deleted, whatever its infrastructureRef names.
func (s *poolScope) machineOfPool(m *clusterv1.Machine) bool {
	name := s.machinePoolName()
	return name != "" && m.Labels[clusterv1.MachinePoolNameLabel] == format.MustFormatValue(name) &&
		(s.clusterName() == "" || m.Spec.ClusterName == s.clusterName())
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
