package skew

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ControlPlane is what a control plane object reports about itself that the gate needs: whether it
// is initialized and the Kubernetes versions its machines run now.
type ControlPlane struct {
	// Initialized is the control plane's status.initialization.controlPlaneInitialized.
	Initialized bool

	// Versions are the observed versions, in any order, as the control plane wrote them. They are
	// parsed by Decide, which reports a version that does not parse as InvalidVersion. The oldest
	// bounds the kubelets that may join (an HA control plane mid-upgrade runs two versions), the
	// newest bounds how old they may be.
	Versions []string
}

// ReadControlPlane reads a control plane object through the Cluster API v1beta2 control-plane
// contract:
//
//   - versions from status.versions (v1beta2 contract, e.g. KubeadmControlPlane since v1.14) when
//     it has entries, otherwise from status.version (deprecated, the minimum version). Never from
//     spec.version: that is what the control plane is asked to become, not what runs.
//   - initialized from status.initialization.controlPlaneInitialized, falling back to the v1beta1
//     contract's status.initialized, which Cluster API still honours until the v1beta1 contract is
//     removed.
//
// Missing fields are not an error: they give a ControlPlane that Decide reports as
// ControlPlaneUnknown. A field of the wrong type, or a status.versions entry without a version,
// is an error, because the object does not honour the contract.
func ReadControlPlane(obj *unstructured.Unstructured) (ControlPlane, error) {
	if obj == nil {
		return ControlPlane{}, errors.New("control plane object is nil")
	}
	content := obj.UnstructuredContent()

	initialized, err := readInitialized(content)
	if err != nil {
		return ControlPlane{}, err
	}

	versions, err := readStatusVersions(content)
	if err != nil {
		return ControlPlane{}, err
	}
	if len(versions) == 0 {
		version, found, err := unstructured.NestedString(content, "status", "version")
		if err != nil {
			return ControlPlane{}, fmt.Errorf("reading status.version: %w", err)
		}
		if found && version != "" {
			versions = []string{version}
		}
	}

	return ControlPlane{Initialized: initialized, Versions: versions}, nil
}

func readInitialized(content map[string]interface{}) (bool, error) {
	initialized, found, err := unstructured.NestedBool(content, "status", "initialization", "controlPlaneInitialized")
	if err != nil {
		return false, fmt.Errorf("reading status.initialization.controlPlaneInitialized: %w", err)
	}
	if found {
		return initialized, nil
	}
	initialized, _, err = unstructured.NestedBool(content, "status", "initialized")
	if err != nil {
		return false, fmt.Errorf("reading status.initialized: %w", err)
	}
	return initialized, nil
}

func readStatusVersions(content map[string]interface{}) ([]string, error) {
	entries, found, err := unstructured.NestedSlice(content, "status", "versions")
	if err != nil {
		return nil, fmt.Errorf("reading status.versions: %w", err)
	}
	if !found {
		return nil, nil
	}
	versions := make([]string, 0, len(entries))
	for i, entry := range entries {
		fields, ok := entry.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("status.versions[%d] is a %T, not an object", i, entry)
		}
		version, found, err := unstructured.NestedString(fields, "version")
		if err != nil {
			return nil, fmt.Errorf("reading status.versions[%d].version: %w", i, err)
		}
		if !found {
			return nil, fmt.Errorf("status.versions[%d] has no version", i)
		}
		versions = append(versions, version)
	}
	return versions, nil
}

// ControlPlaneVersionsChanged reports whether what the gate reads from a control plane object
// differs between two revisions of it. A provider uses it in the update predicate of its watch on
// the control plane, so that a closed gate re-opens as soon as the control plane reports new
// versions, without reconciling pools on every unrelated status change. An object that cannot be
// read counts as changed, so that the reconciler gets to report the error.
func ControlPlaneVersionsChanged(oldObj, newObj *unstructured.Unstructured) bool {
	before, errBefore := ReadControlPlane(oldObj)
	after, errAfter := ReadControlPlane(newObj)
	if errBefore != nil || errAfter != nil {
		return true
	}
	return before.Initialized != after.Initialized || !slices.Equal(before.Versions, after.Versions)
}
