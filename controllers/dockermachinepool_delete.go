package controllers

import (
	"context"

	"github.com/pkg/errors"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// reconcileDelete removes every container of the pool, including those whose objects are already
// gone, and every DockerMachinePoolMachine, then releases the pool. The MachinePool is being
// deleted as a whole, so containers go directly, without a drain per Machine.
func (r *DockerMachinePoolReconciler) reconcileDelete(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	for _, i := range s.instances {
		log.Info("Deleting container", "container", i.name())
		if err := r.Runtime.Delete(ctx, i.name()); err != nil {
			return ctrl.Result{}, errors.Wrapf(err, "failed to delete container %s", i.name())
		}
		r.eventf(s.pool, "Normal", "DeletedContainer", "Deleted container %s", i.name())
	}
	remaining := 0
	for _, i := range s.instances {
		if i.machine != nil {
			remaining++
			if err := r.Client.Delete(ctx, i.machine); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, errors.Wrapf(err, "failed to delete DockerMachinePoolMachine %s", klog.KObj(i.machine))
			}
		}
	}
	for _, m := range s.orphanMachines {
		remaining++
		if err := r.Client.Delete(ctx, m); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, errors.Wrapf(err, "failed to delete DockerMachinePoolMachine %s", klog.KObj(m))
		}
	}
	if remaining > 0 {
		// Their deletion is watched (they are owned by the pool): the pool is reconciled again.
		return ctrl.Result{}, nil
	}
	s.instances = nil
	controllerutil.RemoveFinalizer(s.pool, infrav1.MachinePoolFinalizer)
	return ctrl.Result{}, nil
}
