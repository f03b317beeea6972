package controllers

import (
	"context"

	"github.com/pkg/errors"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/nodeimage"
	"github.com/capdmp/capdmp/pkg/skew"
)

// reconcileTarget computes the image the pool would create now and records its Kubernetes version
// as a label on the pool. A target that cannot be computed is not an error of the reconcile: it is
// a user's input to fix, reported by the gate as InvalidVersion.
func (r *DockerMachinePoolReconciler) reconcileTarget(_ context.Context, s *poolScope) (ctrl.Result, error) {
	s.targetImage, s.targetVersion, s.targetErr = "", "", nil

	image, err := nodeimage.ImageForVersion(s.machinePool.Spec.Template.Spec.Version, s.pool.Spec.Template.CustomImage)
	if err != nil {
		s.targetErr = errors.Wrap(err, "cannot choose the node image")
		delete(s.pool.Labels, infrav1.KubernetesVersionLabel)
		return ctrl.Result{}, nil
	}
	version, err := nodeimage.VersionOfImage(image)
	if err != nil {
		s.targetErr = err
		delete(s.pool.Labels, infrav1.KubernetesVersionLabel)
		return ctrl.Result{}, nil
	}
	label, err := skew.VersionLabelValue(version)
	if err != nil {
		s.targetErr = err
		delete(s.pool.Labels, infrav1.KubernetesVersionLabel)
		return ctrl.Result{}, nil
	}

	s.targetImage, s.targetVersion = image, version
	if s.pool.Labels == nil {
		s.pool.Labels = map[string]string{}
	}
	s.pool.Labels[infrav1.KubernetesVersionLabel] = label
	return ctrl.Result{}, nil
}
