// Package nodeimage maps Kubernetes versions to node images and back. The version-skew gate
// reads the Kubernetes version a pool would create from the image, so an image's tag must be the
// version it runs.
package nodeimage

import (
	"fmt"

	"github.com/distribution/reference"
	"sigs.k8s.io/cluster-api/test/infrastructure/kind"

	"github.com/capdmp/capdmp/pkg/skew"
)

// ImageForVersion returns the node image for a Kubernetes version: customImage when it is set,
// else the kindest/node image Cluster API maps the version to, referenced by tag.
//
// With customImage set the version is not read and may be empty: the image's tag is the version
// (VersionOfImage), and the version-skew gate compares a MachinePool version, when there is one,
// with it.
//
// Cluster API pins the images kind published by registry digest; CAPDMP drops the digest because
// it never pulls: an image is on the engine already, built or loaded (`kind load`, `docker load`,
// the stub and real node images of this repository), and a loaded image has no registry digest,
// so the pinned reference would not find it. PinnedImageForVersion gives the pinned reference,
// to pull the image onto the engine beforehand.
func ImageForVersion(version, customImage string) (string, error) {
	if customImage != "" {
		// VersionOfImage checks it: the reference and its tag are one rule.
		return customImage, nil
	}
	v, err := skew.ParseVersion(version)
	if err != nil {
		return "", fmt.Errorf("invalid Kubernetes version %q: %w", version, err)
	}
	pinned := kind.GetMapping(v, "").Image
	named, err := reference.ParseNormalizedNamed(pinned)
	if err != nil {
		return "", fmt.Errorf("invalid kindest/node image %q for version %q: %w", pinned, version, err)
	}
	tagged, ok := named.(reference.NamedTagged)
	if !ok {
		return "", fmt.Errorf("kindest/node image %q for version %q has no tag", pinned, version)
	}
	byTag, err := reference.WithTag(reference.TrimNamed(named), tagged.Tag())
	if err != nil {
		return "", fmt.Errorf("invalid kindest/node image %q for version %q: %w", pinned, version, err)
	}
	return reference.FamiliarString(byTag), nil
}

// PinnedImageForVersion returns Cluster API's kindest/node image for a Kubernetes version as the
// mapping has it: pinned by digest for the versions kind published (what `docker pull` should
// fetch before CAPDMP can use the image), by tag for the others.
func PinnedImageForVersion(version string) (string, error) {
	v, err := skew.ParseVersion(version)
	if err != nil {
		return "", fmt.Errorf("invalid Kubernetes version %q: %w", version, err)
	}
	return kind.GetMapping(v, "").Image, nil
}

// VersionOfImage returns the Kubernetes version a node image runs, read from its tag: "v1.36.3"
// for "registry:5000/kindest/node:v1.36.3@sha256:...". It is the one check of a node image that
// the controller (the pool's target) and the webhook (customImage) share, so that an image the
// webhook admits is always one the gate can read.
//
// The reference is checked by ParseReference, as every image reference CAPDMP takes. Which tags
// name a version is pkg/skew's rule (skew.VersionFromImageTag: vX.Y.Z, build metadata after "_"),
// the one other providers import; its grammar, written out so that they need no container
// library, accepts what ParseReference does (FuzzVersionOfImageMatchesEngine). On top of it the
// version must fit in a label value, because CAPDMP records it under
// infrastructure.capdmp.dev/kubernetes-version and the gate reads running versions back from there.
func VersionOfImage(image string) (string, error) {
	if image == "" {
		return "", fmt.Errorf("no node image: set one tagged with its Kubernetes version (vX.Y.Z)")
	}
	if _, err := ParseReference(image); err != nil {
		return "", err
	}
	version, err := skew.VersionFromImageTag(image)
	if err != nil {
		return "", err
	}
	if _, err := skew.VersionLabelValue(version); err != nil {
		return "", fmt.Errorf("node image %q: %w", image, err)
	}
	return version, nil
}
