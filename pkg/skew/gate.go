package skew

import (
	"fmt"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxKubeletMinorsBehind is how many minor versions a kubelet may be older than the newest
// kube-apiserver under the Kubernetes version skew policy.
const maxKubeletMinorsBehind = 3

// Verdict says whether a pool may create instances of its target version now.
type Verdict string

const (
	// Proceed means instances of the target version may be created.
	Proceed Verdict = "Proceed"
	// Wait means no instance of the target version may be created yet. Versions in
	// Decision.AdmittedVersions may still be used (replacements, scale-up).
	Wait Verdict = "Wait"
)

// Reason says why the gate decided as it did. The values are valid metav1.Condition reasons.
type Reason string

const (
	// Admitted means the target version honours the skew policy against every observed
	// control-plane version and agrees with the MachinePool.
	Admitted Reason = "Admitted"
	// InvalidVersion means one of the versions given to the gate does not parse. Nothing is
	// admitted.
	InvalidVersion Reason = "InvalidVersion"
	// VersionMismatch means the target version (from the infrastructure, e.g. the image) differs
	// from the MachinePool's spec.template.spec.version; one of the two objects is stale.
	VersionMismatch Reason = "VersionMismatch"
	// ControlPlaneUnknown means the control plane is not initialized or reports no version.
	// Nothing is admitted.
	ControlPlaneUnknown Reason = "ControlPlaneUnknown"
	// ControlPlaneOlder means the target version is newer than the oldest observed control-plane
	// version; a kubelet must never be newer than a kube-apiserver it may talk to.
	ControlPlaneOlder Reason = "ControlPlaneOlder"
	// TooOld means the target version is more than three minor versions older than the newest
	// observed control-plane version.
	TooOld Reason = "TooOld"
)

// Input is what the gate decides on. All versions are strings as found in the objects, with or
// without a leading "v"; Decide parses them.
type Input struct {
	// ControlPlane is what the control plane reports (see ReadControlPlane). Its spec.version
	// must not be used here.
	ControlPlane ControlPlane

	// TargetVersion is the Kubernetes version an instance would run if the pool created one now:
	// the version of its current image, launch template or VM model. Required.
	TargetVersion string

	// MachinePoolVersion is the owning MachinePool's spec.template.spec.version. Empty when the
	// MachinePool sets no version; the VersionMismatch rule is then skipped.
	MachinePoolVersion string

	// RunningVersions are the versions of the instances the pool has now (duplicates allowed),
	// as recorded on them. A running version stays admitted for replacements and scale-up while
	// it honours the skew policy, even when the target version is not admitted.
	RunningVersions []string

	// LastAdmittedVersion is the version the pool last created instances at, as the provider
	// recorded it (CAPDMP: status.versionGate.admittedVersion). Optional. It stays admitted like a
	// running version, so that replacements go on while the gate waits even when no instance runs
	// it any more (all removed by hand, or the pool scaled to zero and back).
	LastAdmittedVersion string
}

// Decision is the gate's answer for one Input.
type Decision struct {
	// Verdict: Proceed or Wait, for instances of the target version.
	Verdict Verdict
	// Reason is the typed reason for the Verdict.
	Reason Reason
	// Message explains the decision for a human, naming the versions compared; it is fit for the
	// message of a metav1.Condition.
	Message string

	// TargetVersion is the canonical target version, empty if it did not parse.
	TargetVersion string
	// OldestControlPlaneVersion and NewestControlPlaneVersion are the canonical bounds of the
	// observed control-plane versions, empty when unknown or invalid.
	OldestControlPlaneVersion string
	NewestControlPlaneVersion string

	// AdmittedVersions are the canonical versions at which new instances may be created now,
	// ascending: the target version when the Verdict is Proceed, and every running version and
	// the last admitted version that honour the skew policy against the observed control plane.
	// Empty on InvalidVersion and ControlPlaneUnknown.
	AdmittedVersions []string
}

// Admits reports whether a new instance at version may be created now. While the gate waits, a
// controller keeps creating replacements at a version Admits accepts (usually the one its
// instances already run) and creates nothing at the target version. A version that does not parse
// is never admitted.
func (d Decision) Admits(version string) bool {
	canonical, err := CanonicalVersion(version)
	if err != nil {
		return false
	}
	return slices.Contains(d.AdmittedVersions, canonical)
}

// Condition returns the decision as a metav1.Condition of the given type: True with reason
// Admitted on Proceed, False with the Wait reason otherwise. The caller sets ObservedGeneration
// (Cluster API's conditions.Set does).
func (d Decision) Condition(conditionType string) metav1.Condition {
	status := metav1.ConditionFalse
	if d.Verdict == Proceed {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{
		Type:    conditionType,
		Status:  status,
		Reason:  string(d.Reason),
		Message: d.Message,
	}
}

// Decide applies the version-skew rules to in. The first rule that holds decides:
//
//  1. InvalidVersion: the target version is empty, or the target, the MachinePool, a control-plane,
//     a running or the last admitted version does not parse. Nothing else can be judged.
//  2. VersionMismatch: the MachinePool sets a version and it is another release than the target
//     version (SameRelease: build metadata ignored, as the skew policy and semver precedence
//     ignore it). One object is stale; the target is not trusted until they agree,
//     and a mismatch needs a human or a pipeline to finish, so it is reported before conditions
//     that resolve on their own.
//  3. ControlPlaneUnknown: the control plane is not initialized or reports no version.
//  4. ControlPlaneOlder: target > oldest control-plane version (semver order: pre-releases sort
//     before their release, build metadata is ignored). This is stricter than the policy's minor
//     granularity for patches on purpose: Kubernetes upgrades the control plane first.
//  5. TooOld: the target's minor is more than three below the newest control-plane version's
//     (or its major is lower). Patch and pre-release do not matter: v1.34.0-rc.1 may join v1.37.
//
// Otherwise the verdict is Proceed with reason Admitted. Whatever the verdict,
// Decision.AdmittedVersions lists the versions at which new instances may be created now.
func Decide(in Input) Decision {
	target, err := parseInput("target version", in.TargetVersion)
	if err != nil {
		return invalid(err)
	}
	d := Decision{TargetVersion: formatVersion(target)}

	var poolVersion *semver.Version
	if in.MachinePoolVersion != "" {
		v, err := ParseVersion(in.MachinePoolVersion)
		if err != nil {
			return invalid(fmt.Errorf("MachinePool version: %w", err))
		}
		poolVersion = &v
	}

	controlPlane := make([]semver.Version, 0, len(in.ControlPlane.Versions))
	for _, s := range in.ControlPlane.Versions {
		v, err := parseInput("control plane version", s)
		if err != nil {
			return invalid(err)
		}
		controlPlane = append(controlPlane, v)
	}

	alreadyAdmitted := make([]semver.Version, 0, len(in.RunningVersions)+1)
	for _, s := range in.RunningVersions {
		v, err := parseInput("running version", s)
		if err != nil {
			return invalid(err)
		}
		alreadyAdmitted = append(alreadyAdmitted, v)
	}
	if in.LastAdmittedVersion != "" {
		v, err := ParseVersion(in.LastAdmittedVersion)
		if err != nil {
			return invalid(fmt.Errorf("last admitted version: %w", err))
		}
		alreadyAdmitted = append(alreadyAdmitted, v)
	}

	var oldest, newest semver.Version
	controlPlaneKnown := in.ControlPlane.Initialized && len(controlPlane) > 0
	if controlPlaneKnown {
		oldest = slices.MinFunc(controlPlane, semver.Version.Compare)
		newest = slices.MaxFunc(controlPlane, semver.Version.Compare)
		d.OldestControlPlaneVersion, d.NewestControlPlaneVersion = formatVersion(oldest), formatVersion(newest)

		// A running version was admitted when its first instance was created; making more of it
		// does not widen the pool's versions, so only the skew policy can withdraw it.
		for _, v := range alreadyAdmitted {
			if honoursSkew(v, oldest, newest) == "" {
				d.AdmittedVersions = appendVersion(d.AdmittedVersions, v)
			}
		}
	}

	switch {
	case poolVersion != nil && target.Compare(*poolVersion) != 0:
		return d.wait(VersionMismatch, fmt.Sprintf(
			"Version %s of the infrastructure differs from the MachinePool version %s; waiting for the stale one to be updated",
			d.TargetVersion, formatVersion(*poolVersion)))
	case !in.ControlPlane.Initialized:
		return d.wait(ControlPlaneUnknown, fmt.Sprintf(
			"Waiting for the control plane to be initialized before admitting version %s", d.TargetVersion))
	case !controlPlaneKnown:
		return d.wait(ControlPlaneUnknown, fmt.Sprintf(
			"The control plane reports no version in status.versions or status.version; version %s cannot be checked against it",
			d.TargetVersion))
	}
	switch honoursSkew(target, oldest, newest) {
	case ControlPlaneOlder:
		return d.wait(ControlPlaneOlder, fmt.Sprintf(
			"Version %s is newer than the oldest control plane version %s; waiting for the control plane upgrade to finish",
			d.TargetVersion, d.OldestControlPlaneVersion))
	case TooOld:
		return d.wait(TooOld, fmt.Sprintf(
			"Version %s is more than %d minor versions older than the newest control plane version %s; at least v%d.%d is needed",
			d.TargetVersion, maxKubeletMinorsBehind, d.NewestControlPlaneVersion, newest.Major, oldestAllowedMinor(newest)))
	}

	d.Verdict, d.Reason = Proceed, Admitted
	d.AdmittedVersions = appendVersion(d.AdmittedVersions, target)
	d.Message = fmt.Sprintf("Version %s is admitted by control plane version %s", d.TargetVersion, controlPlaneRange(oldest, newest))
	return d
}

func parseInput(what, s string) (semver.Version, error) {
	if s == "" {
		return semver.Version{}, fmt.Errorf("%s is empty", what)
	}
	v, err := ParseVersion(s)
	if err != nil {
		return semver.Version{}, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

func invalid(err error) Decision {
	return Decision{
		Verdict: Wait,
		Reason:  InvalidVersion,
		Message: "Cannot check the version skew: " + err.Error(),
	}
}

func (d Decision) wait(reason Reason, message string) Decision {
	d.Verdict, d.Reason, d.Message = Wait, reason, message
	if len(d.AdmittedVersions) > 0 {
		d.Message += fmt.Sprintf("; new instances may still be created at %s", strings.Join(d.AdmittedVersions, ", "))
	}
	return d
}

// honoursSkew returns the rule v breaks against the control plane's version range, or "".
func honoursSkew(v, oldest, newest semver.Version) Reason {
	if v.GT(oldest) {
		return ControlPlaneOlder
	}
	if v.Major < newest.Major || (v.Major == newest.Major && v.Minor < oldestAllowedMinor(newest)) {
		return TooOld
	}
	return ""
}

func oldestAllowedMinor(newest semver.Version) uint64 {
	if newest.Minor < maxKubeletMinorsBehind {
		return 0
	}
	return newest.Minor - maxKubeletMinorsBehind
}

// sameVersion compares including build metadata, which semver ordering ignores, for what the gate
// lists and displays: v1.33.1+k3s1 and v1.33.1 are different builds of one release.
func sameVersion(a, b semver.Version) bool {
	return formatVersion(a) == formatVersion(b)
}

// appendVersion adds v to versions unless an equal version (build metadata included) is there,
// keeping them in ascending semver order.
func appendVersion(versions []string, v semver.Version) []string {
	canonical := formatVersion(v)
	if slices.Contains(versions, canonical) {
		return versions
	}
	i, _ := slices.BinarySearchFunc(versions, v, func(admitted string, v semver.Version) int {
		// Every admitted version was formatted from a parsed version, so it parses again.
		if c := semver.MustParse(admitted[1:]).Compare(v); c != 0 {
			return c
		}
		return strings.Compare(admitted, formatVersion(v))
	})
	return slices.Insert(versions, i, canonical)
}

func controlPlaneRange(oldest, newest semver.Version) string {
	if sameVersion(oldest, newest) {
		return formatVersion(oldest)
	}
	return fmt.Sprintf("%s (oldest) to %s (newest)", formatVersion(oldest), formatVersion(newest))
}
