package controllers

import (
	"context"
	"fmt"

	pkgerrors "github.com/pkg/errors"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/conditions"
	v1beta1conditions "sigs.k8s.io/cluster-api/util/conditions/deprecated/v1beta1"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// reconcileRemediationCandidates picks the pool's Machines that a MachineHealthCheck found
// unhealthy and handed to their owner (HealthCheckSucceeded and OwnerRemediated False), up to
// spec.remediation.maxInFlight counting those already being deleted, for reconcileRemediation to
// replace once the creation plan is known; planCreation counts them as gone, so that their
// replacements are planned with them. Machines found healthy again lose their OwnerRemediated
// condition.
func (r *DockerMachinePoolReconciler) reconcileRemediationCandidates(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	var errs []error
	var unhealthy []*instance
	for _, i := range s.active() {
		switch {
		case i.owner == nil:
		case collections.IsUnhealthyAndOwnerRemediated(i.owner):
			unhealthy = append(unhealthy, i)
		case conditions.IsTrue(i.owner, clusterv1.MachineHealthCheckSucceededCondition) && conditions.IsFalse(i.owner, clusterv1.MachineOwnerRemediatedCondition):
			if err := r.patchOwnerRemediated(ctx, i.owner, nil, nil); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return ctrl.Result{}, kerrors.NewAggregate(errs)
	}
	allowed := len(unhealthy)
	if limit, ok := s.maxRemediationsInFlight(); ok {
		inFlight := 0
		for _, i := range s.instances {
			if i.deleting() && i.owner != nil && conditions.GetReason(i.owner, clusterv1.MachineOwnerRemediatedCondition) == infrav1.MachineRemediationMachineDeletingReason {
				inFlight++
			}
		}
		allowed = min(max(limit-inFlight, 0), len(unhealthy))
		deferred := &metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse,
			Reason: infrav1.MachineRemediationDeferredReason, Message: fmt.Sprintf("Waiting for %d remediations in flight to finish (spec.remediation.maxInFlight %d)", inFlight, limit)}
		for _, i := range unhealthy[allowed:] {
			if err := r.patchOwnerRemediated(ctx, i.owner, deferred, nil); err != nil {
				errs = append(errs, err)
			}
		}
	}
	s.remediations = unhealthy[:allowed]
	return ctrl.Result{}, kerrors.NewAggregate(errs)
}

// reconcileRemediation replaces the Machines reconcileRemediationCandidates picked, as a
// MachineSet does for its own: it records on each Machine that it is being deleted, then deletes
// it, so that Cluster API drains its Node; scale-up then makes the replacement under the gate's
// decision of that moment (the last admitted version while the gate is closed). A Machine is
// deleted only when its replacement can be made now: whatever holds the creation back (the gate,
// bootstrap data missing, unreadable or waiting for a refresh, a host path refused, a missing
// image) defers the remediation rather than only remove capacity.
func (r *DockerMachinePoolReconciler) reconcileRemediation(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var candidates []*instance
	for _, i := range s.remediations {
		if !i.deleting() {
			candidates = append(candidates, i)
		}
	}
	if len(candidates) == 0 {
		return ctrl.Result{}, nil
	}

	blocked := ""
	if plan := s.creation; plan.count > 0 {
		switch {
		case plan.blockedReason != "":
			// planCreation sets it whenever the gate admits no image, so an unblocked plan has one.
			blocked = plan.blockedMessage
		default:
			_, refusal, err := r.verifyCreation(ctx, s, plan.image, plan.version)
			if err != nil {
				return ctrl.Result{}, err
			}
			if refusal != nil {
				blocked = refusal.message
			}
		}
	}
	var errs []error
	if blocked != "" {
		deferred := &metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse,
			Reason: infrav1.MachineRemediationDeferredReason, Message: "Waiting until the pool can create a replacement: " + blocked}
		for _, i := range candidates {
			if err := r.patchOwnerRemediated(ctx, i.owner, deferred, nil); err != nil {
				errs = append(errs, err)
			}
		}
		return ctrl.Result{}, kerrors.NewAggregate(errs)
	}

	// The condition first, the deletion second: a reconcile cut short between the two finds the
	// Machine again and deletes it, and a deleted Machine always says why.
	deleting := &metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse,
		Reason: infrav1.MachineRemediationMachineDeletingReason, Message: "Machine is deleting"}
	// The MachineHealthCheck still reads the v1beta1 condition to hand a Machine over again; a
	// MachineSet sets it True here too.
	deletingV1Beta1 := &clusterv1.Condition{Type: clusterv1.MachineOwnerRemediatedV1Beta1Condition, Status: corev1.ConditionTrue} //nolint:staticcheck // see above
	for _, i := range candidates {
		if err := r.patchOwnerRemediated(ctx, i.owner, deleting, deletingV1Beta1); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("Deleting an unhealthy Machine to replace it", "Machine", klog.KObj(i.owner), "container", i.name(), "version", i.version())
		r.eventf(s.pool, corev1.EventTypeNormal, "RemediatingMachine", "Deleting Machine %s (container %s), found unhealthy, to replace it", i.owner.Name, i.name())
		if err := r.deleteMachine(ctx, s, i.name(), i.machine); err != nil {
			errs = append(errs, err)
		}
	}
	return ctrl.Result{}, kerrors.NewAggregate(errs)
}

// patchOwnerRemediated sets the OwnerRemediated conditions of a Machine, or removes the v1beta2 one
// when condition is nil, owning only those conditions in the patch. It changes a copy: the
// inventory's Machines share their conditions with the cache.
func (r *DockerMachinePoolReconciler) patchOwnerRemediated(ctx context.Context, machine *clusterv1.Machine, condition *metav1.Condition, v1beta1Condition *clusterv1.Condition) error { //nolint:staticcheck // the MachineHealthCheck reads v1beta1 conditions too
	machine = machine.DeepCopy()
	helper, err := patch.NewHelper(machine, r.Client)
	if err != nil {
		return pkgerrors.Wrapf(err, "failed to patch Machine %s", klog.KObj(machine))
	}
	if condition == nil {
		conditions.Delete(machine, clusterv1.MachineOwnerRemediatedCondition)
	} else {
		conditions.Set(machine, *condition)
	}
	if v1beta1Condition != nil {
		v1beta1conditions.Set(machine, v1beta1Condition)
	}
	if err := helper.Patch(ctx, machine,
		patch.WithOwnedV1Beta1Conditions{Conditions: []clusterv1.ConditionType{clusterv1.MachineOwnerRemediatedV1Beta1Condition}}, //nolint:staticcheck // as above
		patch.WithOwnedConditions{Conditions: []string{clusterv1.MachineOwnerRemediatedCondition}}); err != nil {
		return pkgerrors.Wrapf(err, "failed to patch the OwnerRemediated condition of Machine %s", klog.KObj(machine))
	}
	return nil
}
