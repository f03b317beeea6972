package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
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

// bootstrapSecretToPools maps a bootstrap data Secret to the pools of its Cluster, so that a pool
// waiting for fresh data resumes when the bootstrap provider rewrites it.
func (r *DockerMachinePoolReconciler) bootstrapSecretToPools(ctx context.Context, o client.Object) []reconcile.Request {
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
