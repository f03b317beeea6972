package skewupstream

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"

	"github.com/capdmp/capdmp/pkg/skew"
)

// TestReadControlPlaneKubeadmControlPlane reads a v1beta2 KubeadmControlPlane, converted the way a
// client returns it, to pin the field paths skew.ReadControlPlane reads to Cluster API's types.
func TestReadControlPlaneKubeadmControlPlane(t *testing.T) {
	tests := []struct {
		name   string
		status controlplanev1.KubeadmControlPlaneStatus
		want   skew.ControlPlane
	}{
		{
			name: "mid-upgrade, status.versions and deprecated status.version",
			status: controlplanev1.KubeadmControlPlaneStatus{
				Initialization: controlplanev1.KubeadmControlPlaneInitializationStatus{ControlPlaneInitialized: ptr.To(true)},
				Versions:       []clusterv1.StatusVersion{{Version: "v1.33.4", Replicas: 2}, {Version: "v1.34.1", Replicas: 1}},
				Version:        "v1.33.4", //nolint:staticcheck // the deprecated field is the fallback under test
			},
			want: skew.ControlPlane{Initialized: true, Versions: []string{"v1.33.4", "v1.34.1"}},
		},
		{
			name: "older KubeadmControlPlane with status.version only",
			status: controlplanev1.KubeadmControlPlaneStatus{
				Initialization: controlplanev1.KubeadmControlPlaneInitializationStatus{ControlPlaneInitialized: ptr.To(true)},
				Version:        "v1.33.4", //nolint:staticcheck // the deprecated field is the fallback under test
			},
			want: skew.ControlPlane{Initialized: true, Versions: []string{"v1.33.4"}},
		},
		{
			name:   "just created",
			status: controlplanev1.KubeadmControlPlaneStatus{},
			want:   skew.ControlPlane{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			kcp := &controlplanev1.KubeadmControlPlane{Spec: controlplanev1.KubeadmControlPlaneSpec{Version: "v1.35.0"}, Status: tt.status}
			content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(kcp)
			g.Expect(err).ToNot(HaveOccurred())

			got, err := skew.ReadControlPlane(&unstructured.Unstructured{Object: content})
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got.Initialized).To(Equal(tt.want.Initialized))
			g.Expect(got.Versions).To(ConsistOf(tt.want.Versions))
		})
	}
}

// TestKubeadmAPIVersionAsTheBootstrapProvider: skew.KubeadmAPIVersion names the kubeadm API
// version Cluster API's kubeadm bootstrap provider renders for the same Kubernetes version.
func TestKubeadmAPIVersionAsTheBootstrapProvider(t *testing.T) {
	for _, version := range []string{"v1.22.0", "v1.22.0-rc.0", "1.30.14", "v1.30.99+build", "v1.31.0-alpha.1", "v1.31.0", "v1.37.2"} {
		t.Run(version, func(t *testing.T) {
			g := NewWithT(t)

			got, err := skew.KubeadmAPIVersion(version)
			g.Expect(err).ToNot(HaveOccurred())
			v, err := skew.ParseVersion(version)
			g.Expect(err).ToNot(HaveOccurred())
			gv, err := kubeadmtypes.KubeVersionToKubeadmAPIGroupVersion(v)
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got).To(Equal(gv.String()))
		})
	}
}
