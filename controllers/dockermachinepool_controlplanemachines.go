package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	"sigs.k8s.io/cluster-api/util/conditions"
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
	// wake it (the Machine's, the engine's) may come before the last piece of proof. The wait
	// grows with the time the deletion has been pending, up to goneMachineRecheckMax: a deletion
	// that hangs (a drain, a pre-terminate hook) must not reconcile every waiting pool of the
	// Cluster twice a second, and the watches still wake the pool on each step of it.
	goneMachineRecheck    = 500 * time.Millisecond
	goneMachineRecheckMax = 30 * time.Second
)

// goneMachineRecheckAfter is how soon to look again at a deletion pending for so long: the first
// seconds at goneMachineRecheck, then about as long again as it has been pending (a doubling
// back-off), never more than goneMachineRecheckMax.
func goneMachineRecheckAfter(pendingFor time.Duration) time.Duration {
	return min(max(pendingFor, goneMachineRecheck), goneMachineRecheckMax)
}

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=dockermachines,verbs=get

// deletedControlPlaneMachine is what the reconciler remembers of a control-plane Machine it saw
// being deleted, to prove it gone once the Machine itself is gone too.
type deletedControlPlaneMachine struct {
	// versions are those it may have run (controlPlaneMachineVersions).
	versions      []string
	infraRef      clusterv1.ContractVersionedObjectReference
	containerName string
	// seenDeleting is when a reconcile first saw it being deleted.
	seenDeleting time.Time
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
	if known, ok := d.byCluster[cluster][name]; ok {
		m.seenDeleting = known.seenDeleting
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
		if !slices.ContainsFunc(m.versions, func(v string) bool { return reportsVersion(reported, v) }) {
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
// the engine must belong to a Machine listed now, and every Machine not being deleted must say
// which versions it runs (controlPlaneMachineVersions), or nothing is narrowed. It returns the
// Machines proven gone, and for how long the oldest deletion not proven yet has been pending
// (zero when none is).
func (r *DockerMachinePoolReconciler) controlPlaneWithoutGoneMachines(ctx context.Context, cluster *clusterv1.Cluster, cp skew.ControlPlane) (_ skew.ControlPlane, gone []string, pendingFor time.Duration, _ error) {
	clusterKey := client.ObjectKeyFromObject(cluster)
	defer r.deletedControlPlaneMachines.forgetUnless(clusterKey, cp.Versions)

	// Live: a Machine the cache has not seen yet may run an old kube-apiserver.
	machines := &clusterv1.MachineList{}
	if err := r.APIReader.List(ctx, machines, client.InNamespace(cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}, client.HasLabels{clusterv1.MachineControlPlaneLabel}); err != nil {
		return cp, nil, 0, pkgerrors.Wrapf(err, "failed to list the control-plane Machines of Cluster %s", klog.KObj(cluster))
	}
	containers, err := r.Runtime.List(ctx, map[string]string{container.KindClusterLabel: cluster.Name, container.KindRoleLabel: container.KindControlPlaneRole})
	if err != nil {
		return cp, nil, 0, pkgerrors.Wrapf(err, "failed to list the control-plane containers of Cluster %s", klog.KObj(cluster))
	}

	listed := map[string]bool{}
	var known []skew.ControlPlaneMachine
	var doubt []string
	for i := range machines.Items {
		m := &machines.Items[i]
		name := dockerMachineContainerName(cluster.Name, m.Name)
		listed[name] = true
		versions, unknown := controlPlaneMachineVersions(m)
		switch {
		case m.DeletionTimestamp.IsZero() && unknown != "":
			doubt = append(doubt, unknown)
		case m.DeletionTimestamp.IsZero():
			known = append(known, skew.ControlPlaneMachine{Name: m.Name, Versions: versions})
		case m.Spec.InfrastructureRef.APIGroup != dockerMachineGroup || m.Spec.InfrastructureRef.Kind != dockerMachineKind:
			doubt = append(doubt, fmt.Sprintf("Machine %s is on %s", m.Name, m.Spec.InfrastructureRef.Kind))
		default:
			r.deletedControlPlaneMachines.remember(clusterKey, m.Name, deletedControlPlaneMachine{
				versions: versions, infraRef: m.Spec.InfrastructureRef, containerName: name, seenDeleting: r.clock()})
		}
	}
	for _, c := range containers {
		if !listed[c.Name] {
			return cp, nil, 0, pkgerrors.Wrapf(errNotProven, "control-plane container %s belongs to no control-plane Machine of the Cluster", c.Name)
		}
	}
	if len(doubt) > 0 {
		return cp, nil, 0, pkgerrors.Wrap(errNotProven, strings.Join(doubt, "; "))
	}

	for name, m := range r.deletedControlPlaneMachines.of(clusterKey) {
		proven, err := r.provenGone(ctx, cluster.Namespace, m)
		if err != nil {
			return cp, nil, 0, err
		}
		if !proven {
			pendingFor = max(pendingFor, r.clock().Sub(m.seenDeleting), time.Nanosecond)
		}
		known = append(known, skew.ControlPlaneMachine{Name: name, Versions: m.versions, Gone: proven})
	}
	narrowed, gone := cp.WithoutGoneMachines(known)
	return narrowed, gone, pendingFor, nil
}

// controlPlaneMachineVersions are the versions a control-plane Machine may run now: its
// spec.version and its Node's kubelet version, which is what KubeadmControlPlane reports of it
// (Cluster API's version.VersionsFromMachines). They differ while the Machine is updated in place:
// its spec.version moves before its kubelet and kube-apiserver do. unknown says why they cannot
// be told (an in-place update in progress, a Node that has not reported), empty when they can.
func controlPlaneMachineVersions(m *clusterv1.Machine) (versions []string, unknown string) {
	if m.Spec.Version != "" {
		versions = append(versions, m.Spec.Version)
	}
	if m.Status.NodeInfo != nil && m.Status.NodeInfo.KubeletVersion != "" {
		versions = append(versions, m.Status.NodeInfo.KubeletVersion)
	}
	_, updating := m.Annotations[clusterv1.UpdateInProgressAnnotation]
	switch {
	case updating || conditions.IsTrue(m, clusterv1.MachineUpdatingCondition):
		return versions, fmt.Sprintf("Machine %s is being updated in place", m.Name)
	case m.Status.NodeInfo == nil || m.Status.NodeInfo.KubeletVersion == "":
		return versions, fmt.Sprintf("the Node of Machine %s has not reported its kubelet version", m.Name)
	}
	return versions, ""
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
