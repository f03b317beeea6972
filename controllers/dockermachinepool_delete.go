package controllers

import (
	"context"

	pkgerrors "github.com/pkg/errors"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/metrics"
)

// reconcileDelete removes the pool: each container through its Machine as on a scale-down (so
// Cluster API drains and deletes the Node, and Machines do not outlive the pool), and, once no
// DockerMachinePoolMachine is left, every container still carrying the pool's UID, including
// those whose objects were already gone. Then it releases the pool.
func (r *DockerMachinePoolReconciler) reconcileDelete(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	remaining := 0
	for _, i := range s.instances {
		if i.machine == nil {
			continue
		}
		remaining++
		if i.deleting() {
			continue
		}
		if err := r.deleteMachine(ctx, s, i.name(), i.machine); err != nil {
			return ctrl.Result{}, err
		}
	}
	for _, m := range s.orphanMachines {
		remaining++
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.deleteMachine(ctx, s, m.Name, m); err != nil {
			return ctrl.Result{}, err
		}
	}
	if remaining > 0 {
		// Their deletion is watched (the pool owns them): the pool is reconciled again.
		log.Info("Waiting for the pool's machines to be deleted", "machines", remaining)
		return ctrl.Result{}, nil
	}

	for _, i := range s.instances {
		log.Info("Deleting container", "container", i.name())
		if err := r.Runtime.Delete(ctx, i.name()); err != nil {
			return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to delete container %s", i.name())
		}
		r.eventf(s.pool, corev1.EventTypeNormal, "DeletedContainer", "Deleted container %s", i.name())
	}
	s.instances = nil
	controllerutil.RemoveFinalizer(s.pool, infrav1.MachinePoolFinalizer)
	metrics.ForgetPool(s.pool.Namespace, s.pool.Name)
	return ctrl.Result{}, nil
}
