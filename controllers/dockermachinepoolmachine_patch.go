package controllers

import (
	"context"

	pkgerrors "github.com/pkg/errors"
	"k8s.io/apimachinery/pkg/api/equality"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// patchMachine writes what one reconcile changed on a DockerMachinePoolMachine: its status in one
// merge patch, then its metadata (labels, finalizer) in another, each only when it changed.
//
// Cluster API's patch helper, which the pool uses, writes conditions and the rest of the status
// as two patches, and the reconcile that the first one wakes may read the object between them and
// write the second part again. A pool makes one machine per instance, each through the same few
// steps, so that doubling is what a pool of thousands writes. The helper's separate conditions
// patch merges with conditions that other controllers own; a machine's status has one writer,
// this controller, which computes it on every reconcile from the container and its Node, so one
// patch that replaces the conditions as computed here loses nothing.
func patchMachine(ctx context.Context, c client.Client, before, after *infrav1.DockerMachinePoolMachine) error {
	// The machine whose last finalizer this reconcile removes is gone once that patch lands.
	going := !after.DeletionTimestamp.IsZero() && len(after.Finalizers) == 0
	var errs []error
	if !going && !equality.Semantic.DeepEqual(before.Status, after.Status) {
		original := before.DeepCopy()
		original.ObjectMeta, original.Spec = after.ObjectMeta, after.Spec
		if err := c.Status().Patch(ctx, after.DeepCopy(), client.MergeFrom(original)); err != nil {
			errs = append(errs, pkgerrors.Wrapf(err, "failed to patch the status of DockerMachinePoolMachine %s", klog.KObj(after)))
		}
	}
	if !equality.Semantic.DeepEqual(before.ObjectMeta, after.ObjectMeta) || !equality.Semantic.DeepEqual(before.Spec, after.Spec) {
		modified := after.DeepCopy()
		modified.Status = *before.Status.DeepCopy()
		if err := c.Patch(ctx, modified, client.MergeFrom(before)); err != nil {
			errs = append(errs, pkgerrors.Wrapf(err, "failed to patch DockerMachinePoolMachine %s", klog.KObj(after)))
		}
	}
	return kerrors.NewAggregate(errs)
}
