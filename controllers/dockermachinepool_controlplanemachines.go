package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	pkgerrors "github.com/pkg/errors"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/skew"
)

// The proof that a control-plane machine is gone is read from CAPD's DockerMachines: their
// containers are on the pools' engine, named by CAPD's rule (dockerMachineContainerName). A
// control plane on any other infrastructure keeps today's rule: its status decides.
const (
	dockerMachineGroup = "infrastructure.cluster.x-k8s.io"
	dockerMachineKind  = "DockerMachine"
	// goneMachineRecheck is how soon a pool waiting for its control plane looks again while one
	// of its control-plane machines is being deleted and not proven gone yet: the events that
	// wake it (the Machine's, the engine's) may come before the last piece of proof.
	goneMachineRecheck = 500 * time.Millisecond
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=dockermachines,verbs=get

// deletedControlPlaneMachine is what the reconciler remembers of a control-plane Machine it saw
// being deleted, to prove it gone once the Machine itself is gone too.
type deletedControlPlaneMachine struct {
	version       string
	infraRef      clusterv1.ContractVersionedObjectReference
	containerName string
}

// deletedControlPlaneMachines remembers, per Cluster, the control-plane Machines seen being
// deleted. Memory only: after a restart a Machine already gone is unknown, and the gate keeps
// the control plane's status.
type deletedControlPlaneMachines struct {
	mu        sync.Mutex
	byCluster map[types.NamespacedName]map[string]deletedControlPlaneMachine
}

func (d *deletedControlPlaneMachines) remember(cluster types.NamespacedName, name string, m deletedControlPlaneMachine) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byCluster == nil {
		d.byCluster = map[types.NamespacedName]map[string]deletedControlPlaneMachine{}
	}
	if d.byCluster[cluster] == nil {
		d.byCluster[cluster] = map[string]deletedControlPlaneMachine{}
	}
	d.byCluster[cluster][name] = m
}

func (d *deletedControlPlaneMachines) of(cluster types.NamespacedName) map[string]deletedControlPlaneMachine {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]deletedControlPlaneMachine, len(d.byCluster[cluster]))
	for name, m := range d.byCluster[cluster] {
		out[name] = m
	}
	return out
}

// forgetUnless drops the Cluster's machines whose version the control plane no longer reports:
// they can narrow nothing any more.
func (d *deletedControlPlaneMachines) forgetUnless(cluster types.NamespacedName, reported []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, m := range d.byCluster[cluster] {
		if !reportsVersion(reported, m.version) {
			delete(d.byCluster[cluster], name)
		}
	}
	if len(d.byCluster[cluster]) == 0 {
		delete(d.byCluster, cluster)
	}
}

func reportsVersion(reported []string, version string) bool {
	v, err := skew.CanonicalVersion(version)
	if err != nil {
		return true
	}
	for _, r := range reported {
		if c, err := skew.CanonicalVersion(r); err == nil && c == v {
			return true
		}
	}
	return false
}

// errNotProven says why the control-plane machines cannot be accounted for: the gate then keeps
// what the control plane reports.
var errNotProven = errors.New("control-plane machines not accounted for")

// controlPlaneWithoutGoneMachines narrows what the control plane reports to the versions whose
// machines may still run (skew.ControlPlane.WithoutGoneMachines): a control-plane Machine is gone
// when it is being deleted (or was seen so and is gone), its DockerMachine is not found on a live
// read and the engine has no container for it. Every control-plane container of the Cluster on
// the engine must belong to a Machine listed now, or nothing is narrowed. It returns the
// Machines proven gone, and whether one is being deleted and not proven gone yet.
func (r *DockerMachinePoolReconciler) controlPlaneWithoutGoneMachines(ctx context.Context, cluster *clusterv1.Cluster, cp skew.ControlPlane) (_ skew.ControlPlane, gone []string, pending bool, _ error) {
	clusterKey := client.ObjectKeyFromObject(cluster)
	defer r.deletedControlPlaneMachines.forgetUnless(clusterKey, cp.Versions)

	// Live: a Machine the cache has not seen yet may run an old kube-apiserver.
	machines := &clusterv1.MachineList{}
	if err := r.APIReader.List(ctx, machines, client.InNamespace(cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}, client.HasLabels{clusterv1.MachineControlPlaneLabel}); err != nil {
		return cp, nil, false, pkgerrors.Wrapf(err, "failed to list the control-plane Machines of Cluster %s", klog.KObj(cluster))
	}
	containers, err := r.Runtime.List(ctx, map[string]string{container.KindClusterLabel: cluster.Name, container.KindRoleLabel: container.KindControlPlaneRole})
	if err != nil {
		return cp, nil, false, pkgerrors.Wrapf(err, "failed to list the control-plane containers of Cluster %s", klog.KObj(cluster))
	}

	listed := map[string]bool{}
	var known []skew.ControlPlaneMachine
	var doubt []string
	for i := range machines.Items {
		m := &machines.Items[i]
		name := dockerMachineContainerName(cluster.Name, m.Name)
		listed[name] = true
		if m.DeletionTimestamp.IsZero() {
			known = append(known, skew.ControlPlaneMachine{Name: m.Name, Version: m.Spec.Version})
			continue
		}
		if m.Spec.InfrastructureRef.APIGroup != dockerMachineGroup || m.Spec.InfrastructureRef.Kind != dockerMachineKind {
			doubt = append(doubt, fmt.Sprintf("Machine %s is on %s", m.Name, m.Spec.InfrastructureRef.Kind))
			known = append(known, skew.ControlPlaneMachine{Name: m.Name, Version: m.Spec.Version})
			continue
		}
		r.deletedControlPlaneMachines.remember(clusterKey, m.Name, deletedControlPlaneMachine{
			version: m.Spec.Version, infraRef: m.Spec.InfrastructureRef, containerName: name})
	}
	for _, c := range containers {
		if !listed[c.Name] {
			return cp, nil, false, pkgerrors.Wrapf(errNotProven, "control-plane container %s belongs to no control-plane Machine of the Cluster", c.Name)
		}
	}
	if len(doubt) > 0 {
		return cp, nil, false, pkgerrors.Wrap(errNotProven, strings.Join(doubt, "; "))
	}

	for name, m := range r.deletedControlPlaneMachines.of(clusterKey) {
		proven, err := r.provenGone(ctx, cluster.Namespace, m)
		if err != nil {
			return cp, nil, false, err
		}
		pending = pending || !proven
		known = append(known, skew.ControlPlaneMachine{Name: name, Version: m.version, Gone: proven})
	}
	narrowed, gone := cp.WithoutGoneMachines(known)
	return narrowed, gone, pending, nil
}

// provenGone tells whether a deleted control-plane machine's DockerMachine is not found on a live
// read and the engine has no container by its name.
func (r *DockerMachinePoolReconciler) provenGone(ctx context.Context, namespace string, m deletedControlPlaneMachine) (bool, error) {
	if _, err := r.Runtime.Inspect(ctx, m.containerName); !errors.Is(err, container.ErrNotFound) {
		if err != nil {
			return false, pkgerrors.Wrapf(err, "failed to look for control-plane container %s", m.containerName)
		}
		return false, nil
	}
	_, err := external.GetObjectFromContractVersionedRef(ctx, r.APIReader, m.infraRef, namespace)
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsNotFound(pkgerrors.Cause(err)):
		return true, nil
	default:
		return false, pkgerrors.Wrapf(err, "failed to look for %s %s", m.infraRef.Kind, klog.KRef(namespace, m.infraRef.Name))
	}
}

// dockerMachineContainerName is the name CAPD gives the container of a control-plane Machine's
// DockerMachine: the Machine's name, prefixed with the Cluster's unless it already is.
func dockerMachineContainerName(clusterName, machineName string) string {
	if strings.HasPrefix(machineName, clusterName) {
		return machineName
	}
	return clusterName + "-" + machineName
}

// poolsWaitingForControlPlane returns a request for every DockerMachinePool of the named Cluster,
// in namespace (all namespaces when empty: the engine's labels carry no namespace), whose gate
// waits for its control plane: those a control-plane machine's removal can re-open.
func (r *DockerMachinePoolReconciler) poolsWaitingForControlPlane(ctx context.Context, namespace, clusterName string) []reconcile.Request {
	if clusterName == "" {
		return nil
	}
	pools := &infrav1.DockerMachinePoolList{}
	if err := r.Client.List(ctx, pools, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: clusterName}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list DockerMachinePools waiting for the control plane", "cluster", clusterName)
		return nil
	}
	var out []reconcile.Request
	for _, p := range pools.Items {
		if p.Status.VersionGate.WaitingReason == string(skew.ControlPlaneOlder) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
		}
	}
	return out
}

// controlPlaneMachineToPools maps a control-plane Machine to the pools of its Cluster that wait
// for the control plane.
func (r *DockerMachinePoolReconciler) controlPlaneMachineToPools(ctx context.Context, o client.Object) []reconcile.Request {
	return r.poolsWaitingForControlPlane(ctx, o.GetNamespace(), o.GetLabels()[clusterv1.ClusterNameLabel])
}

// controlPlaneMachineDeleting passes the events of control-plane Machines being deleted: each
// step of a deletion (the DockerMachine gone, the Node deleted, the Machine gone) may complete
// the proof that the Machine's kube-apiserver no longer runs.
type controlPlaneMachineDeleting struct {
	predicate.Funcs
}

func isControlPlaneMachine(o client.Object) bool {
	_, ok := o.GetLabels()[clusterv1.MachineControlPlaneLabel]
	return ok
}

func (controlPlaneMachineDeleting) Create(event.CreateEvent) bool { return false }

func (controlPlaneMachineDeleting) Update(e event.UpdateEvent) bool {
	return isControlPlaneMachine(e.ObjectNew) && !e.ObjectNew.GetDeletionTimestamp().IsZero()
}

func (controlPlaneMachineDeleting) Delete(e event.DeleteEvent) bool {
	return isControlPlaneMachine(e.Object)
}

func (controlPlaneMachineDeleting) Generic(event.GenericEvent) bool { return false }

// watchControlPlaneContainers wakes the pools waiting for a control plane when one of its
// containers is destroyed, from the engine's events: the destroy is the moment its
// kube-apiserver is gone for good. The stream is opened again after it ends, from the last
// event seen; what happens in between is noticed through the Machines.
func (r *DockerMachinePoolReconciler) watchControlPlaneContainers(watcher container.Watcher) func(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return func(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		log := ctrl.LoggerFrom(ctx).WithValues("controller", "dockermachinepool")
		go func() {
			since := time.Now()
			for ctx.Err() == nil {
				changes, errs := watcher.Watch(ctx, map[string]string{container.KindRoleLabel: container.KindControlPlaneRole}, since)
				for e := range changes {
					since = e.At
					if e.Action != "destroy" {
						continue
					}
					for _, req := range r.poolsWaitingForControlPlane(ctx, "", e.Attributes[container.KindClusterLabel]) {
						queue.Add(req)
					}
				}
				if err := <-errs; ctx.Err() == nil {
					log.Error(err, "Watching the engine's control-plane containers; watching again in 5s")
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Second):
					}
				}
			}
		}()
		return nil
	}
}
