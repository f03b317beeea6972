package controllers

import (
	"slices"
	"time"

	pkgerrors "github.com/pkg/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/skew"
)

// poolScope is what one reconcile of a DockerMachinePool knows; phases fill it in order.
type poolScope struct {
	// cluster and machinePool are always set on a normal reconcile; during deletion either may be
	// nil, as deletion must not wait for objects that may already be gone.
	cluster     *clusterv1.Cluster
	machinePool *clusterv1.MachinePool
	pool        *infrav1.DockerMachinePool

	// targetImage and targetVersion describe the containers the pool would create now;
	// targetErr says why they could not be computed.
	targetImage   string
	targetVersion string
	targetErr     error

	// instances are the pool's containers with their DockerMachinePoolMachine and Machine;
	// inventoryListed is false until they were listed.
	instances       []*instance
	inventoryListed bool
	// orphanMachines are DockerMachinePoolMachines whose container is gone.
	orphanMachines []*infrav1.DockerMachinePoolMachine

	controlPlane *unstructured.Unstructured
	// controlPlaneVersions are the versions the control plane reports (the contract's
	// status.versions, else status.version), without those of its Machines proven gone
	// (decideWithoutGoneMachines); nil while it is not initialized or reports none.
	controlPlaneVersions []string
	decision             *skew.Decision

	// data is the MachinePool's bootstrap data as read in this reconcile; nil until read or
	// when there is none yet. renderPending says why it no longer matches its bootstrap config
	// (edited since it was rendered), empty when it does.
	data          *bootstrap.Data
	renderPending string
	// invalidData says why no container can be bootstrapped with data (a file's template exceeds
	// the rendering budget, its content cannot be decoded), empty when one can.
	invalidData string

	// remediations are the unhealthy instances this reconcile replaces, within maxInFlight;
	// planCreation counts them as gone.
	remediations []*instance

	// creation is what scale-up may create now, decided by the gate and the bootstrap data.
	creation creationPlan
}

// instance is one container of the pool and the objects that represent it.
type instance struct {
	container container.Container
	// machine is its DockerMachinePoolMachine; nil until created.
	machine *infrav1.DockerMachinePoolMachine
	// owner is the Machine Cluster API made for it; nil until created.
	owner *clusterv1.Machine
	// removalRequested is true once this reconcile asked for its removal: the objects read
	// before do not show it yet.
	removalRequested bool

	// recorded memoizes recordedVersion: a container's labels do not change while a reconcile
	// holds it, and a reconcile asks for the version of each instance many times.
	recorded *memoVersion
	// kubelet memoizes the canonical form of the machine's NodeKubeletVersion, for the value it
	// was computed from.
	kubelet *memoVersion
}

// memoVersion is a version parsed once: from, what it was parsed from; version and err, the result.
type memoVersion struct {
	from    string
	version string
	err     error
}

// creationPlan says how many containers scale-up creates and of which image.
type creationPlan struct {
	count   int
	image   string
	version string
	// blockedReason and blockedMessage explain why containers that are missing are not created.
	blockedReason  string
	blockedMessage string
	// dataSecretName is the bootstrap data Secret the new containers are bootstrapped from, and
	// dataHash the sha256 of its content read for this reconcile.
	dataSecretName string
	dataHash       string
	// configuration identifies the configuration of that data (bootstrap.Data.Configuration).
	configuration string
	// requeueAfter asks for another look when nothing will trigger one (e.g. a missing image).
	requeueAfter time.Duration
}

func (i *instance) name() string { return i.container.Name }

// clusterName is the name of the pool's Cluster, from the Cluster or, when it is gone, from the
// pool's cluster-name label; empty when neither says.
func (s *poolScope) clusterName() string {
	if s.cluster != nil {
		return s.cluster.Name
	}
	return s.pool.Labels[clusterv1.ClusterNameLabel]
}

// version is the Kubernetes version the container runs, as recorded on it, for status, logs and
// events; empty when the label is missing or does not parse. The gate uses recordedVersion, which
// says why.
func (i *instance) version() string {
	v, err := i.recordedVersion()
	if err != nil {
		return ""
	}
	return v
}

// runningVersion is the version the gate counts for the container: its Node's kubelet, once the
// machine recorded it, else the version recorded on the container.
func (i *instance) runningVersion() (string, error) {
	if i.machine != nil && i.machine.Status.NodeKubeletVersion != "" {
		kubelet := i.machine.Status.NodeKubeletVersion
		if i.kubelet == nil || i.kubelet.from != kubelet {
			v, err := skew.CanonicalVersion(kubelet)
			i.kubelet = &memoVersion{from: kubelet, version: v, err: err}
		}
		if i.kubelet.err == nil {
			return i.kubelet.version, nil
		}
	}
	return i.recordedVersion()
}

// recordedVersion reads the Kubernetes version recorded on the container, in canonical form.
func (i *instance) recordedVersion() (string, error) {
	if i.recorded == nil {
		v, err := i.parseRecordedVersion()
		i.recorded = &memoVersion{version: v, err: err}
	}
	return i.recorded.version, i.recorded.err
}

func (i *instance) parseRecordedVersion() (string, error) {
	value, ok := i.container.Labels[infrav1.KubernetesVersionLabel]
	if !ok {
		return "", pkgerrors.Errorf("container %s has no %s label", i.name(), infrav1.KubernetesVersionLabel)
	}
	v, err := skew.VersionFromLabelValue(value)
	if err != nil {
		return "", pkgerrors.Wrapf(err, "label %s of container %s", infrav1.KubernetesVersionLabel, i.name())
	}
	return v, nil
}

// ready is true when the container runs and has been bootstrapped.
func (i *instance) ready() bool {
	return i.container.Running && i.machine != nil && ptr.Deref(i.machine.Status.Initialization.Provisioned, false)
}

// deleting is true when the container's removal has begun through its Machine or its
// DockerMachinePoolMachine, or this reconcile asked for it.
func (i *instance) deleting() bool {
	return i.removalRequested ||
		(i.owner != nil && !i.owner.DeletionTimestamp.IsZero()) ||
		(i.machine != nil && !i.machine.DeletionTimestamp.IsZero())
}

// markedForDeletion is true when a user or an autoscaler asked for this machine to go first.
func (i *instance) markedForDeletion() bool {
	if i.owner != nil {
		if _, ok := i.owner.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
			return true
		}
	}
	if i.machine != nil {
		if _, ok := i.machine.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
			return true
		}
	}
	return false
}

// bootstrapFailed is true when the container's bootstrap failed or was interrupted.
func (i *instance) bootstrapFailed() bool {
	if i.machine == nil {
		return false
	}
	for _, c := range i.machine.Status.Conditions {
		if c.Type == infrav1.ContainerProvisionedCondition && c.Reason == infrav1.BootstrapFailedReason {
			return true
		}
	}
	return false
}

// joining is true while the container may be using its bootstrap token: it runs, its bootstrap
// has neither finished nor failed, and it is younger than joinWindow. A container that does not
// run joins nothing (its bootstrap is run by the controller, from data read then), and one that
// never booted or never got readable data within the window is not waited for: a refresh must
// not wait forever on a container that will never finish.
func (i *instance) joining(now time.Time, bootstrapTimeout time.Duration) bool {
	return i.container.Running && !i.ready() && !i.bootstrapFailed() && !i.deleting() &&
		now.Sub(i.container.CreatedAt) < joinWindow(bootstrapTimeout)
}

// joinWindow is how long after its creation a container may still be joining: the node's boot,
// then its bootstrap (preloaded images and commands, stopped by the machine controller at the
// timeout), each given the pool's bootstrap timeout.
func joinWindow(bootstrapTimeout time.Duration) time.Duration {
	return 2 * bootstrapTimeout
}

// active returns the instances whose removal has not begun: the ones that count as replicas.
func (s *poolScope) active() []*instance {
	out := make([]*instance, 0, len(s.instances))
	for _, i := range s.instances {
		if !i.deleting() {
			out = append(out, i)
		}
	}
	return out
}

// desiredReplicas is the MachinePool's replica count; nil (an autoscaler not having decided yet)
// keeps the pool as it is.
func (s *poolScope) desiredReplicas() int {
	if s.replicasUnset() {
		return len(s.active())
	}
	return int(*s.machinePool.Spec.Replicas)
}

// replicasUnset is true when the MachinePool says no replica count: Cluster API's webhook
// defaults one, so only a MachinePool written with webhooks off has none.
func (s *poolScope) replicasUnset() bool {
	return s.machinePool.Spec.Replicas == nil
}

// configuration is the bootstrap configuration of the container: the one its bootstrap ran,
// recorded on its machine, else the one it was created for; empty when neither is recorded.
func (i *instance) configuration() string {
	if i.machine != nil {
		if c := i.machine.Labels[infrav1.BootstrapConfigurationLabel]; c != "" {
			return c
		}
	}
	return i.container.Labels[infrav1.BootstrapConfigurationLabel]
}

// configurationChanged is true when the container was bootstrapped with another configuration
// than the MachinePool's bootstrap data carries now. Unknown on either side is no change.
func (s *poolScope) configurationChanged(i *instance) bool {
	current := s.pool.Status.BootstrapData.Configuration
	return current != "" && i.configuration() != "" && i.configuration() != current
}

// imageReference is the image the container was created from, as the pool named it: its
// ImageLabel, else (a container made before the label) what the engine reports.
func (i *instance) imageReference() string {
	if ref := i.container.Labels[infrav1.ImageLabel]; ref != "" {
		return ref
	}
	return i.container.Image
}

// outdated is true when the container was not created from the image the pool targets now, runs
// another release than the target version (its Node's kubelet, once known: a tag rebuilt or
// moved to an image of another version), or was bootstrapped with another configuration than the
// pool's data carries now. A tag that moved to a rebuild of the same version rolls nothing.
func (s *poolScope) outdated(i *instance) bool {
	if s.targetImage == "" || i.imageReference() != s.targetImage || s.configurationChanged(i) {
		return true
	}
	running, err := i.runningVersion()
	if err != nil {
		return false // counted by the gate as running no version; its image is the target
	}
	if running == s.targetVersion {
		return false // one string, one release: the parse below is for forms that differ
	}
	same, err := skew.SameRelease(running, s.targetVersion)
	return err != nil || !same
}

// replaceable is true when the container is to be replaced now: while the gate admits the
// target, every outdated container; while it waits, one whose configuration changed, by a
// container of the last admitted version, as long as the gate still admits that version. Nothing
// is replaced while the MachinePool's replicas are unset: the desired count is then the pool's
// own size, which every surge container would raise, and the pool would grow without bound.
func (s *poolScope) replaceable(i *instance) bool {
	if s.replicasUnset() {
		return false
	}
	if s.rolloutAdmitted() {
		return s.outdated(i)
	}
	return s.configurationChanged(i) && s.lastAdmittedStillAdmitted()
}

// lastAdmittedStillAdmitted is true when the gate waits but still admits the version it admitted
// last: containers of that version may be created meanwhile.
func (s *poolScope) lastAdmittedStillAdmitted() bool {
	gate := s.pool.Status.VersionGate
	return s.decision != nil && gate.AdmittedImage != "" && s.decision.Admits(gate.AdmittedVersion)
}

// rolloutAdmitted is true when the gate lets the pool replace outdated containers by new ones.
func (s *poolScope) rolloutAdmitted() bool {
	return s.decision != nil && s.decision.Verdict == skew.Proceed && s.targetImage != ""
}

// rolloutWaitsOnGate is true when the gate holds back the replacement of outdated containers:
// the containers it will create when it re-opens need fresh data then.
func (s *poolScope) rolloutWaitsOnGate() bool {
	if s.decision == nil || s.decision.Verdict == skew.Proceed {
		return false
	}
	return slices.ContainsFunc(s.active(), s.outdated)
}

// surge is how many containers above the desired count a rollout may run:
// spec.strategy.rollingUpdate.maxSurge while replaceable containers are left, otherwise none.
func (s *poolScope) surge() int {
	if !slices.ContainsFunc(s.active(), s.replaceable) {
		return 0
	}
	maxSurge, _ := s.rollingUpdate()
	return maxSurge
}

// maxRemediationsInFlight resolves spec.remediation.maxInFlight against the desired count,
// rounded up and at least 1; ok is false when it is unset (no limit) or the webhook would refuse
// it.
func (s *poolScope) maxRemediationsInFlight() (limit int, ok bool) {
	maxInFlight := s.pool.Spec.Remediation.MaxInFlight
	if maxInFlight == nil {
		return 0, false
	}
	limit, err := intstr.GetScaledValueFromIntOrPercent(maxInFlight, s.desiredReplicas(), true)
	if err != nil || limit < 0 {
		return 0, false
	}
	return max(limit, 1), true
}

// rollingUpdate resolves spec.strategy.rollingUpdate against the desired count: maxSurge (1 when
// unset) rounded up, maxUnavailable (0 when unset) rounded down, and maxUnavailable 1 when both
// are 0, as a Deployment's. A value the webhook would refuse counts as unset.
func (s *poolScope) rollingUpdate() (maxSurge, maxUnavailable int) {
	update := s.pool.Spec.Strategy.RollingUpdate
	desired := s.desiredReplicas()
	maxSurge, err := intstr.GetScaledValueFromIntOrPercent(update.MaxSurge, desired, true)
	if update.MaxSurge == nil || err != nil || maxSurge < 0 {
		maxSurge = 1
	}
	maxUnavailable, err = intstr.GetScaledValueFromIntOrPercent(update.MaxUnavailable, desired, false)
	if update.MaxUnavailable == nil || err != nil || maxUnavailable < 0 {
		maxUnavailable = 0
	}
	if maxSurge == 0 && maxUnavailable == 0 {
		maxUnavailable = 1
	}
	return maxSurge, maxUnavailable
}
