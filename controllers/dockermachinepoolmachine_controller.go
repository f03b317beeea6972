package controllers

import (
	"bytes"
	"context"
	"fmt"
	"time"

	pkgerrors "github.com/pkg/errors"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/metrics"
	"github.com/capdmp/capdmp/internal/nodeimage"
	"github.com/capdmp/capdmp/pkg/skew"
)

// nodeBootRequeue is how often a container that is still booting is looked at: a kind node's
// systemd is up within seconds.
const nodeBootRequeue = time.Second

// unreadableDataRequeue is how often a container waits for bootstrap data its kubeadm can read:
// the data Secret has no watch here; the pool has it re-rendered.
const unreadableDataRequeue = 10 * time.Second

// A running bootstrap is looked at soon after its start, then less often as it runs on, up to
// bootstrapPollInterval: a join can be over in a second, or take tens of seconds, and each look is
// an inspect and an exec that hold a worker the pool's new containers wait for. One that an await
// follows (bootstrapEnds) is looked at when the await returns, and only every awaitedBootstrapPoll
// besides, in case the await hangs on an engine that does not answer.
const (
	firstBootstrapPoll    = 500 * time.Millisecond
	bootstrapPollInterval = 3 * time.Second
	awaitedBootstrapPoll  = 15 * time.Second
)

// bootstrapPollAfter is when to look again at a bootstrap that has run for elapsed: after half
// as long again, within [firstBootstrapPoll, bootstrapPollInterval].
func bootstrapPollAfter(elapsed time.Duration) time.Duration {
	return min(max(elapsed/2, firstBootstrapPoll), bootstrapPollInterval)
}

// +kubebuilder:rbac:groups=infrastructure.capdmp.dev,resources=dockermachinepoolmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=infrastructure.capdmp.dev,resources=dockermachinepoolmachines/status,verbs=patch

// DockerMachinePoolMachineReconciler reconciles the DockerMachinePoolMachine of each container:
// it bootstraps the container, reports its state, and removes it when the machine is deleted.
type DockerMachinePoolMachineReconciler struct {
	Client client.Client
	// APIReader reads the bootstrap data Secret live, never from a cache.
	APIReader client.Reader
	Runtime   container.Runtime
	// ClusterCache gives clients of workload clusters, to set the providerID of each machine's
	// Node. Without it Nodes are left as their kubelets register them.
	ClusterCache clustercache.ClusterCache
	// WatchFilterValue is the label value used to filter events prior to reconciliation.
	WatchFilterValue string

	recorder      record.EventRecorder
	bootstrapEnds *bootstrapEnds
}

// SetupWithManager sets up the controller with the Manager.
func (r *DockerMachinePoolMachineReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.APIReader == nil || r.Runtime == nil {
		return pkgerrors.New("Client, APIReader and Runtime must not be nil")
	}
	log := ctrl.LoggerFrom(ctx).WithValues("controller", "dockermachinepoolmachine")
	clusterToMachines, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.DockerMachinePoolMachineList{}, mgr.GetScheme())
	if err != nil {
		return pkgerrors.Wrap(err, "failed to create mapper for Cluster to DockerMachinePoolMachines")
	}
	r.bootstrapEnds = newBootstrapEnds(r.Runtime)
	if err := mgr.Add(r.bootstrapEnds); err != nil {
		return pkgerrors.Wrap(err, "failed to add the bootstrap awaits to the manager")
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.DockerMachinePoolMachine{}, builder.WithPredicates(machineChangedBeyondStatus{})).
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Watches(
			&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			builder.WithPredicates(predicates.ClusterPausedTransitions(mgr.GetScheme(), log)),
		).
		// A bootstrap that ends is looked at then, not at the next poll.
		WatchesRawSource(r.bootstrapEnds.source()).
		Complete(r)
	if err != nil {
		return pkgerrors.Wrap(err, "failed setting up the DockerMachinePoolMachine controller")
	}
	r.recorder = mgr.GetEventRecorderFor("dockermachinepoolmachine-controller")
	return nil
}

// machineChangedBeyondStatus passes a machine's events but the updates that change only its
// status. This controller is the status's one writer, and each write would otherwise wake the
// machine for a reconcile that finds what it has just written, at the cost of an inspect and a
// status exec in the container: with a pool's machines sharing the workers, those reconciles
// delay the first look at new containers. What a machine waits for comes back by the requeue its
// reconcile asked for, or the end of its bootstrap.
type machineChangedBeyondStatus struct {
	predicate.Funcs
}

func (machineChangedBeyondStatus) Update(e event.UpdateEvent) bool {
	oldMachine, okOld := e.ObjectOld.(*infrav1.DockerMachinePoolMachine)
	newMachine, okNew := e.ObjectNew.(*infrav1.DockerMachinePoolMachine)
	if !okOld || !okNew {
		return true
	}
	return !equality.Semantic.DeepEqual(withoutStatus(oldMachine), withoutStatus(newMachine))
}

// withoutStatus is a copy of the machine without its status and what the API server changes on
// every write.
func withoutStatus(m *infrav1.DockerMachinePoolMachine) *infrav1.DockerMachinePoolMachine {
	c := m.DeepCopy()
	c.Status = infrav1.DockerMachinePoolMachineStatus{}
	c.ResourceVersion, c.ManagedFields = "", nil
	return c
}

// machineScope is what one reconcile of a DockerMachinePoolMachine knows.
type machineScope struct {
	cluster *clusterv1.Cluster
	machine *infrav1.DockerMachinePoolMachine
	// pool is the machine's DockerMachinePool, once ownContainer has found the container its own.
	pool *infrav1.DockerMachinePool
}

// Reconcile reconciles one DockerMachinePoolMachine.
func (r *DockerMachinePoolMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	machine := &infrav1.DockerMachinePoolMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, machine); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to get DockerMachinePoolMachine %s", req.NamespacedName)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("Cluster", klog.KRef(machine.Namespace, machine.Labels[clusterv1.ClusterNameLabel]))
	ctx = ctrl.LoggerInto(ctx, log)

	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, machine.ObjectMeta)
	switch {
	case err == nil:
	case !machine.DeletionTimestamp.IsZero() && (apierrors.IsNotFound(pkgerrors.Cause(err)) || pkgerrors.Is(err, util.ErrNoCluster)):
		// Deletion does not wait for a Cluster that is gone: ownContainer still checks that the
		// container is this machine's before it is removed.
		log.V(4).Info("Cluster is gone, deleting the machine without it")
		cluster = nil
	default:
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to get the Cluster of DockerMachinePoolMachine %s", klog.KObj(machine))
	}
	if machine.DeletionTimestamp.IsZero() {
		if added, err := finalizers.EnsureFinalizer(ctx, r.Client, machine, infrav1.MachinePoolMachineFinalizer); err != nil || added {
			return ctrl.Result{}, err
		}
	}
	before := machine.DeepCopy()
	if cluster != nil {
		if annotations.IsPaused(cluster, machine) {
			// Cluster API's helper records the pause at once; nothing else is done.
			_, _, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, machine)
			return ctrl.Result{}, err
		}
		// Not paused: recorded with the rest of the status, in the reconcile's one write.
		conditions.Set(machine, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason})
	}

	s := &machineScope{cluster: cluster, machine: machine}
	defer func() {
		if err := conditions.SetSummaryCondition(machine, machine, infrav1.ReadyCondition,
			conditions.ForConditionTypes{infrav1.ContainerProvisionedCondition, infrav1.NodeProviderIDCondition},
			// The Node registers after the bootstrap: until then only the container speaks.
			conditions.IgnoreTypesIfMissing{infrav1.NodeProviderIDCondition}); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
		markEngineUnavailable(machine, reterr)
		// observedGeneration moves only when status reflects that generation.
		if reterr == nil {
			machine.Status.ObservedGeneration = machine.Generation
		}
		if err := patchMachine(ctx, r.Client, before, machine); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !machine.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

func (r *DockerMachinePoolMachineReconciler) reconcileDelete(ctx context.Context, s *machineScope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	conditions.Set(s.machine, metaCondition(infrav1.ContainerProvisionedCondition, false, infrav1.DeletingReason, "Deleting the container"))
	_, _, err := r.ownContainer(ctx, s.machine)
	switch {
	case pkgerrors.Is(err, container.ErrNotFound):
	case pkgerrors.Is(err, errNotOwned) || pkgerrors.Is(err, errNoOwnerPool):
		// The object goes, the container stays: it is not this machine's to remove. A pool's
		// own containers are removed by the pool's deletion, which lists them by its UID.
		r.refuseContainer(s.machine, err)
	case err != nil:
		return ctrl.Result{}, err
	default:
		log.Info("Deleting container", "container", s.machine.Name)
		if err := r.Runtime.Delete(ctx, s.machine.Name); err != nil {
			return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to delete container %s", s.machine.Name)
		}
	}
	controllerutil.RemoveFinalizer(s.machine, infrav1.MachinePoolMachineFinalizer)
	return ctrl.Result{}, nil
}

// errNotOwned: a container of the machine's name exists, but its pool did not make it.
var errNotOwned = pkgerrors.New("the container was not made by this machine's DockerMachinePool")

// errNoOwnerPool: the machine names no DockerMachinePool that exists, so no container is its own.
var errNoOwnerPool = pkgerrors.New("the machine's DockerMachinePool does not exist")

// ownContainer inspects the machine's container and checks that the DockerMachinePool owning the
// machine made it for the machine's Cluster: the container carries that pool's identity
// (carriesPool) and the Cluster's name. To the engine a DockerMachinePoolMachine is only a name: without the check,
// whoever may create one could have CAPDMP exec into or remove any container of the engine.
// It returns the container and that pool.
func (r *DockerMachinePoolMachineReconciler) ownContainer(ctx context.Context, machine *infrav1.DockerMachinePoolMachine) (container.Container, *infrav1.DockerMachinePool, error) {
	c, err := r.Runtime.Inspect(ctx, machine.Name)
	if err != nil {
		if pkgerrors.Is(err, container.ErrNotFound) {
			return container.Container{}, nil, err
		}
		return container.Container{}, nil, pkgerrors.Wrapf(err, "failed to inspect container %s", machine.Name)
	}
	pool, err := r.ownerPool(ctx, machine)
	if err != nil {
		return container.Container{}, nil, err
	}
	clusterName := machine.Labels[clusterv1.ClusterNameLabel]
	if !carriesPool(c, pool) || c.Labels[infrav1.ClusterNameLabel] != clusterName {
		return container.Container{}, nil, pkgerrors.Wrapf(errNotOwned, "container %s does not carry the labels of DockerMachinePool %s of Cluster %s",
			machine.Name, klog.KObj(pool), klog.KRef(machine.Namespace, clusterName))
	}
	return c, pool, nil
}

// refuseContainer reports, in a condition and an event, that the machine's container is left
// alone.
func (r *DockerMachinePoolMachineReconciler) refuseContainer(machine *infrav1.DockerMachinePoolMachine, err error) {
	msg := "Not acting on container " + machine.Name + ": " + err.Error()
	conditions.Set(machine, metaCondition(infrav1.ContainerProvisionedCondition, false, infrav1.ContainerNotOwnedReason, msg))
	r.eventf(machine, corev1.EventTypeWarning, infrav1.ContainerNotOwnedReason, "%s", msg)
}

func (r *DockerMachinePoolMachineReconciler) reconcileNormal(ctx context.Context, s *machineScope) (ctrl.Result, error) {
	machine := s.machine
	c, pool, err := r.ownContainer(ctx, machine)
	switch {
	case pkgerrors.Is(err, container.ErrNotFound):
		conditions.Set(machine, metaCondition(infrav1.ContainerProvisionedCondition, false, infrav1.ContainerNotFoundReason,
			"The container is gone; the pool removes this machine and replaces it"))
		return ctrl.Result{}, nil
	case pkgerrors.Is(err, errNotOwned) || pkgerrors.Is(err, errNoOwnerPool):
		r.refuseContainer(machine, err)
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	s.pool = pool
	machine.Status.Addresses = addressesOf(c)
	if !c.Running {
		msg := "The container does not run"
		if c.NeverStarted {
			msg = "The container was created and never started; the pool removes it and replaces it"
		}
		conditions.Set(machine, metaCondition(infrav1.ContainerProvisionedCondition, false, infrav1.ContainerNotRunningReason, msg))
		return ctrl.Result{}, nil
	}
	if ptr.Deref(machine.Status.Initialization.Provisioned, false) {
		conditions.Set(machine, metaCondition(infrav1.ContainerProvisionedCondition, true, infrav1.ContainerProvisionedReason, ""))
		return r.reconcileNodeProviderID(ctx, s)
	}
	if current := conditions.Get(machine, infrav1.ContainerProvisionedCondition); current != nil && current.Reason == infrav1.BootstrapFailedReason {
		return ctrl.Result{}, nil
	}
	// The node says how far its bootstrap went: a controller that restarted, or a status patch
	// that was lost, must never run kubeadm twice, and finds a bootstrap that still runs.
	status, err := bootstrap.Check(ctx, r.Runtime, machine.Name)
	if err != nil {
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to check the bootstrap of container %s", machine.Name)
	}
	switch status.State {
	case bootstrap.StateSucceeded:
		r.markProvisioned(machine)
		if status.Timed {
			metrics.BootstrapDuration.Observe(status.Elapsed.Seconds())
		}
		ctrl.LoggerFrom(ctx).Info("Bootstrapped container", "container", machine.Name, "ran", status.Elapsed)
		r.eventf(machine, corev1.EventTypeNormal, "Bootstrapped", "Bootstrapped container %s", machine.Name)
		return r.reconcileNodeProviderID(ctx, s)
	case bootstrap.StateBooting:
		conditions.Set(machine, metaCondition(infrav1.ContainerProvisionedCondition, false, infrav1.WaitingForNodeBootReason,
			"Waiting for the node's systemd and container runtime to start"))
		return ctrl.Result{RequeueAfter: nodeBootRequeue}, nil
	case bootstrap.StateRunning:
		return r.followBootstrap(ctx, s, status)
	case bootstrap.StateFailed:
		if status.Stopped {
			// Only followBootstrap stops a bootstrap, at the timeout; a reconcile that reads the
			// machine from before that patch (the bootstrap's end wakes it at once) says the same.
			r.markBootstrapFailed(machine, metrics.BootstrapTimedOut, timedOutMessage(bootstrapTimeoutOf(pool), status))
			return ctrl.Result{}, nil
		}
		r.markBootstrapFailed(machine, metrics.BootstrapStepFailed, failedBootstrapMessage(status))
		return ctrl.Result{}, nil
	case bootstrap.StateInterrupted:
		r.markBootstrapFailed(machine, metrics.BootstrapInterrupted, "The bootstrap started earlier and its runner is gone without a result (the container restarted); it is not run twice")
		return ctrl.Result{}, nil
	}
	return r.startBootstrap(ctx, s, c)
}

// startBootstrap starts the bootstrap data in the container, detached: followBootstrap waits for
// it in later reconciles, so a slow bootstrap holds no worker and survives a controller restart.
func (r *DockerMachinePoolMachineReconciler) startBootstrap(ctx context.Context, s *machineScope, c container.Container) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	machine := s.machine
	pool := s.pool
	machinePool, err := util.GetOwnerMachinePool(ctx, r.Client, pool.ObjectMeta)
	if err != nil || machinePool == nil {
		return ctrl.Result{}, pkgerrors.Errorf("failed to get the MachinePool of DockerMachinePool %s: %v", klog.KObj(pool), err)
	}
	name := ptr.Deref(machinePool.Spec.Template.Spec.Bootstrap.DataSecretName, "")
	if name == "" {
		conditions.Set(machine, metaCondition(infrav1.ContainerProvisionedCondition, false, infrav1.WaitingForBootstrapDataReason, "Waiting for the MachinePool's bootstrap data"))
		return ctrl.Result{}, nil
	}
	data, err := bootstrap.Read(ctx, r.APIReader, machine.Namespace, name)
	if err != nil {
		return ctrl.Result{}, pkgerrors.Wrap(err, "failed to read bootstrap data")
	}
	// The pool checked the data it created the container for; a re-render since may be for
	// another kubeadm API, which would fail this join for good. Wait for readable data instead.
	if version, err := skew.VersionFromLabelValue(c.Labels[infrav1.KubernetesVersionLabel]); err == nil {
		unreadable, err := unreadableBy(data, version)
		if err != nil {
			return ctrl.Result{}, err
		}
		if unreadable != "" {
			conditions.Set(machine, metaCondition(infrav1.ContainerProvisionedCondition, false, infrav1.WaitingForBootstrapDataReason,
				unreadable+"; waiting for data it can read"))
			return ctrl.Result{RequeueAfter: unreadableDataRequeue}, nil
		}
	}
	commands, err := bootstrap.Commands(data, bootstrap.Vars{Hostname: machine.Name, IgnorePreflightErrors: bootstrap.DefaultIgnorePreflightErrors})
	if err != nil {
		r.markBootstrapFailed(machine, metrics.BootstrapDataInvalid, "The bootstrap data cannot be run: "+err.Error())
		return ctrl.Result{}, nil
	}
	// The pool creates no container for data whose configuration it cannot compute; the data
	// may have changed since: the bootstrap waits for data it can label the container with.
	configuration, err := data.Configuration(ctx)
	if err != nil {
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to compute the configuration of the bootstrap data of container %s", machine.Name)
	}

	// Images are loaded before the bootstrap starts, within its timeout: kubeadm may need them.
	preloadCtx, cancel := context.WithTimeout(ctx, bootstrapTimeoutOf(pool))
	defer cancel()
	if err := r.preloadImages(preloadCtx, machine.Name, pool.Spec.Template.PreLoadImages); err != nil {
		r.markBootstrapFailed(machine, metrics.BootstrapImageLoadFailed, "Loading images failed: "+err.Error())
		return ctrl.Result{}, nil
	}
	if err := bootstrap.Start(ctx, r.Runtime, machine.Name, commands); err != nil {
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to start the bootstrap of container %s", machine.Name)
	}
	if machine.Labels == nil {
		machine.Labels = map[string]string{}
	}
	machine.Labels[infrav1.BootstrapDataHashLabel] = bootstrap.HashLabelValue(data.Hash)
	machine.Labels[infrav1.BootstrapConfigurationLabel] = configuration
	markBootstrapping(machine, bootstrapTimeoutOf(pool))
	log.Info("Started the bootstrap of container", "container", machine.Name)
	r.eventf(machine, corev1.EventTypeNormal, infrav1.BootstrappingReason, "Started the bootstrap of container %s", machine.Name)
	return ctrl.Result{RequeueAfter: r.awaitBootstrap(machine, bootstrapTimeoutOf(pool), 0)}, nil
}

// followBootstrap waits for a running bootstrap and stops it once it exceeds the pool's
// bootstrapTimeout.
func (r *DockerMachinePoolMachineReconciler) followBootstrap(ctx context.Context, s *machineScope, status bootstrap.Status) (ctrl.Result, error) {
	machine := s.machine
	timeout := bootstrapTimeoutOf(s.pool)
	if status.Elapsed <= timeout {
		markBootstrapping(machine, timeout)
		ctrl.LoggerFrom(ctx).V(4).Info("Bootstrap running", "container", machine.Name, "elapsed", status.Elapsed)
		// After a manager restart no await runs yet.
		return ctrl.Result{RequeueAfter: r.awaitBootstrap(machine, timeout-status.Elapsed+time.Second, status.Elapsed)}, nil
	}
	if err := bootstrap.Stop(ctx, r.Runtime, machine.Name); err != nil {
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to stop the bootstrap of container %s after %s", machine.Name, timeout)
	}
	// Read back what Stop recorded: the step it cut short and its output.
	stopped, err := bootstrap.Check(ctx, r.Runtime, machine.Name)
	if err != nil {
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to check the bootstrap of container %s", machine.Name)
	}
	r.markBootstrapFailed(machine, metrics.BootstrapTimedOut, timedOutMessage(timeout, stopped))
	return ctrl.Result{}, nil
}

// timedOutMessage says that the bootstrap was stopped at timeout, and which step it cut short.
func timedOutMessage(timeout time.Duration, stopped bootstrap.Status) string {
	msg := fmt.Sprintf("The bootstrap did not finish within %s", timeout)
	if stopped.State == bootstrap.StateFailed {
		msg += "; " + failedBootstrapMessage(stopped)
	}
	return msg
}

// awaitBootstrap has the machine looked at as soon as its bootstrap ends, within limit, and
// returns when to look at it again anyway, given how long the bootstrap has run: a reconciler
// that runs without a manager (tests) only polls.
func (r *DockerMachinePoolMachineReconciler) awaitBootstrap(machine *infrav1.DockerMachinePoolMachine, limit, elapsed time.Duration) time.Duration {
	if r.bootstrapEnds != nil && r.bootstrapEnds.follow(machine, limit) {
		return awaitedBootstrapPoll
	}
	return bootstrapPollAfter(elapsed)
}

// markBootstrapping reports a running bootstrap. The message does not change while it runs:
// each change is a patch, and each patch another reconcile.
func markBootstrapping(machine *infrav1.DockerMachinePoolMachine, timeout time.Duration) {
	conditions.Set(machine, metaCondition(infrav1.ContainerProvisionedCondition, false, infrav1.BootstrappingReason,
		fmt.Sprintf("The bootstrap runs in the container; it is stopped if it runs longer than %s", timeout)))
}

// bootstrapTimeoutOf is the pool's bootstrapTimeout, or the default when the webhook did not set it.
func bootstrapTimeoutOf(pool *infrav1.DockerMachinePool) time.Duration {
	if t := pool.Spec.Template.BootstrapTimeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return infrav1.DefaultBootstrapTimeout
}

// failedBootstrapMessage names the step of a failed bootstrap, its exit code and the end of its
// output: the output of kubeadm and friends, never the bootstrap data itself, with secrets
// redacted by bootstrap.ParseStatus.
func failedBootstrapMessage(status bootstrap.Status) string {
	msg := "Bootstrap step " + status.Step + " exited with code " + itoa(status.ExitCode)
	if status.Stopped {
		msg = "Bootstrap step " + status.Step + " was stopped"
	}
	if len(status.Output) > 0 {
		msg += ": " + string(status.Output)
	}
	return msg
}

func (r *DockerMachinePoolMachineReconciler) preloadImages(ctx context.Context, name string, images []string) error {
	if len(images) == 0 {
		return nil
	}
	// As the webhook checks them; it may not have run, or under an older manager.
	for i, image := range images {
		if _, err := nodeimage.ParseReference(image); err != nil {
			return pkgerrors.Wrapf(err, "spec.template.preLoadImages[%d]", i)
		}
	}
	archive, err := r.Runtime.SaveImages(ctx, images)
	if err != nil {
		return err
	}
	defer archive.Close()
	res, err := r.Runtime.Exec(ctx, name, container.ImportImagesCommand(), archive)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return pkgerrors.Errorf("importing images exited with code %d: %s", res.ExitCode, tail(res.Stderr))
	}
	return nil
}

func (r *DockerMachinePoolMachineReconciler) markProvisioned(machine *infrav1.DockerMachinePoolMachine) {
	machine.Status.Initialization.Provisioned = ptr.To(true)
	conditions.Set(machine, metaCondition(infrav1.ContainerProvisionedCondition, true, infrav1.ContainerProvisionedReason, ""))
}

// markBootstrapFailed reports a failed bootstrap, for good: kubeadm join is not run twice in a
// container; a MachineHealthCheck or a user replaces its Machine.
func (r *DockerMachinePoolMachineReconciler) markBootstrapFailed(machine *infrav1.DockerMachinePoolMachine, reason metrics.BootstrapFailureReason, msg string) {
	metrics.BootstrapFailures.WithLabelValues(string(reason)).Inc()
	conditions.Set(machine, metaCondition(infrav1.ContainerProvisionedCondition, false, infrav1.BootstrapFailedReason, msg))
	r.eventf(machine, corev1.EventTypeWarning, infrav1.BootstrapFailedReason, "Bootstrap of container %s failed: %s", machine.Name, msg)
}

// ownerPool returns the DockerMachinePool the machine's owner reference names, in the machine's
// namespace and with the reference's UID; errNoOwnerPool when there is none.
func (r *DockerMachinePoolMachineReconciler) ownerPool(ctx context.Context, machine *infrav1.DockerMachinePoolMachine) (*infrav1.DockerMachinePool, error) {
	for _, ref := range machine.OwnerReferences {
		if ref.Kind != "DockerMachinePool" || ref.APIVersion != infrav1.GroupVersion.String() {
			continue
		}
		pool := &infrav1.DockerMachinePool{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: machine.Namespace, Name: ref.Name}, pool); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, pkgerrors.Wrapf(errNoOwnerPool, "DockerMachinePool %s", klog.KRef(machine.Namespace, ref.Name))
			}
			return nil, pkgerrors.Wrapf(err, "failed to get DockerMachinePool %s", klog.KRef(machine.Namespace, ref.Name))
		}
		if pool.UID != ref.UID {
			return nil, pkgerrors.Wrapf(errNoOwnerPool, "DockerMachinePool %s has UID %s, not the owner reference's %s", klog.KObj(pool), pool.UID, ref.UID)
		}
		return pool, nil
	}
	return nil, pkgerrors.Wrapf(errNoOwnerPool, "DockerMachinePoolMachine %s has no DockerMachinePool owner reference", klog.KObj(machine))
}

func (r *DockerMachinePoolMachineReconciler) eventf(obj client.Object, eventType, reason, format string, args ...any) {
	if r.recorder != nil {
		r.recorder.Eventf(obj, eventType, reason, format, args...)
	}
}

func addressesOf(c container.Container) []clusterv1.MachineAddress {
	out := []clusterv1.MachineAddress{{Type: clusterv1.MachineHostName, Address: c.Name}}
	if c.IPv4 != "" {
		out = append(out, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: c.IPv4})
	}
	if c.IPv6 != "" {
		out = append(out, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: c.IPv6})
	}
	return out
}

// tail keeps the end of a command's output, where errors are, within an event's size, with
// secrets redacted.
func tail(out []byte) string {
	const limit = 1024
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return bootstrap.Redact(string(bytes.TrimSpace(out)))
}
