// Package importer is a provider's use of pkg/skew as a provider pinned to another Cluster API
// would write it: Cluster API v1.13, Kubernetes v0.35 libraries, and a KubeadmControlPlane of the
// v1beta1 contract (status.initialized, status.version). It is a module of its own so that `go
// test` here proves pkg/skew builds and decides under those pins without raising them
// (TestKeepsItsPins).
package importer

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	controlplanev1beta1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta1" //nolint:staticcheck // the v1beta1 KubeadmControlPlane a provider on Cluster API v1.13 may still read
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capdmp/capdmp/pkg/skew"
)

// Pool is what the provider keeps of its pool: the node image it would boot now and the versions
// its instances run.
type Pool struct {
	Image           string
	RunningVersions []string
	LastAdmitted    string
	MachinePool     *clusterv1.MachinePool
}

// Gate decides whether the pool may create instances of its image's version now, reading the
// control plane as a provider does: through the contract, from the object as unstructured.
func Gate(pool Pool, controlPlane *controlplanev1beta1.KubeadmControlPlane) (skew.Decision, error) {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(controlPlane)
	if err != nil {
		return skew.Decision{}, fmt.Errorf("converting %s to unstructured: %w", controlPlane.Name, err)
	}
	observed, err := skew.ReadControlPlane(&unstructured.Unstructured{Object: content})
	if err != nil {
		return skew.Decision{}, fmt.Errorf("reading control plane %s: %w", controlPlane.Name, err)
	}
	target, err := skew.VersionFromImageTag(pool.Image)
	if err != nil {
		return skew.Decision{}, fmt.Errorf("reading the version of image %s: %w", pool.Image, err)
	}
	return skew.Decide(skew.Input{
		ControlPlane:        observed,
		TargetVersion:       target,
		MachinePoolVersion:  pool.MachinePool.Spec.Template.Spec.Version,
		RunningVersions:     pool.RunningVersions,
		LastAdmittedVersion: pool.LastAdmitted,
	}), nil
}
