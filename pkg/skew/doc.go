// Package skew is a version-skew gate for Cluster API InfraMachinePool providers: it decides
// whether a pool may create instances of a Kubernetes version now, under the Kubernetes version
// skew policy (no kubelet newer than the oldest kube-apiserver, none more than three minor
// versions older than the newest), whatever order the control plane, MachinePool and
// infrastructure objects are updated in.
//
// It has no dependency on any infrastructure: a Docker, AWS or Azure provider uses it the same way.
//
//  1. Read the control plane through the Cluster API contract with ReadControlPlane (status.versions,
//     else status.version; never spec.version) from the object the Cluster's
//     spec.controlPlaneRef names, fetched as unstructured.
//  2. Call Decide with the version the pool would create now (its image, launch template or VM
//     model; VersionFromImageTag reads it from a node image tag), the MachinePool's
//     spec.template.spec.version, the versions the pool's instances run and the version it last
//     admitted.
//  3. On Proceed, roll out the target version. On Wait, create nothing at the target version, keep
//     deleting and scaling down, and keep replacing instances at a version Decision.Admits accepts.
//     Publish Decision.Condition on the pool.
//  4. Watch the control plane object (ControlPlaneVersionsChanged is an update predicate) so that
//     the gate re-opens as soon as the control plane reports new versions. Optionally, while it
//     waits, narrow the control plane with ControlPlane.WithoutGoneMachines by the machines the
//     provider proves gone, and decide again: the gate then re-opens before the control plane
//     provider's next status write.
//
// # Rules and precedence
//
// Decide applies, in this order, the first rule that holds: InvalidVersion, VersionMismatch,
// ControlPlaneUnknown, ControlPlaneOlder, TooOld; otherwise Admitted. See Decide for each rule.
//
// # Admitted versions
//
// The verdict is about the target version. Decision.AdmittedVersions (and Decision.Admits) say at
// which versions new instances may be created now: the target version on Proceed, plus each
// running version, and the last admitted version the provider recorded, that still honours the
// skew policy against the observed control plane. Such a version was admitted when the pool first
// created it, so the VersionMismatch rule does not apply to it, but a control plane that moved on
// can withdraw it (TooOld). Nothing is admitted while the control plane is unknown.
//
// # Versions
//
// Versions are semantic versions with or without a leading "v" (ParseVersion); anything else is
// an error, never a guess. Image tags are stricter: VersionFromImageTag requires the "v", as
// Kubernetes tags its images, because "1.33.1" on an image often versions something else. Order is semver order: a pre-release sorts before its release
// (v1.37.0-beta.0 < v1.37.0) and build metadata is ignored, for ordering and for agreement
// (SameRelease: a MachinePool at v1.37.0+build.1 agrees with an image of v1.37.0), as the skew
// policy ignores it; the gate still lists and displays versions with it. Image tags and label values, which cannot hold
// "+", write build metadata after "_" (VersionFromImageTag, VersionLabelValue).
//
// KubeadmAPIVersion and KubeadmAPIVersionReadable say whether bootstrap data rendered for one
// Kubernetes version can be read by the kubeadm of another, which matters when a pool keeps
// creating instances at an admitted version while the MachinePool already names the next one.
//
// # Importing
//
// The package is a Go module of its own, github.com/capdmp/capdmp/pkg/skew, tagged pkg/skew/vX.Y.Z
// beside the provider's releases. It requires only github.com/blang/semver/v4 and
// k8s.io/apimachinery (metav1 and unstructured), at the oldest versions it builds with (go.mod),
// and no Cluster API or controller-runtime module: a provider pinned to another Cluster API and
// Kubernetes minor keeps its own versions. examples/skew-importer, pinned to Cluster API v1.13,
// builds and runs it in this repository's tests.
package skew
