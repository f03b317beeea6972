package controllers

import (
	"fmt"

	pkgerrors "github.com/pkg/errors"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
)

// updateStatus computes the pool's status from what this reconcile saw, given the error it
// ended with. It runs on every reconcile, failed or not, so that a condition never sticks:
// ReplicasReady is derived from the containers each time, never carried over (Cluster API issue
// #10541).
func (r *DockerMachinePoolReconciler) updateStatus(s *poolScope, reconcileErr error) error {
	pool := s.pool
	pool.Status.InfrastructureMachineKind = "DockerMachinePoolMachine"
	// Whatever the rest says, an engine that does not answer is what the user must act on.
	defer markEngineUnavailable(pool, reconcileErr)

	if !s.inventoryListed {
		conditions.Set(pool, metaCondition(infrav1.ReadyCondition, false, infrav1.InventoryUnknownReason, "The pool's containers could not be listed"))
		return nil
	}
	if !pool.DeletionTimestamp.IsZero() {
		conditions.Set(pool, metaCondition(infrav1.ReadyCondition, false, infrav1.DeletingReason,
			fmt.Sprintf("Deleting %d containers", len(s.instances))))
		return nil
	}

	// Per-container state lives on each DockerMachinePoolMachine; the pool carries only what the
	// MachinePool contract asks: counts and the ready containers' provider IDs.
	active := s.active()
	var ready int32
	providerIDs := make([]string, 0, len(active))
	for _, i := range active {
		if i.ready() {
			ready++
			providerIDs = append(providerIDs, providerID(i.name()))
		}
	}
	pool.Status.Replicas = ptr.To(int32(len(active)))
	pool.Status.ReadyReplicas = ptr.To(ready)
	pool.Spec.ProviderIDList = providerIDs
	if len(providerIDs) == 0 {
		pool.Spec.ProviderIDList = nil
	}
	if pool.Spec.ProviderID == "" {
		pool.Spec.ProviderID = fmt.Sprintf("docker:////%s-%s", s.cluster.Name, pool.Name)
	}
	// The pool can host containers once it has been inventoried; the contract makes this one-way.
	pool.Status.Initialization.Provisioned = ptr.To(true)
	pool.Status.Ready = true

	desired := s.desiredReplicas()
	switch {
	case len(active) < desired:
		conditions.Set(pool, metaCondition(infrav1.ReplicasReadyCondition, false, infrav1.ScalingUpReason,
			fmt.Sprintf("Scaling up to %d replicas (%d exist, %d ready)", desired, len(active), ready)))
	case len(active) > desired:
		conditions.Set(pool, metaCondition(infrav1.ReplicasReadyCondition, false, infrav1.ScalingDownReason,
			fmt.Sprintf("Scaling down to %d replicas (%d exist, %d ready)", desired, len(active), ready)))
	case int(ready) < desired:
		conditions.Set(pool, metaCondition(infrav1.ReplicasReadyCondition, false, infrav1.WaitingForReplicasReadyReason,
			fmt.Sprintf("%d of %d replicas ready", ready, desired)))
	default:
		conditions.Set(pool, metaCondition(infrav1.ReplicasReadyCondition, true, infrav1.ReplicasReadyReason, notRolledOut(s, active)))
	}
	if conditions.Get(pool, infrav1.MachinesCreatedCondition) == nil {
		setMachinesCreated(s, creationPlan{})
	}

	// Ready summarises what a user must act on or wait for. The version gate waiting is not a
	// failure of the pool, so it is reported through ReplicasReady/MachinesCreated, not Ready;
	// nor is data that is not fresh while the pool has all it needs: data that holds a creation
	// back says so in MachinesCreated.
	if err := conditions.SetSummaryCondition(pool, pool, infrav1.ReadyCondition,
		conditions.ForConditionTypes{infrav1.ReplicasReadyCondition, infrav1.MachinesCreatedCondition},
	); err != nil {
		return pkgerrors.Wrap(err, "failed to summarise the Ready condition")
	}
	return nil
}

// markEngineUnavailable sets obj's Ready condition to say that the container engine does not
// answer, when err says so.
func markEngineUnavailable(obj conditions.Setter, err error) {
	if !pkgerrors.Is(err, container.ErrEngineUnavailable) {
		return
	}
	conditions.Set(obj, metaCondition(infrav1.ReadyCondition, false, infrav1.EngineUnavailableReason,
		"The container engine does not answer; retrying: "+err.Error()))
}

// notRolledOut says why outdated containers are not replaced when the MachinePool's replicas are
// unset (replaceable), empty otherwise.
func notRolledOut(s *poolScope, active []*instance) string {
	if !s.replicasUnset() {
		return ""
	}
	outdated := 0
	for _, i := range active {
		if s.outdated(i) {
			outdated++
		}
	}
	if outdated == 0 {
		return ""
	}
	return fmt.Sprintf("Not replacing outdated containers (%d): the MachinePool's spec.replicas is unset; set it to roll the pool out", outdated)
}
