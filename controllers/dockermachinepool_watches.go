package controllers

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/pkg/skew"
)

// poolsOfCluster returns a request for every DockerMachinePool of a Cluster. A map function cannot
// return an error, so a failed List is logged: the event is lost, and the log says why a pool
// did not react to it.
func (r *DockerMachinePoolReconciler) poolsOfCluster(ctx context.Context, namespace, clusterName string) []reconcile.Request {
	if clusterName == "" {
		return nil
	}
	pools := &infrav1.DockerMachinePoolList{}
	if err := r.Client.List(ctx, pools, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: clusterName}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list DockerMachinePools to reconcile for the Cluster", "Cluster", klog.KRef(namespace, clusterName))
		return nil
	}
	out := make([]reconcile.Request, 0, len(pools.Items))
	for _, p := range pools.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return out
}

// controlPlaneToPools maps a control plane to the pools of its Cluster: the gate re-opens on the
// control plane's status change, not on a periodic requeue.
func (r *DockerMachinePoolReconciler) controlPlaneToPools(ctx context.Context, o client.Object) []reconcile.Request {
	clusterName := o.GetLabels()[clusterv1.ClusterNameLabel]
	if clusterName == "" {
		for _, ref := range o.GetOwnerReferences() {
			if ref.Kind == "Cluster" {
				clusterName = ref.Name
			}
		}
	}
	return r.poolsOfCluster(ctx, o.GetNamespace(), clusterName)
}

// kubeadmConfigToPools maps a KubeadmConfig to the pools of its Cluster (Cluster API labels a
// MachinePool's bootstrap config with it): a pool waiting for fresh data resumes when CABPK writes
// a new token into the spec, after it rewrote the data Secret, and an edited KubeadmConfig is a
// configuration the pool has CABPK render.
func (r *DockerMachinePoolReconciler) kubeadmConfigToPools(ctx context.Context, o client.Object) []reconcile.Request {
	return r.poolsOfCluster(ctx, o.GetNamespace(), o.GetLabels()[clusterv1.ClusterNameLabel])
}

// controlPlaneVersionsChanged passes control plane events that can change the gate's decision.
type controlPlaneVersionsChanged struct {
	predicate.Funcs
}

func (controlPlaneVersionsChanged) Create(event.CreateEvent) bool { return true }

func (controlPlaneVersionsChanged) Update(e event.UpdateEvent) bool {
	oldObj, okOld := e.ObjectOld.(*unstructured.Unstructured)
	newObj, okNew := e.ObjectNew.(*unstructured.Unstructured)
	if !okOld || !okNew {
		return true
	}
	return skew.ControlPlaneVersionsChanged(oldObj, newObj)
}

func (controlPlaneVersionsChanged) Delete(event.DeleteEvent) bool { return true }

func (controlPlaneVersionsChanged) Generic(event.GenericEvent) bool { return false }

// machineToPool maps a Machine of this provider's MachinePool Machines to its DockerMachinePool,
// through the DockerMachinePoolMachine it references and that machine's owner reference.
func (r *DockerMachinePoolReconciler) machineToPool(ctx context.Context, o client.Object) []reconcile.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok || m.Spec.InfrastructureRef.Kind != "DockerMachinePoolMachine" || m.Spec.InfrastructureRef.APIGroup != infrav1.GroupVersion.Group {
		return nil
	}
	infraMachine := &infrav1.DockerMachinePoolMachine{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}, infraMachine); err != nil {
		if !apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).Error(err, "Failed to get the DockerMachinePoolMachine of a Machine", "Machine", klog.KObj(m))
		}
		return nil
	}
	for _, ref := range infraMachine.OwnerReferences {
		if ref.Kind == "DockerMachinePool" && ref.APIVersion == infrav1.GroupVersion.String() {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}}}
		}
	}
	return nil
}

// remediationRequested passes Machine updates that hand a Machine to its owner for remediation
// or take it back: the pool does not follow other changes of its Machines.
type remediationRequested struct {
	predicate.Funcs
}

func (remediationRequested) Create(event.CreateEvent) bool { return false }

func (remediationRequested) Update(e event.UpdateEvent) bool {
	oldMachine, okOld := e.ObjectOld.(*clusterv1.Machine)
	newMachine, okNew := e.ObjectNew.(*clusterv1.Machine)
	if !okOld || !okNew {
		return false
	}
	return collections.IsUnhealthyAndOwnerRemediated(oldMachine) != collections.IsUnhealthyAndOwnerRemediated(newMachine) ||
		conditions.IsTrue(oldMachine, clusterv1.MachineHealthCheckSucceededCondition) != conditions.IsTrue(newMachine, clusterv1.MachineHealthCheckSucceededCondition)
}

func (remediationRequested) Delete(event.DeleteEvent) bool { return false }

func (remediationRequested) Generic(event.GenericEvent) bool { return false }
