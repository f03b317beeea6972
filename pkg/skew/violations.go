package skew

import (
	"fmt"
	"slices"

	"github.com/blang/semver/v4"
)

// Violation is a kubelet version that breaks the version skew policy against the versions of the
// kube-apiservers that serve, by the rule Decide admits versions with.
type Violation struct {
	Kubelet string
	// Reason is ControlPlaneOlder (the kubelet is newer than the oldest kube-apiserver) or TooOld
	// (more than three minors older than the newest).
	Reason Reason
	// APIServer is the kube-apiserver version the kubelet is judged against: the oldest for
	// ControlPlaneOlder, the newest for TooOld.
	APIServer string
}

func (v Violation) String() string {
	if v.Reason == TooOld {
		return fmt.Sprintf("kubelet %s more than %d minors older than kube-apiserver %s", v.Kubelet, maxKubeletMinorsBehind, v.APIServer)
	}
	return fmt.Sprintf("kubelet %s newer than kube-apiserver %s", v.Kubelet, v.APIServer)
}

// Violations judges kubelet versions (of running kubelets, or of instances about to run one)
// against the versions of the kube-apiservers that serve at the same moment, with the rule the
// gate admits versions by: a kubelet newer than the oldest kube-apiserver, by any part of the
// version as semver orders it, or more than three minors older than the newest, breaks it. The
// policy itself counts minors only; the gate is stricter, and a monitor checks what the gate
// promises.
//
// With no kube-apiserver there is nothing to judge against and no violation: a monitor counts such
// a moment apart, as one that proves nothing. A version that does not parse is an error.
func Violations(kubelets, apiServers []string) ([]Violation, error) {
	if len(apiServers) == 0 {
		return nil, nil
	}
	servers := make([]semver.Version, 0, len(apiServers))
	for _, s := range apiServers {
		v, err := ParseVersion(s)
		if err != nil {
			return nil, fmt.Errorf("kube-apiserver version: %w", err)
		}
		servers = append(servers, v)
	}
	oldest, newest := slices.MinFunc(servers, semver.Version.Compare), slices.MaxFunc(servers, semver.Version.Compare)
	var violations []Violation
	for _, k := range kubelets {
		v, err := ParseVersion(k)
		if err != nil {
			return nil, fmt.Errorf("kubelet version: %w", err)
		}
		switch reason := honoursSkew(v, oldest, newest); reason {
		case ControlPlaneOlder:
			violations = append(violations, Violation{Kubelet: formatVersion(v), Reason: reason, APIServer: formatVersion(oldest)})
		case TooOld:
			violations = append(violations, Violation{Kubelet: formatVersion(v), Reason: reason, APIServer: formatVersion(newest)})
		}
	}
	return violations, nil
}
