package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	pkgerrors "github.com/pkg/errors"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/nodeimage"
	"github.com/capdmp/capdmp/pkg/skew"
)

// reconcileScaleDown removes containers above the desired count (with the rollout's surge), and
// during a rollout the replaceable containers whose removal keeps at least the desired count less
// maxUnavailable ready (spec.strategy.rollingUpdate). Removal goes through the Machine, so Cluster
// API drains the node first. Order: marked for deletion, replaceable, outdated, not ready, newest.
func (r *DockerMachinePoolReconciler) reconcileScaleDown(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	active := s.active()
	desired := s.desiredReplicas()
	excess := max(len(active)-(desired+s.surge()), 0)
	// Nothing above the count and nothing to replace: no order to compute for a pool of thousands.
	if excess == 0 && !slices.ContainsFunc(active, s.replaceable) {
		return ctrl.Result{}, nil
	}
	if excess > 0 {
		if err := r.readDeletionMarks(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	candidates := s.deletionOrder(active)
	victims := candidates[:excess]

	if slices.ContainsFunc(candidates[excess:], s.replaceable) {
		// How many ready containers the pool may lose and keep desired - maxUnavailable ready.
		_, maxUnavailable := s.rollingUpdate()
		budget := -(desired - maxUnavailable)
		for _, i := range active {
			if i.ready() {
				budget++
			}
		}
		for _, i := range victims {
			if i.ready() {
				budget--
			}
		}
		for _, i := range candidates[excess:] {
			if !s.replaceable(i) {
				continue
			}
			if i.ready() {
				if budget <= 0 {
					continue
				}
				budget--
			}
			victims = append(victims, i)
		}
	}

	log := ctrl.LoggerFrom(ctx)
	for _, i := range victims {
		log.Info("Removing container", "container", i.name(), "version", i.version(), "ready", i.ready())
		r.eventf(s.pool, corev1.EventTypeNormal, "DeletingContainer", "Removing container %s (%s)", i.name(), displayVersion(i.version()))
		if err := r.deleteMachine(ctx, s, i.name(), i.machine); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// readDeletionMarks reads the cluster.x-k8s.io/delete-machine annotations of the pool's Machines
// and DockerMachinePoolMachines from the API server (their metadata only) before a scale-down
// picks what goes. An autoscaler marks the Machine of the node it chose, then lowers the
// MachinePool's replicas: the cache can show the lower count before the mark, and the newest
// instance would go instead. Read now, the marks are at least as new as the count the cache showed.
func (r *DockerMachinePoolReconciler) readDeletionMarks(ctx context.Context, s *poolScope) error {
	annotations := map[types.UID]map[string]string{}
	for _, gvk := range []schema.GroupVersionKind{
		clusterv1.GroupVersion.WithKind("MachineList"),
		infrav1.GroupVersion.WithKind("DockerMachinePoolMachineList"),
	} {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk)
		if err := r.APIReader.List(ctx, list, client.InNamespace(s.pool.Namespace), s.inventorySelector()); err != nil {
			return pkgerrors.Wrapf(err, "failed to read the delete-machine annotations of the pool's %ss", strings.TrimSuffix(gvk.Kind, "List"))
		}
		for _, m := range list.Items {
			annotations[m.UID] = m.Annotations
		}
	}
	for _, i := range s.instances {
		if i.owner != nil {
			if a, ok := annotations[i.owner.UID]; ok {
				i.owner.Annotations = a
			}
		}
		if i.machine != nil {
			if a, ok := annotations[i.machine.UID]; ok {
				i.machine.Annotations = a
			}
		}
	}
	return nil
}

// deletionOrder sorts instances by which should go first: marked for deletion, replaceable,
// outdated, not ready, then newest.
// Each instance is ranked once: the sort compares O(n log n) times.
func (s *poolScope) deletionOrder(in []*instance) []*instance {
	type ranked struct {
		i    *instance
		rank int
	}
	rank := func(i *instance) int {
		switch {
		case i.markedForDeletion():
			return 0
		case s.replaceable(i):
			return 1
		case s.outdated(i):
			return 2
		case !i.ready():
			return 3
		default:
			return 4
		}
	}
	order := make([]ranked, len(in))
	for n, i := range in {
		order[n] = ranked{i: i, rank: rank(i)}
	}
	slices.SortStableFunc(order, func(a, b ranked) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		return b.i.container.CreatedAt.Compare(a.i.container.CreatedAt)
	})
	out := make([]*instance, len(order))
	for n, r := range order {
		out[n] = r.i
	}
	return out
}

// planCreation decides how many containers scale-up may create and at which version: the target
// when the gate admits it, otherwise the last admitted version for replacements and scale-up.
func (s *poolScope) planCreation() creationPlan {
	surge := s.surge()
	// The Machines remediation deletes in this reconcile are replaced with it.
	remediated := 0
	for _, i := range s.remediations {
		if !i.deleting() {
			remediated++
		}
	}
	missing := s.desiredReplicas() + surge - len(s.active()) + remediated
	if surge > 0 {
		// A rollout makes no more new containers than the desired count.
		current := 0
		for _, i := range s.active() {
			if !s.replaceable(i) {
				current++
			}
		}
		missing = min(missing, s.desiredReplicas()-current)
	}
	if missing <= 0 {
		return creationPlan{}
	}
	plan := creationPlan{count: missing}
	var blocked string
	plan.image, plan.version, blocked = s.creatableImage()
	if blocked != "" {
		plan.blockedReason = infrav1.WaitingForVersionGateReason
		plan.blockedMessage = "Not creating " + pluralContainers(missing) + ": " + blocked
	}
	return plan
}

// creatableImage is the image and version a container created now would have: the target when
// the gate admits it, else the last admitted one while the gate still admits it; otherwise why
// none can be created.
func (s *poolScope) creatableImage() (image, version, blocked string) {
	gate := s.pool.Status.VersionGate
	switch {
	case s.decision == nil:
		return "", "", "the version-skew gate has not decided yet"
	case s.decision.Verdict == skew.Proceed:
		return s.targetImage, s.targetVersion, ""
	case s.lastAdmittedStillAdmitted():
		return gate.AdmittedImage, gate.AdmittedVersion, ""
	}
	return "", "", s.decision.Message
}

// reconcileScaleUp creates the containers planned by reconcileBootstrapData, never pulling an
// image, and labels each with its version, the hash of the bootstrap data it will use and the
// configuration that data carries.
func (r *DockerMachinePoolReconciler) reconcileScaleUp(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	plan := s.creation
	if plan.count == 0 || plan.image == "" || plan.blockedReason != "" {
		setMachinesCreated(s, plan)
		return ctrl.Result{RequeueAfter: plan.requeueAfter}, nil
	}
	log := ctrl.LoggerFrom(ctx)

	imageID, refusal, err := r.verifyCreation(ctx, s, plan.image, plan.version)
	if err != nil {
		return ctrl.Result{}, err
	}
	if refusal != nil {
		plan.blockedReason = refusal.reason
		plan.blockedMessage = "Not creating " + pluralContainers(plan.count) + ": " + refusal.message
		setMachinesCreated(s, plan)
		log.Info("Not creating containers", "reason", refusal.reason, "message", refusal.message)
		r.eventf(s.pool, corev1.EventTypeWarning, refusal.reason, "%s", plan.blockedMessage)
		return ctrl.Result{RequeueAfter: refusal.retryAfter}, nil
	}
	network, err := r.Runtime.EnsureNetwork(ctx, r.network())
	if err != nil {
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to ensure Docker network %s", r.network())
	}

	versionLabel, err := skew.VersionLabelValue(plan.version)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Containers are created a few at a time: each create is several engine requests that wait
	// on the engine, not on this process. After a failure no further create starts.
	var (
		mu     sync.Mutex
		failed bool
	)
	creates := errgroup.Group{}
	creates.SetLimit(r.maxConcurrentCreates())
	for range plan.count {
		name := names.SimpleNameGenerator.GenerateName(s.pool.Name + "-")
		spec := container.NodeSpec(container.NodeSpecInput{
			Name:        name,
			Image:       imageID,
			ClusterName: s.cluster.Name,
			Network:     r.network(),
			Labels: map[string]string{
				infrav1.ClusterNameLabel:            s.cluster.Name,
				infrav1.PoolNameLabel:               s.pool.Name,
				infrav1.ImageLabel:                  plan.image,
				infrav1.PoolUIDLabel:                poolUID(s.pool),
				infrav1.NamespaceLabel:              s.pool.Namespace,
				infrav1.KubernetesVersionLabel:      versionLabel,
				infrav1.BootstrapDataHashLabel:      plan.dataHash,
				infrav1.BootstrapConfigurationLabel: plan.configuration,
			},
			ExtraMounts: mountsOf(s.pool.Spec.Template.ExtraMounts),
			Env:         r.Proxy.NodeEnv(network.Subnets, name),
		})
		creates.Go(func() error {
			mu.Lock()
			stop := failed
			mu.Unlock()
			if stop {
				return nil
			}
			inst, err := r.createInstance(ctx, s, spec, plan.version)
			mu.Lock()
			defer mu.Unlock()
			if inst != nil {
				s.instances = append(s.instances, inst)
			}
			if err != nil && !failed {
				failed = true
				if inst == nil {
					// The container itself failed: say why no more are made now.
					plan.blockedReason, plan.blockedMessage = createFailureReason(err), err.Error()
				}
			}
			return err
		})
	}
	err = creates.Wait()
	s.sortInstances()
	if err != nil {
		if plan.blockedReason != "" {
			setMachinesCreated(s, plan)
		}
		return ctrl.Result{}, err
	}
	s.creation = creationPlan{}
	r.pauseFinished(s, plan)
	setMachinesCreated(s, creationPlan{})
	return ctrl.Result{}, nil
}

// creationRefusal says why the pool may not create a container of an image now, although the
// gate and the bootstrap data allow it.
type creationRefusal struct {
	reason, message string
	// retryAfter asks for another look when nothing will trigger one; 0 when a watched change
	// can.
	retryAfter time.Duration
}

// verifyCreation checks what scale-up and remediation both need before a container of image is
// made at version: the pool's mounts can be made and are allowed, the image is on the engine (it is
// never pulled), its content records version (its tag is a claim: a retagged image would start a
// kubelet the gate never admitted), and no Node of the pool has shown the image to run another
// version. It returns the image's ID, which containers are created from so that what runs is what
// was verified, or why no container of it may be made now.
func (r *DockerMachinePoolReconciler) verifyCreation(ctx context.Context, s *poolScope, image, version string) (string, *creationRefusal, error) {
	if refusal := r.refusedMount(s.pool.Spec.Template.ExtraMounts); refusal != nil {
		// Only an edit of the pool or a manager restarted with another flag can change the
		// answer; both trigger a reconcile.
		return "", refusal, nil
	}
	// Images have no watch: a refusal below is looked at again later, a tag may be fixed.
	img, err := r.imageVersions.Read(ctx, r.Runtime, image)
	switch {
	case pkgerrors.Is(err, container.ErrImageNotFound):
		return "", &creationRefusal{reason: infrav1.ImageNotFoundReason, retryAfter: imageRetryPeriod,
			message: "image " + image + " is not present on the Docker engine; CAPDMP never pulls: build or load it"}, nil
	case pkgerrors.Is(err, nodeimage.ErrNoRecordedVersion):
		return "", &creationRefusal{reason: infrav1.ImageVersionNotRecordedReason, retryAfter: imageRetryPeriod,
			message: err.Error() + "; only a node image that records its Kubernetes version (as kind's do) can be checked against the version-skew gate"}, nil
	case err != nil:
		return "", nil, err
	}
	same, err := skew.SameRelease(img.Version, version)
	if err != nil {
		return "", nil, pkgerrors.Wrapf(err, "failed to compare the version of image %s", image)
	}
	if !same {
		return "", &creationRefusal{reason: infrav1.ImageVersionMismatchReason, retryAfter: imageRetryPeriod,
			message: fmt.Sprintf("image %s (%s) holds Kubernetes %s by its %s, not the %s it is used as; none of it is started", image, img.ID, img.Version, nodeimage.VersionFile, version)}, nil
	}
	for _, i := range s.instances {
		if why := nodeContradicts(i); why != "" && i.container.ImageID == img.ID {
			r.imageVersions.Contradict(img.ID, why)
		}
	}
	if why := r.imageVersions.Contradicted(img.ID); why != "" {
		return "", &creationRefusal{reason: infrav1.ImageContradictedByNodeReason, retryAfter: imageRetryPeriod,
			message: fmt.Sprintf("image %s (%s): %s; no more containers of it are created", image, img.ID, why)}, nil
	}
	return img.ID, nil, nil
}

// nodeContradicts says how the Node of the container contradicts the version the container was
// created as, "" when it does not or is not known yet.
func nodeContradicts(i *instance) string {
	if i.machine == nil || i.machine.Status.NodeKubeletVersion == "" {
		return ""
	}
	recorded, err := i.recordedVersion()
	if err != nil {
		return ""
	}
	if same, err := skew.SameRelease(i.machine.Status.NodeKubeletVersion, recorded); err == nil && same {
		return ""
	}
	return fmt.Sprintf("Node %s runs kubelet %s, not the %s its image was used as", i.name(), i.machine.Status.NodeKubeletVersion, recorded)
}

// createInstance creates one container and its DockerMachinePoolMachine. It returns the instance
// when the container was made, even if its machine was not (the next reconcile adopts it).
func (r *DockerMachinePoolReconciler) createInstance(ctx context.Context, s *poolScope, spec container.Spec, version string) (*instance, error) {
	ctrl.LoggerFrom(ctx).Info("Creating container", "container", spec.Name, "image", spec.Image, "version", version)
	c, err := r.Runtime.Create(ctx, spec)
	if err != nil {
		r.eventf(s.pool, corev1.EventTypeWarning, createFailureReason(err), "Failed to create container %s: %v", spec.Name, err)
		return nil, pkgerrors.Wrapf(err, "failed to create container %s", spec.Name)
	}
	r.eventf(s.pool, corev1.EventTypeNormal, "ContainerCreated", "Created container %s of %s", spec.Name, version)
	inst := &instance{container: c}
	m := newMachinePoolMachine(s, c.Name, c.Labels)
	if err := r.Client.Create(ctx, m); err != nil {
		return inst, pkgerrors.Wrapf(err, "failed to create DockerMachinePoolMachine %s", klog.KObj(m))
	}
	inst.machine = m
	return inst, nil
}

// createFailureReason is the MachinesCreated reason of a failed container create.
func createFailureReason(err error) string {
	switch {
	case pkgerrors.Is(err, container.ErrImageNotFound):
		return infrav1.ImageNotFoundReason
	case pkgerrors.Is(err, container.ErrEngineUnavailable):
		return infrav1.EngineUnavailableReason
	}
	return infrav1.ContainerCreateFailedReason
}

// pauseFinished forgets a pause once a container of the admitted target was created with data
// newer than the pause.
func (r *DockerMachinePoolReconciler) pauseFinished(s *poolScope, plan creationPlan) {
	gate := &s.pool.Status.VersionGate
	if gate.WaitingSince == nil || s.decision == nil || s.decision.Verdict != skew.Proceed {
		return
	}
	if plan.dataHash != "" && plan.dataHash != gate.BootstrapDataHashAtPause {
		gate.WaitingSince = nil
		gate.BootstrapDataHashAtPause = ""
	}
}

func setMachinesCreated(s *poolScope, plan creationPlan) {
	if plan.blockedReason != "" {
		conditions.Set(s.pool, metaCondition(infrav1.MachinesCreatedCondition, false, plan.blockedReason, plan.blockedMessage))
		return
	}
	for _, i := range s.active() {
		if i.bootstrapFailed() {
			conditions.Set(s.pool, metaCondition(infrav1.MachinesCreatedCondition, false, infrav1.BootstrapFailedReason,
				"Bootstrap failed in container "+i.name()+"; delete its Machine (or let a MachineHealthCheck do it) to replace it"))
			return
		}
	}
	conditions.Set(s.pool, metaCondition(infrav1.MachinesCreatedCondition, true, infrav1.MachinesCreatedReason, ""))
}

// refusedMount says which of mounts no node container can have (internal/container, which the
// webhooks call too) or the manager's host-path policy refuses, and why; nil when none. The first
// are the reason when both occur: only the pool's author can fix them.
func (r *DockerMachinePoolReconciler) refusedMount(mounts []infrav1.Mount) *creationRefusal {
	var invalid, notAllowed []string
	for i, m := range mounts {
		mountPath := fmt.Sprintf("spec.template.extraMounts[%d]", i)
		if err := container.CheckExtraMountSource(m.HostPath); err != nil {
			invalid = append(invalid, mountPath+".hostPath: "+err.Error())
		}
		if err := container.CheckExtraMountTarget(m.ContainerPath); err != nil {
			invalid = append(invalid, mountPath+".containerPath: "+err.Error())
		}
		if err := r.HostPaths.Check(m.HostPath); err != nil {
			notAllowed = append(notAllowed, mountPath+".hostPath: "+err.Error())
		}
	}
	switch {
	case len(invalid) > 0:
		return &creationRefusal{reason: infrav1.ExtraMountInvalidReason, message: strings.Join(append(invalid, notAllowed...), "; ")}
	case len(notAllowed) > 0:
		return &creationRefusal{reason: infrav1.HostPathNotAllowedReason, message: strings.Join(notAllowed, "; ")}
	}
	return nil
}

func mountsOf(in []infrav1.Mount) []container.Mount {
	out := make([]container.Mount, 0, len(in))
	for _, m := range in {
		out = append(out, container.Mount{Source: m.HostPath, Target: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	return out
}

func pluralContainers(n int) string {
	if n == 1 {
		return "1 container"
	}
	return itoa(n) + " containers"
}
