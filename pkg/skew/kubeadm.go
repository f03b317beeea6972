package skew

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
)

// The kubeadm API group of the configuration files in kubeadm bootstrap data.
const kubeadmGroup = "kubeadm.k8s.io"

// kubeadmAPIVersionReaders says which kubeadm minor versions read a kubeadm API version:
// [first, last]; last 0 means every release since first. v1beta3 is deprecated since kubeadm 1.31
// but still read by every release seen here (up to v1.37); when a kubeadm release stops reading
// it, this table needs its last minor.
var kubeadmAPIVersionReaders = map[string]struct{ first, last uint64 }{
	"v1beta2": {first: 15, last: 26},
	"v1beta3": {first: 22},
	"v1beta4": {first: 31},
}

// oldestKubeadmMinor is the oldest Kubernetes minor Cluster API's kubeadm bootstrap provider renders
// data for.
const oldestKubeadmMinor = 22

// KubeadmAPIVersion returns the kubeadm API group version (e.g. "kubeadm.k8s.io/v1beta4") that
// Cluster API's kubeadm bootstrap provider writes the Init/JoinConfiguration in for a Kubernetes
// version: v1beta3 for 1.22 to 1.30, v1beta4 from 1.31. Pre-releases count as their release, as in
// the bootstrap provider. Versions before 1.22 are an error: the bootstrap provider refuses them.
func KubeadmAPIVersion(kubernetesVersion string) (string, error) {
	v, err := kubeadmKubernetesVersion(kubernetesVersion)
	if err != nil {
		return "", err
	}
	if v.Minor >= kubeadmAPIVersionReaders["v1beta4"].first {
		return kubeadmGroup + "/v1beta4", nil
	}
	return kubeadmGroup + "/v1beta3", nil
}

// KubeadmAPIVersionReadable reports whether the kubeadm of a Kubernetes version can read a
// configuration written in apiVersion ("kubeadm.k8s.io/v1beta4" or just "v1beta4").
//
// Bootstrap data is rendered for the MachinePool's version, but an instance runs the kubeadm of its
// own image. Before creating an instance whose version differs from the one the data was rendered
// for (a replacement at the admitted version while the MachinePool already names the next one), a
// controller checks this and, when false, has the data re-rendered or waits: a kubeadm 1.30 cannot
// read the v1beta4 that data rendered for 1.31 contains, while a kubeadm 1.31+ still reads v1beta3.
//
// Kubernetes versions before 1.22, API versions of another group, and kubeadm API versions this
// package does not know are errors.
func KubeadmAPIVersionReadable(kubernetesVersion, apiVersion string) (bool, error) {
	v, err := kubeadmKubernetesVersion(kubernetesVersion)
	if err != nil {
		return false, err
	}
	version := apiVersion
	if group, name, hasGroup := strings.Cut(apiVersion, "/"); hasGroup {
		if group != kubeadmGroup {
			return false, fmt.Errorf("%q is not a kubeadm API version (group %s)", apiVersion, kubeadmGroup)
		}
		version = name
	}
	readers, known := kubeadmAPIVersionReaders[version]
	if !known {
		return false, fmt.Errorf("unknown kubeadm API version %q", apiVersion)
	}
	if v.Minor < readers.first {
		return false, nil
	}
	return readers.last == 0 || v.Minor <= readers.last, nil
}

func kubeadmKubernetesVersion(kubernetesVersion string) (semver.Version, error) {
	v, err := ParseVersion(kubernetesVersion)
	if err != nil {
		return semver.Version{}, err
	}
	if v.Major != 1 || v.Minor < oldestKubeadmMinor {
		return semver.Version{}, fmt.Errorf("unsupported Kubernetes version %s: Cluster API's kubeadm bootstrap provider renders data for v1.%d to v1.x only", formatVersion(v), oldestKubeadmMinor)
	}
	return v, nil
}
