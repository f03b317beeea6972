package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	pkgerrors "github.com/pkg/errors"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/metrics"
	"github.com/capdmp/capdmp/pkg/skew"
)

// reconcileVersionGate asks pkg/skew whether the pool may create containers of its target
// version now, and records the answer: the VersionSkewAdmitted condition, status.versionGate, an
// event when the reason changes, and the start of a pause with the bootstrap data it found then.
func (r *DockerMachinePoolReconciler) reconcileVersionGate(ctx context.Context, s *poolScope) (res ctrl.Result, _ error) {
	cp, err := r.controlPlaneOf(ctx, s.cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.controlPlane = cp

	input := skew.Input{
		TargetVersion:       s.targetVersion,
		MachinePoolVersion:  s.machinePool.Spec.Template.Spec.Version,
		LastAdmittedVersion: s.pool.Status.VersionGate.AdmittedVersion,
	}
	var unreadable []string
	running := map[string]bool{}
	for _, i := range s.active() {
		v, err := i.runningVersion()
		if err != nil {
			// A container whose version cannot be read runs no version the gate can judge. Running
			// versions only widen what the gate admits while it waits, so leaving it out can only
			// narrow that; guessing a version could admit a kubelet the skew policy forbids, and
			// handing the label to skew.Decide (InvalidVersion) would stop every creation, even
			// the rollout that replaces this container, over one container's label.
			ctrl.LoggerFrom(ctx).Error(err, "Not counting container as running any version: its Kubernetes version label does not parse",
				"container", i.name())
			unreadable = append(unreadable, i.name())
			continue
		}
		// Each version once: the gate asks which versions run, not how many of each.
		if !running[v] {
			running[v] = true
			input.RunningVersions = append(input.RunningVersions, v)
		}
	}
	var decision skew.Decision
	switch {
	case s.targetErr != nil:
		decision = skew.Decision{Verdict: skew.Wait, Reason: skew.InvalidVersion, Message: s.targetErr.Error()}
	case cp == nil:
		decision = skew.Decide(input)
	default:
		input.ControlPlane, err = skew.ReadControlPlane(cp)
		if err == nil && input.ControlPlane.Initialized {
			s.controlPlaneVersions = input.ControlPlane.Versions
		}
		if err != nil {
			decision = skew.Decision{Verdict: skew.Wait, Reason: skew.InvalidVersion,
				Message: fmt.Sprintf("%s %s does not honour the control plane contract: %v", cp.GetKind(), cp.GetName(), err)}
			break
		}
		decision = skew.Decide(input)
		if decision.Reason == skew.ControlPlaneOlder {
			narrowed, requeue := r.decideWithoutGoneMachines(ctx, s, input)
			if narrowed != nil {
				decision = *narrowed
			}
			res = requeue
		}
	}
	if decision.Verdict == skew.Wait && len(unreadable) > 0 {
		// While the gate waits, running versions decide what may still be created.
		decision.Message += fmt.Sprintf("; %s not counted as running any version: the %s label does not parse",
			containerList(unreadable), infrav1.KubernetesVersionLabel)
	}
	s.decision = &decision

	gate := &s.pool.Status.VersionGate
	if decision.Verdict != skew.Proceed && (gate.WaitingSince == nil || gate.WaitingReason == "") {
		if err := r.readRecordedPause(ctx, s.pool); err != nil {
			return ctrl.Result{}, err
		}
	}
	previousReason := gate.WaitingReason
	gate.TargetVersion = s.targetVersion
	conditions.Set(s.pool, decision.Condition(infrav1.VersionSkewCondition))

	if decision.Verdict == skew.Proceed {
		gate.AdmittedVersion, gate.AdmittedImage = s.targetVersion, s.targetImage
		gate.WaitingReason = ""
		if previousReason != "" {
			r.eventf(s.pool, corev1.EventTypeNormal, string(skew.Admitted), "Creating containers of %s again: %s", s.targetVersion, decision.Message)
			metrics.VersionGateReopens.WithLabelValues(s.pool.Namespace, s.pool.Name).Inc()
		}
		metrics.RecordVersionGate(s.pool.Namespace, s.pool.Name, false, string(decision.Reason), time.Time{}, r.clock())
		return res, nil
	}

	if gate.AdmittedImage == "" || !decision.Admits(gate.AdmittedVersion) {
		// Status lost (clusterctl move does not copy it, a status wipe), a gate that never
		// admitted here, or one whose last admission the control plane no longer supports (it
		// was admitted on proof that is in memory only, or the control plane was downgraded):
		// the containers still say what was admitted when they were made, and lost or unhealthy
		// ones are replaced at the newest of those the gate admits now.
		if version, image := s.admittedFromContainers(); image != "" || gate.AdmittedImage == "" {
			gate.AdmittedVersion, gate.AdmittedImage = version, image
		}
	}
	gate.WaitingReason = string(decision.Reason)
	if previousReason != gate.WaitingReason {
		r.eventf(s.pool, corev1.EventTypeNormal, string(decision.Reason), "Not creating containers of %s: %s", displayVersion(s.targetVersion), decision.Message)
	}
	if gate.WaitingSince == nil || previousReason == "" {
		// A new pause (the gate admitted at the last reconcile, whatever an earlier pause left):
		// remember the data the pool has now, so that no container is ever created with data
		// older than the pause.
		now := metav1.NewTime(r.clock())
		gate.WaitingSince = &now
		gate.BootstrapDataHashAtPause = ""
		if name := dataSecretName(s); name != "" {
			data, err := bootstrap.Read(ctx, r.APIReader, s.pool.Namespace, name)
			if err != nil {
				return ctrl.Result{}, pkgerrors.Wrap(err, "failed to read bootstrap data at the start of a pause")
			}
			gate.BootstrapDataHashAtPause = data.Hash
		}
	}
	metrics.RecordVersionGate(s.pool.Namespace, s.pool.Name, true, gate.WaitingReason, gate.WaitingSince.Time, r.clock())
	return res, nil
}

// decideWithoutGoneMachines decides again on the control plane without the versions of its
// machines proven gone, for a gate that waits for the control plane: KubeadmControlPlane writes
// its status seconds after its old Machine is gone. It returns that decision when it admits the
// target, else nil (the control plane's status decides), and a requeue while a machine is being
// deleted and not proven gone yet (goneMachineRecheckAfter).
func (r *DockerMachinePoolReconciler) decideWithoutGoneMachines(ctx context.Context, s *poolScope, input skew.Input) (*skew.Decision, ctrl.Result) {
	log := ctrl.LoggerFrom(ctx)
	narrowed, gone, pendingFor, err := r.controlPlaneWithoutGoneMachines(ctx, s.cluster, input.ControlPlane)
	switch {
	case errors.Is(err, errNotProven):
		log.V(4).Info("Not narrowing the control plane by its Machines", "reason", err.Error())
		return nil, ctrl.Result{}
	case err != nil:
		// The proof is an addition to the control plane's status, which still decides.
		log.Error(err, "Not narrowing the control plane by its Machines")
		return nil, ctrl.Result{RequeueAfter: goneMachineRecheckMax}
	}
	var res ctrl.Result
	if pendingFor > 0 {
		res.RequeueAfter = goneMachineRecheckAfter(pendingFor)
	}
	if len(gone) == 0 {
		return nil, res
	}
	input.ControlPlane = narrowed
	decision := skew.Decide(input)
	if decision.Verdict != skew.Proceed {
		return nil, res
	}
	decision.Message += fmt.Sprintf("; control-plane %s gone before %s reports it: deleted, infrastructure not found, no container on the engine",
		machineList(gone), s.cluster.Spec.ControlPlaneRef.Kind)
	log.Info("Control-plane Machines proven gone: not counting their version", "machines", gone, "versions", narrowed.Versions)
	// The pool's kubelets are judged against what runs too: the new kubelets this admits are not
	// out of policy against a kube-apiserver proven gone.
	s.controlPlaneVersions = narrowed.Versions
	return &decision, res
}

// machineList names a few Machines, as containerList does containers.
func machineList(names []string) string {
	return strings.Replace(containerList(names), "container", "Machine", 1)
}

// admittedFromContainers is the newest version, and the image it was created from, that the
// pool's running containers carry and the gate still admits; empty when none does.
func (s *poolScope) admittedFromContainers() (version, image string) {
	var newest *instance
	var newestVersion semver.Version
	for _, i := range s.active() {
		recorded, err := i.recordedVersion()
		if err != nil || !i.container.Running || !s.decision.Admits(recorded) {
			continue
		}
		v, err := skew.ParseVersion(recorded)
		if err != nil {
			continue
		}
		if newest == nil || v.GT(newestVersion) || (v.EQ(newestVersion) && i.container.CreatedAt.After(newest.container.CreatedAt)) {
			newest, newestVersion = i, v
		}
	}
	if newest == nil {
		return "", ""
	}
	version, _ = newest.recordedVersion()
	return version, newest.imageReference()
}

// readRecordedPause takes the pause recorded on the API server when the pool, read from the
// cache, shows none: a copy older than the reconcile that began the pause would begin it again
// with the data of now, which a refresh may already have renewed, and revoke that fresh token.
// A live read happens only when a pause seems to begin.
func (r *DockerMachinePoolReconciler) readRecordedPause(ctx context.Context, pool *infrav1.DockerMachinePool) error {
	live := &infrav1.DockerMachinePool{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pool), live); err != nil {
		return pkgerrors.Wrapf(err, "failed to read the version gate of DockerMachinePool %s", klog.KObj(pool))
	}
	if recorded := live.Status.VersionGate; recorded.WaitingSince != nil && recorded.WaitingReason != "" {
		gate := &pool.Status.VersionGate
		gate.WaitingSince, gate.WaitingReason, gate.BootstrapDataHashAtPause = recorded.WaitingSince, recorded.WaitingReason, recorded.BootstrapDataHashAtPause
	}
	return nil
}

// containerList names a few containers, so that a condition message stays short on a big pool.
func containerList(names []string) string {
	const maxNames = 3
	if len(names) == 1 {
		return "container " + names[0]
	}
	if len(names) <= maxNames {
		return "containers " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("containers %s and %d more", strings.Join(names[:maxNames], ", "), len(names)-maxNames)
}

func displayVersion(v string) string {
	if v == "" {
		return "an unknown version"
	}
	return v
}

// reconcileKubeletSkew reports the pool's kubelets that break the version skew policy against the
// control plane as it runs now (skew.Violations, the rule the gate admits by): one the gate
// admitted falls out of policy when the control plane moves more than three minors ahead of it,
// or is downgraded below it. Nothing the pool can do fixes that; it says so in the
// KubeletsWithinSkewPolicy condition, a warning event and the capdmp_kubelets_out_of_skew_policy
// metric.
func (r *DockerMachinePoolReconciler) reconcileKubeletSkew(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	if len(s.controlPlaneVersions) == 0 {
		kubeletSkewUnknown(s, "The control plane reports no version to judge the pool's kubelets by")
		return ctrl.Result{}, nil
	}
	// Each version the pool runs is judged once, for all its kubelets.
	judged := map[string][]skew.Violation{}
	var outOfPolicy []string
	for _, i := range s.active() {
		v, err := i.runningVersion()
		if err != nil {
			continue // reported by the gate as not counted
		}
		violations, ok := judged[v]
		if !ok {
			if violations, err = skew.Violations([]string{v}, s.controlPlaneVersions); err != nil {
				// A version the control plane reports that does not parse is the control plane's
				// input to fix, which the gate reports as InvalidVersion: the judgement is
				// unknown, and the phases after this one (scale-down, remediation) still run.
				kubeletSkewUnknown(s, "Cannot judge the pool's kubelets against the control plane: "+err.Error())
				return ctrl.Result{}, nil //nolint:nilerr // the control plane's input to fix, reported in the condition instead of a retry loop
			}
			judged[v] = violations
		}
		for _, violation := range violations {
			outOfPolicy = append(outOfPolicy, fmt.Sprintf("%s (%s)", i.name(), violation))
		}
	}
	metrics.KubeletsOutOfPolicy.WithLabelValues(s.pool.Namespace, s.pool.Name).Set(float64(len(outOfPolicy)))
	if len(outOfPolicy) == 0 {
		conditions.Set(s.pool, metaCondition(infrav1.KubeletSkewCondition, true, infrav1.KubeletsWithinSkewPolicyReason, ""))
		return ctrl.Result{}, nil
	}
	counted := fmt.Sprintf("%d kubelets break", len(outOfPolicy))
	if len(outOfPolicy) == 1 {
		counted = "1 kubelet breaks"
	}
	msg := fmt.Sprintf("%s the version skew policy: %s", counted, containerList(outOfPolicy))
	if previous := conditions.Get(s.pool, infrav1.KubeletSkewCondition); previous == nil || previous.Message != msg {
		ctrl.LoggerFrom(ctx).Info("Kubelets of the pool break the version skew policy", "kubelets", outOfPolicy)
		r.eventf(s.pool, corev1.EventTypeWarning, infrav1.KubeletsOutOfSkewPolicyReason, "%s", msg)
	}
	conditions.Set(s.pool, metaCondition(infrav1.KubeletSkewCondition, false, infrav1.KubeletsOutOfSkewPolicyReason, msg))
	return ctrl.Result{}, nil
}

// kubeletSkewUnknown reports that the pool's kubelets cannot be judged, and why.
func kubeletSkewUnknown(s *poolScope, msg string) {
	conditions.Set(s.pool, metav1.Condition{Type: infrav1.KubeletSkewCondition, Status: metav1.ConditionUnknown,
		Reason: infrav1.KubeletSkewUnknownReason, Message: msg})
	metrics.KubeletsOutOfPolicy.WithLabelValues(s.pool.Namespace, s.pool.Name).Set(0)
}
