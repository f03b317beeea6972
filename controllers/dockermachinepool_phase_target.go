package controllers

import (
	"context"

	pkgerrors "github.com/pkg/errors"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/nodeimage"
	"github.com/capdmp/capdmp/pkg/skew"
)

// reconcileTarget computes the image the pool would create now and records its Kubernetes version
// as a label on the pool. A target that cannot be computed is not an error of the reconcile: it is
// a user's input to fix, reported by the gate as InvalidVersion.
func (r *DockerMachinePoolReconciler) reconcileTarget(_ context.Context, s *poolScope) (ctrl.Result, error) {
	s.targetImage, s.targetVersion, s.targetErr = targetOf(s)
	if s.targetErr != nil {
		delete(s.pool.Labels, infrav1.KubernetesVersionLabel)
		return ctrl.Result{}, nil //nolint:nilerr // the user's input to fix: the gate reports it as InvalidVersion instead of a retry loop
	}
	label, err := skew.VersionLabelValue(s.targetVersion)
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.pool.Labels == nil {
		s.pool.Labels = map[string]string{}
	}
	s.pool.Labels[infrav1.KubernetesVersionLabel] = label
	return ctrl.Result{}, nil
}

// targetOf returns the image the pool would create now and the Kubernetes version its tag names.
// The version is read by nodeimage.VersionOfImage, the check the webhook applies to customImage,
// so that the two never disagree on an image.
//
// The MachinePool's version is optional in Cluster API and in the gate: with customImage set, the
// image's tag is the target and the MachinePool's version, if any, is only compared with it
// (VersionMismatch). Without either there is no image to choose.
func targetOf(s *poolScope) (image, version string, err error) {
	machinePoolVersion, customImage := s.machinePool.Spec.Template.Spec.Version, s.pool.Spec.Template.CustomImage
	if machinePoolVersion == "" && customImage == "" {
		return "", "", pkgerrors.New("cannot choose the node image: set the MachinePool's spec.template.spec.version or the DockerMachinePool's spec.template.customImage")
	}
	image, err = nodeimage.ImageForVersion(machinePoolVersion, customImage)
	if err != nil {
		return "", "", pkgerrors.Wrap(err, "cannot choose the node image")
	}
	version, err = nodeimage.VersionOfImage(image)
	if err != nil {
		return "", "", err
	}
	return image, version, nil
}
