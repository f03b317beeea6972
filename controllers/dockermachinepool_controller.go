package controllers

import (
	"context"
	"sync"
	"time"

	pkgerrors "github.com/pkg/errors"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/hostpath"
	"github.com/capdmp/capdmp/internal/nodeimage"
)

// DefaultNetwork is the Docker network of the pools' containers: kind's, shared with CAPD's
// DockerCluster load balancers and control-plane machines.
const DefaultNetwork = "kind"

// DefaultContainerSyncPeriod bounds how long a container removed behind the controller's back
// goes unnoticed. Everything else is driven by watches.
const DefaultContainerSyncPeriod = time.Minute

// DefaultMaxConcurrentCreates is how many containers a pool creates at once by default: enough to
// keep a local engine busy, few enough not to flood it.
const DefaultMaxConcurrentCreates = 5

// DefaultPoolConcurrency and DefaultMachineConcurrency are how many DockerMachinePools and
// DockerMachinePoolMachines the manager reconciles at once by default
// (--dockermachinepool-concurrency, --dockermachinepoolmachine-concurrency).
const (
	DefaultPoolConcurrency    = 10
	DefaultMachineConcurrency = 10
)

// The patch helper and util/finalizers write with patch, never update; no owner reference the
// controllers set blocks owner deletion, so no <kind>/finalizers update is needed
// (OwnerReferencesPermissionEnforcement).
// +kubebuilder:rbac:groups=infrastructure.capdmp.dev,resources=dockermachinepools,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=infrastructure.capdmp.dev,resources=dockermachinepools/status,verbs=patch
// +kubebuilder:rbac:groups=infrastructure.capdmp.dev,resources=dockermachinepoolmachines,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;machinepools,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines/status,verbs=patch
// +kubebuilder:rbac:groups=controlplane.cluster.x-k8s.io,resources=*,verbs=get;list;watch
// +kubebuilder:rbac:groups=bootstrap.cluster.x-k8s.io,resources=kubeadmconfigs,verbs=get;list;watch;patch
// Secrets are read by name only (bootstrap data, its templates' contentFrom, the kubeconfig the
// ClusterCache reads): never listed nor watched, so the role grants no read of every Secret.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// DockerMachinePoolReconciler reconciles DockerMachinePools: it creates and removes the pool's
// containers, pauses new-version containers while the control plane is older (pkg/skew), and keeps
// the bootstrap data of the next container fresh during such a pause.
type DockerMachinePoolReconciler struct {
	Client client.Client
	// APIReader reads the bootstrap data Secret live for every container created: the data is
	// never served from a cache or kept in memory.
	APIReader client.Reader
	// ClusterCache gives clients of workload clusters, used to have the bootstrap provider
	// re-render data that is older than a pause.
	ClusterCache clustercache.ClusterCache
	// Runtime is the container engine.
	Runtime container.Runtime
	// Network is the Docker network of the containers; DefaultNetwork when empty.
	Network string
	// Proxy is passed to every container, as CAPD passes its manager's proxy environment.
	Proxy container.Proxy
	// ContainerSyncPeriod is how often a pool with containers is re-listed to notice containers
	// removed behind the controller's back; DefaultContainerSyncPeriod when zero.
	ContainerSyncPeriod time.Duration
	// WatchFilterValue is the label value used to filter events prior to reconciliation.
	WatchFilterValue string
	// HostPaths are the host paths a pool's extraMounts may mount, checked again before any
	// container is created (the webhook's check may have run under another policy, or not at
	// all); the zero Policy is the default one.
	HostPaths hostpath.Policy
	// MaxConcurrentCreates bounds the containers a pool creates at once;
	// DefaultMaxConcurrentCreates when zero.
	MaxConcurrentCreates int

	// imageVersions verifies the Kubernetes version of each node image from its content, once
	// per image ID, before any container of it starts.
	imageVersions nodeimage.Versions

	// host is the engine's machine as read at hostRead, for the pools' capacity (engineHost).
	hostMu   sync.Mutex
	host     container.Host
	hostRead time.Time

	recorder      record.EventRecorder
	controlPlanes external.ObjectTracker
	// bootstrapConfigs watches the KubeadmConfigs of pools, once one is read: CABPK's CRD is not
	// needed where no pool uses it.
	bootstrapConfigs external.ObjectTracker
	// deletedControlPlaneMachines are the control-plane Machines seen being deleted, whose proven
	// removal re-opens a gate before the control plane's status says so.
	deletedControlPlaneMachines deletedControlPlaneMachines
	now                         func() time.Time
}

// SetupWithManager sets up the controller with the Manager.
func (r *DockerMachinePoolReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.APIReader == nil || r.Runtime == nil {
		return pkgerrors.New("Client, APIReader and Runtime must not be nil")
	}
	log := ctrl.LoggerFrom(ctx).WithValues("controller", "dockermachinepool")
	clusterToPools, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.DockerMachinePoolList{}, mgr.GetScheme())
	if err != nil {
		return pkgerrors.Wrap(err, "failed to create mapper for Cluster to DockerMachinePools")
	}

	b := ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.DockerMachinePool{}).
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		// The pool is an owner, not the controller, of its machines: Cluster API's Machine is.
		Watches(
			&infrav1.DockerMachinePoolMachine{},
			handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &infrav1.DockerMachinePool{}),
		).
		Watches(
			&clusterv1.MachinePool{},
			handler.EnqueueRequestsFromMapFunc(util.MachinePoolToInfrastructureMapFunc(ctx, infrav1.GroupVersion.WithKind("DockerMachinePool"))),
		).
		// A MachineHealthCheck hands unhealthy Machines to the pool through their conditions.
		Watches(
			&clusterv1.Machine{},
			handler.EnqueueRequestsFromMapFunc(r.machineToPool),
			builder.WithPredicates(remediationRequested{}),
		).
		// A control-plane Machine's deletion may prove its kube-apiserver gone before the
		// control plane reports it (controlPlaneWithoutGoneMachines).
		Watches(
			&clusterv1.Machine{},
			handler.EnqueueRequestsFromMapFunc(r.controlPlaneMachineToPools),
			builder.WithPredicates(controlPlaneMachineDeleting{}),
		).
		Watches(
			&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(clusterToPools),
			builder.WithPredicates(predicates.ClusterPausedTransitions(mgr.GetScheme(), log)),
		)
	if watcher, ok := r.Runtime.(container.Watcher); ok {
		b = b.WatchesRawSource(source.Func(r.watchControlPlaneContainers(watcher)))
	}
	// No watch on Secrets: the manager may only get them by name. CABPK rewrites a pool's
	// data Secret in place only with a new token, which it writes into the KubeadmConfig's
	// spec after the Secret; the KubeadmConfig watch (kubeadmConfigSpecHash) wakes the pool.
	c, err := b.Build(r)
	if err != nil {
		return pkgerrors.Wrap(err, "failed setting up the DockerMachinePool controller")
	}

	r.recorder = mgr.GetEventRecorderFor("dockermachinepool-controller")
	r.controlPlanes = external.ObjectTracker{
		Controller:      c,
		Cache:           mgr.GetCache(),
		Scheme:          mgr.GetScheme(),
		PredicateLogger: &log,
	}
	r.bootstrapConfigs = external.ObjectTracker{
		Controller:      c,
		Cache:           mgr.GetCache(),
		Scheme:          mgr.GetScheme(),
		PredicateLogger: &log,
	}
	return nil
}

// Reconcile reconciles one DockerMachinePool.
func (r *DockerMachinePoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)

	pool := &infrav1.DockerMachinePool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to get DockerMachinePool %s", req.NamespacedName)
	}

	// Deletion needs neither the MachinePool nor the Cluster: containers are matched by the pool's
	// UID and machines by their owner reference. A pool whose MachinePool is already gone, or
	// never adopted it, would otherwise keep its finalizer and its containers forever.
	if !pool.DeletionTimestamp.IsZero() {
		return r.reconcileDeletion(ctx, pool)
	}

	machinePool, err := util.GetOwnerMachinePool(ctx, r.Client, pool.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to get the MachinePool owning DockerMachinePool %s", klog.KObj(pool))
	}
	if machinePool == nil {
		log.Info("Waiting for the MachinePool controller to set the owner reference")
		return ctrl.Result{}, nil
	}
	log = log.WithValues("MachinePool", klog.KObj(machinePool), "Cluster", klog.KRef(pool.Namespace, machinePool.Spec.ClusterName))
	ctx = ctrl.LoggerInto(ctx, log)

	// By spec.clusterName: Cluster API labels a new MachinePool with its Cluster's name only in
	// its first reconcile, and a pool reconciled before that would fail for nothing.
	cluster, err := util.GetClusterByName(ctx, r.Client, machinePool.Namespace, machinePool.Spec.ClusterName)
	if err != nil {
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to get the Cluster of MachinePool %s", klog.KObj(machinePool))
	}

	// Add the finalizer first, so that no container can exist without it, nor without the UID
	// its containers carry recorded on the pool.
	if added, err := finalizers.EnsureFinalizer(ctx, r.Client, pool, infrav1.MachinePoolFinalizer); err != nil || added {
		return ctrl.Result{}, err
	}
	if err := recordPoolUID(ctx, r.Client, pool); err != nil {
		return ctrl.Result{}, err
	}

	s := &poolScope{
		cluster:     cluster,
		machinePool: machinePool,
		pool:        pool,
	}
	return r.runPhases(ctx, s, []poolPhase{
		wrapPhase(r.reconcileTarget, "failed to compute the pool's target image"),
		wrapPhase(r.reconcileBootstrapConfiguration, "failed to read the pool's bootstrap configuration"),
		wrapPhase(r.reconcileInventory, "failed to list the pool's containers and machines"),
		wrapPhase(r.reconcileUnstartedContainers, "failed to remove containers never started"),
		wrapPhase(r.reconcileMachinePoolMachines, "failed to reconcile DockerMachinePoolMachines"),
		wrapPhase(r.reconcileVersionGate, "failed to reconcile the version-skew gate"),
		wrapPhase(r.reconcileKubeletSkew, "failed to judge the pool's kubelets against the version skew policy"),
		wrapPhase(r.reconcileRemediationCandidates, "failed to find the unhealthy Machines to remediate"),
		wrapPhase(r.reconcileScaleDown, "failed to scale down"),
		wrapPhase(r.reconcileBootstrapData, "failed to reconcile bootstrap data"),
		wrapPhase(r.reconcileRemediation, "failed to remediate unhealthy Machines"),
		wrapPhase(r.reconcileScaleUp, "failed to scale up"),
		wrapPhase(r.reconcileCapacity, "failed to record the capacity of the pool's Nodes"),
		wrapPhase(r.reconcileSync, "failed to schedule the next container sync"),
	})
}

// reconcileDeletion deletes a pool with what it can still find: the Cluster named by its
// cluster-name label, when it is there, only so that a paused Cluster pauses the deletion too.
func (r *DockerMachinePoolReconciler) reconcileDeletion(ctx context.Context, pool *infrav1.DockerMachinePool) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	clusterName := pool.Labels[clusterv1.ClusterNameLabel]
	if clusterName != "" {
		log = log.WithValues("Cluster", klog.KRef(pool.Namespace, clusterName))
		ctx = ctrl.LoggerInto(ctx, log)
	}

	s := &poolScope{pool: pool}
	if clusterName != "" {
		cluster, err := util.GetClusterByName(ctx, r.Client, pool.Namespace, clusterName)
		switch {
		case apierrors.IsNotFound(pkgerrors.Cause(err)):
			log.V(4).Info("Cluster is gone, deleting the pool without it")
		case err != nil:
			return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to get the Cluster of DockerMachinePool %s", klog.KObj(pool))
		default:
			s.cluster = cluster
		}
	}
	return r.runPhases(ctx, s, []poolPhase{
		wrapPhase(r.reconcileInventory, "failed to list the pool's containers and machines"),
		wrapPhase(r.reconcileDelete, "failed to delete the pool"),
	})
}

// runPhases runs phases on the pool unless it is paused, then computes its status and patches it,
// whatever the phases returned.
func (r *DockerMachinePoolReconciler) runPhases(ctx context.Context, s *poolScope, phases []poolPhase) (_ ctrl.Result, reterr error) {
	pool := s.pool
	patchHelper, err := patch.NewHelper(pool, r.Client)
	if err != nil {
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to create patch helper for DockerMachinePool %s", klog.KObj(pool))
	}

	// A nil Cluster (gone, during deletion) leaves only the paused annotation to honour.
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, s.cluster, pool); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}

	defer func() {
		if err := r.updateStatus(s, reterr); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
		opts := []patch.Option{
			patch.WithOwnedConditions{Conditions: []string{
				clusterv1.PausedCondition,
				infrav1.ReadyCondition,
				infrav1.ReplicasReadyCondition,
				infrav1.MachinesCreatedCondition,
				infrav1.VersionSkewCondition,
				infrav1.KubeletSkewCondition,
				infrav1.BootstrapDataFreshCondition,
			}},
		}
		// observedGeneration moves only when status reflects that generation.
		if reterr == nil {
			opts = append(opts, patch.WithStatusObservedGeneration{})
		}
		if err := patchHelper.Patch(ctx, pool, opts...); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, pkgerrors.Wrapf(err, "failed to patch DockerMachinePool %s", klog.KObj(pool))})
		}
	}()

	return doReconcile(ctx, s, phases)
}

// poolPhase is one step of a DockerMachinePool reconcile.
type poolPhase func(ctx context.Context, s *poolScope) (ctrl.Result, error)

func wrapPhase(phase poolPhase, msg string) poolPhase {
	return func(ctx context.Context, s *poolScope) (ctrl.Result, error) {
		res, err := phase(ctx, s)
		return res, pkgerrors.Wrap(err, msg)
	}
}

// doReconcile runs phases in order and stops at the first that fails: each builds on what the
// ones before it put in the scope (inventory, gate decision, creation plan). The lowest requeue
// of the phases that ran wins.
func doReconcile(ctx context.Context, s *poolScope, phases []poolPhase) (ctrl.Result, error) {
	res := ctrl.Result{}
	for _, phase := range phases {
		phaseResult, err := phase(ctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		res = util.LowestNonZeroResult(res, phaseResult)
	}
	return res, nil
}

// reconcileSync requeues a pool that has containers so that one removed behind the controller's
// back is noticed; the Docker engine has no watch this controller could rely on across restarts.
// A pool without containers is requeued too, less often, so that the capacity it reports for an
// autoscaler at zero replicas follows the engine's machine (reconcileCapacity).
func (r *DockerMachinePoolReconciler) reconcileSync(_ context.Context, s *poolScope) (ctrl.Result, error) {
	if len(s.instances) == 0 {
		return ctrl.Result{RequeueAfter: DefaultHostPeriod}, nil
	}
	period := r.ContainerSyncPeriod
	if period == 0 {
		period = DefaultContainerSyncPeriod
	}
	return ctrl.Result{RequeueAfter: period}, nil
}

func (r *DockerMachinePoolReconciler) network() string {
	if r.Network == "" {
		return DefaultNetwork
	}
	return r.Network
}

func (r *DockerMachinePoolReconciler) maxConcurrentCreates() int {
	if r.MaxConcurrentCreates <= 0 {
		return DefaultMaxConcurrentCreates
	}
	return r.MaxConcurrentCreates
}

func (r *DockerMachinePoolReconciler) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// controlPlaneOf returns the Cluster's control plane object, watched so that the gate re-opens
// as soon as the control plane reports a new version.
func (r *DockerMachinePoolReconciler) controlPlaneOf(ctx context.Context, cluster *clusterv1.Cluster) (*unstructured.Unstructured, error) {
	if !cluster.Spec.ControlPlaneRef.IsDefined() {
		return nil, nil
	}
	cp, err := external.GetObjectFromContractVersionedRef(ctx, r.Client, cluster.Spec.ControlPlaneRef, cluster.Namespace)
	if err != nil {
		if apierrors.IsNotFound(pkgerrors.Cause(err)) {
			return nil, nil
		}
		return nil, pkgerrors.Wrapf(err, "failed to get control plane %s %s", cluster.Spec.ControlPlaneRef.Kind, klog.KRef(cluster.Namespace, cluster.Spec.ControlPlaneRef.Name))
	}
	if r.controlPlanes.Controller != nil {
		if err := r.controlPlanes.Watch(ctrl.LoggerFrom(ctx), cp,
			handler.EnqueueRequestsFromMapFunc(r.controlPlaneToPools),
			controlPlaneVersionsChanged{}); err != nil {
			return nil, pkgerrors.Wrapf(err, "failed to watch %s", cp.GetKind())
		}
	}
	return cp, nil
}

func (r *DockerMachinePoolReconciler) eventf(pool *infrav1.DockerMachinePool, eventType, reason, format string, args ...any) {
	if r.recorder == nil {
		return
	}
	r.recorder.Eventf(pool, eventType, reason, format, args...)
}
