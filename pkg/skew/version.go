package skew

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/blang/semver/v4"
)

// ParseVersion parses a Kubernetes version: a full semantic version (major.minor.patch, optional
// pre-release and build metadata) with or without one leading lowercase "v".
//
// It is strict on purpose: "1.33", " v1.33.1", "V1.33.1", "v01.33.1" and "v1.33.1_k3s1" are
// errors, because a gate that guesses what a malformed version meant can admit the wrong kubelet.
// Image tags and label values, which cannot carry "+", have their own functions.
func ParseVersion(s string) (semver.Version, error) {
	if s == "" {
		return semver.Version{}, fmt.Errorf("empty version: expected v<major>.<minor>.<patch>")
	}
	v, err := semver.Parse(strings.TrimPrefix(s, "v"))
	if err != nil {
		return semver.Version{}, fmt.Errorf("%q is not a Kubernetes version (expected v<major>.<minor>.<patch>[-pre-release][+build]): %w", s, err)
	}
	return v, nil
}

// CanonicalVersion returns s in the form Kubernetes and Cluster API write versions: a leading "v"
// followed by the semantic version, e.g. "1.33.1" and "v1.33.1" both give "v1.33.1".
func CanonicalVersion(s string) (string, error) {
	v, err := ParseVersion(s)
	if err != nil {
		return "", err
	}
	return formatVersion(v), nil
}

// SameRelease reports whether a and b name one Kubernetes release: equal in semver precedence, so
// pre-releases count and build metadata does not ("v1.37.0+build.1" and "v1.37.0" are one
// release; "v1.37.0-rc.1" and "v1.37.0" are not). The skew policy and the gate's ordering ignore
// build metadata, so every check that two versions agree (a MachinePool and its image, an image's
// tag and its content, a label and the kubelet that runs) uses this one rule.
func SameRelease(a, b string) (bool, error) {
	va, err := ParseVersion(a)
	if err != nil {
		return false, err
	}
	vb, err := ParseVersion(b)
	if err != nil {
		return false, err
	}
	return va.Compare(vb) == 0, nil
}

func formatVersion(v semver.Version) string {
	return "v" + v.String()
}

// maxLabelValueLength is the limit Kubernetes puts on label values.
const maxLabelValueLength = 63

// VersionLabelValue returns the value under which a version is recorded in a label such as
// infrastructure.capdmp.dev/kubernetes-version. Label values cannot contain "+", so build metadata
// is joined with "_" as kubeadm does for image tags: "v1.33.1+k3s1" is recorded as "v1.33.1_k3s1".
// Versions longer than a label value may be (63 characters) are an error.
func VersionLabelValue(version string) (string, error) {
	canonical, err := CanonicalVersion(version)
	if err != nil {
		return "", err
	}
	value := strings.ReplaceAll(canonical, "+", "_")
	if len(value) > maxLabelValueLength {
		return "", fmt.Errorf("version %q is longer than the %d characters a label value may have", canonical, maxLabelValueLength)
	}
	return value, nil
}

// VersionFromLabelValue reads a version recorded by VersionLabelValue and returns it in canonical
// form. It accepts exactly what VersionLabelValue writes (and the same without the leading "v").
func VersionFromLabelValue(value string) (string, error) {
	if strings.Contains(value, "+") {
		return "", fmt.Errorf("label value %q cannot contain \"+\"", value)
	}
	if len(value) > maxLabelValueLength {
		return "", fmt.Errorf("label value %q is longer than %d characters", value, maxLabelValueLength)
	}
	return CanonicalVersion(strings.ReplaceAll(value, "_", "+"))
}

// Image reference grammar of the OCI distribution spec (github.com/distribution/reference),
// written out here so that pkg/skew needs no container library.
const (
	pathComponentPattern   = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
	domainComponentPattern = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	hostPattern            = `(?:` + domainComponentPattern + `(?:\.` + domainComponentPattern + `)*|\[[a-fA-F0-9:]+\])`
	domainPattern          = hostPattern + `(?::[0-9]+)?`
	namePattern            = `(?:` + domainPattern + `/)?` + pathComponentPattern + `(?:/` + pathComponentPattern + `)*`
	tagPattern             = `[\w][\w.-]{0,127}`
	digestPattern          = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
	maxRepositoryPathLen   = 255
)

var imageReference = regexp.MustCompile(`^(` + namePattern + `)(?::(` + tagPattern + `))?(?:@(` + digestPattern + `))?$`)

// digestLengths are the hex lengths of the digest algorithms a container engine verifies
// (github.com/opencontainers/go-digest). The grammar allows any algorithm, but an engine refuses
// a reference with another one, so a node image cannot use it.
var digestLengths = map[string]int{"sha256": 64, "sha384": 96, "sha512": 128}

// VersionFromImageTag returns, in canonical form, the Kubernetes version named by the tag of a
// node image reference such as "kindest/node:v1.33.1",
// "localhost:5000/kindest/node:v1.33.1@sha256:<64 hex>" or "registry.example:443/node:v1.33.1".
//
// The tag must be "v" followed by a semantic version, with "_" standing for "+" as in kubeadm's
// image tags ("v1.33.1_k3s1" is v1.33.1+k3s1). The "v" is required although ParseVersion accepts
// a version without it: Kubernetes tags its images that way (kindest/node, registry.k8s.io), and
// a bare "1.33.1" is more often the version of something else (a distribution, an image build)
// than of the kubelet inside; a gate that guessed could admit the wrong kubelet.
//
// The reference must be one a container engine accepts: the OCI distribution grammar, a
// repository path of at most 255 characters as the engine stores it (Docker Hub names under
// "library/"), and a digest, if any, in sha256, sha384 or sha512 with lower-case hex. A digest
// alone says nothing about the version and is an error, as are a registry port mistaken for a tag
// ("localhost:5000/kindest/node") and any tag that is not a version ("latest", "1.33.1").
func VersionFromImageTag(image string) (string, error) {
	m := imageReference.FindStringSubmatch(image)
	if m == nil {
		return "", fmt.Errorf("%q is not a valid image reference", image)
	}
	name, tag, digest := m[1], m[2], m[3]
	if path := repositoryPath(name); len(path) > maxRepositoryPathLen {
		return "", fmt.Errorf("repository path %q of image %q is longer than %d characters", path, image, maxRepositoryPathLen)
	}
	if digest != "" {
		if err := validateDigest(digest); err != nil {
			return "", fmt.Errorf("image %q: %w", image, err)
		}
	}
	if tag == "" {
		return "", fmt.Errorf("image %q has no tag: the Kubernetes version is read from the tag", image)
	}
	if !strings.HasPrefix(tag, "v") {
		return "", fmt.Errorf("tag %q of image %q is not a Kubernetes version: expected v<major>.<minor>.<patch>, as kindest/node tags are", tag, image)
	}
	version, err := CanonicalVersion(strings.ReplaceAll(tag, "_", "+"))
	if err != nil {
		return "", fmt.Errorf("tag of image %q: %w", image, err)
	}
	return version, nil
}

func validateDigest(digest string) error {
	algorithm, hex, _ := strings.Cut(digest, ":")
	want, known := digestLengths[algorithm]
	switch {
	case !known:
		return fmt.Errorf("digest algorithm %q is not one a container engine verifies (sha256, sha384, sha512)", algorithm)
	case len(hex) != want:
		return fmt.Errorf("%s digest has %d hex characters, expected %d", algorithm, len(hex), want)
	case strings.ToLower(hex) != hex:
		return fmt.Errorf("%s digest must be lower-case hex", algorithm)
	}
	return nil
}

// repositoryPath returns the path of an image name without its registry host, as an engine
// stores it: a name without a host is on Docker Hub, where a single component is under
// "library/" ("node" is docker.io/library/node). The length limit of the distribution spec
// applies to this path. The first component is a host when it is "localhost", contains "." or
// ":", or has an upper-case letter (repository paths are lower case).
func repositoryPath(name string) string {
	first, rest, hasSlash := strings.Cut(name, "/")
	host, path := "docker.io", name
	if hasSlash && (first == "localhost" || strings.ContainsAny(first, ".:") || strings.ToLower(first) != first) {
		host, path = first, rest
	}
	if (host == "docker.io" || host == "index.docker.io") && !strings.Contains(path, "/") {
		path = "library/" + path
	}
	return path
}
