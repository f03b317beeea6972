// Package nodeimage maps Kubernetes versions to node images and back. The version-skew gate
// reads the Kubernetes version a pool would create from the image, so an image's tag must be the
// version it runs.
package nodeimage

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/distribution/reference"

	"sigs.k8s.io/cluster-api/test/infrastructure/kind"
)

// ImageForVersion returns the node image for a Kubernetes version: customImage when it is set,
// else the kindest/node image Cluster API maps the version to, referenced by tag.
//
// Cluster API pins the images kind published by registry digest; CAPDMP drops the digest because
// it never pulls: an image is on the engine already, built or loaded (`kind load`, `docker load`,
// the stub and real node images of this repository), and a loaded image has no registry digest,
// so the pinned reference would not find it. PinnedImageForVersion gives the pinned reference,
// to pull the image onto the engine beforehand.
func ImageForVersion(version, customImage string) (string, error) {
	v, err := semver.ParseTolerant(version)
	if err != nil {
		return "", fmt.Errorf("invalid Kubernetes version %q: %w", version, err)
	}
	if customImage != "" {
		if _, err := reference.ParseNormalizedNamed(customImage); err != nil {
			return "", fmt.Errorf("invalid custom image %q: %w", customImage, err)
		}
		return customImage, nil
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
	v, err := semver.ParseTolerant(version)
	if err != nil {
		return "", fmt.Errorf("invalid Kubernetes version %q: %w", version, err)
	}
	return kind.GetMapping(v, "").Image, nil
}

// VersionOfImage returns the Kubernetes version a node image runs, read from its tag: "v1.36.3"
// for "registry:5000/kindest/node:v1.36.3@sha256:...". An image without a tag, or whose tag is not
// vX.Y.Z (with semver's pre-release, and build metadata written with "_" as OCI tags require),
// is an error: the version cannot be told, and "latest" could be any.
func VersionOfImage(image string) (string, error) {
	if image == "" {
		return "", fmt.Errorf("no node image: set one tagged with its Kubernetes version (vX.Y.Z)")
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("invalid node image %q: %w", image, err)
	}
	tagged, ok := named.(reference.Tagged)
	if !ok {
		return "", fmt.Errorf("node image %q has no tag: tag it with the Kubernetes version it runs (vX.Y.Z), e.g. kindest/node:v1.36.3", image)
	}
	tag := tagged.Tag()
	if !strings.HasPrefix(tag, "v") {
		return "", notAVersion(image, tag)
	}
	// OCI tags cannot hold "+"; Cluster API writes semver build metadata with "_" instead.
	v, err := semver.Parse(strings.ReplaceAll(strings.TrimPrefix(tag, "v"), "_", "+"))
	if err != nil {
		return "", notAVersion(image, tag)
	}
	return "v" + v.String(), nil
}

func notAVersion(image, tag string) error {
	return fmt.Errorf("the tag %q of node image %q is not a Kubernetes version: use a vX.Y.Z tag, e.g. kindest/node:v1.36.3", tag, image)
}
