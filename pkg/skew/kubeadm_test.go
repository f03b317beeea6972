package skew

import (
	"testing"

	"github.com/blang/semver/v4"
	. "github.com/onsi/gomega"
)

func TestKubeadmAPIVersion(t *testing.T) {
	tests := []struct {
		version string
		want    string
		wantErr bool
	}{
		{version: "v1.22.0", want: "kubeadm.k8s.io/v1beta3"},
		{version: "1.30.14", want: "kubeadm.k8s.io/v1beta3"},
		{version: "v1.30.99+build", want: "kubeadm.k8s.io/v1beta3"},
		{version: "v1.31.0", want: "kubeadm.k8s.io/v1beta4"},
		{version: "v1.31.0-alpha.1", want: "kubeadm.k8s.io/v1beta4"},
		{version: "v1.37.2", want: "kubeadm.k8s.io/v1beta4"},
		{version: "v1.21.14", wantErr: true},
		{version: "v1.22.0-rc.0", want: "kubeadm.k8s.io/v1beta3"},
		{version: "v2.0.0", wantErr: true},
		{version: "v1.31", wantErr: true},
		{version: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			g := NewWithT(t)

			got, err := KubeadmAPIVersion(tt.version)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestKubeadmAPIVersionReadable(t *testing.T) {
	tests := []struct {
		name       string
		kubernetes string
		apiVersion string
		want       bool
		wantErr    bool
	}{
		{name: "1.30 reads v1beta3", kubernetes: "v1.30.14", apiVersion: "kubeadm.k8s.io/v1beta3", want: true},
		{name: "1.30 cannot read v1beta4", kubernetes: "v1.30.14", apiVersion: "kubeadm.k8s.io/v1beta4", want: false},
		{name: "1.31 reads v1beta4", kubernetes: "v1.31.0", apiVersion: "kubeadm.k8s.io/v1beta4", want: true},
		{name: "1.31 pre-release reads v1beta4", kubernetes: "v1.31.0-rc.0", apiVersion: "kubeadm.k8s.io/v1beta4", want: true},
		{name: "1.31 still reads v1beta3", kubernetes: "v1.31.0", apiVersion: "kubeadm.k8s.io/v1beta3", want: true},
		{name: "1.37 still reads v1beta3", kubernetes: "v1.37.2", apiVersion: "kubeadm.k8s.io/v1beta3", want: true},
		{name: "1.22 reads v1beta3", kubernetes: "v1.22.0", apiVersion: "v1beta3", want: true},
		{name: "1.22 cannot read v1beta4", kubernetes: "v1.22.0", apiVersion: "v1beta4", want: false},
		{name: "1.26 reads v1beta2", kubernetes: "v1.26.15", apiVersion: "kubeadm.k8s.io/v1beta2", want: true},
		{name: "1.27 cannot read v1beta2", kubernetes: "v1.27.0", apiVersion: "kubeadm.k8s.io/v1beta2", want: false},
		{name: "version without v", kubernetes: "1.34.0", apiVersion: "v1beta4", want: true},
		{name: "unknown kubeadm API version", kubernetes: "v1.34.0", apiVersion: "kubeadm.k8s.io/v1beta5", wantErr: true},
		{name: "removed kubeadm API version", kubernetes: "v1.34.0", apiVersion: "kubeadm.k8s.io/v1beta1", wantErr: true},
		{name: "another group", kubernetes: "v1.34.0", apiVersion: "kubelet.config.k8s.io/v1beta1", wantErr: true},
		{name: "empty API version", kubernetes: "v1.34.0", apiVersion: "", wantErr: true},
		{name: "group only", kubernetes: "v1.34.0", apiVersion: "kubeadm.k8s.io/", wantErr: true},
		{name: "Kubernetes before 1.22", kubernetes: "v1.21.0", apiVersion: "v1beta2", wantErr: true},
		{name: "unparsable Kubernetes version", kubernetes: "v1.31", apiVersion: "v1beta4", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			got, err := KubeadmAPIVersionReadable(tt.kubernetes, tt.apiVersion)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				g.Expect(got).To(BeFalse())
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

// TestKubeadmReadsWhatItsBootstrapProviderWrites: the kubeadm of every supported version reads the
// data rendered for its own version.
func TestKubeadmReadsWhatItsBootstrapProviderWrites(t *testing.T) {
	g := NewWithT(t)

	for minor := 22; minor <= 40; minor++ {
		version := semver.Version{Major: 1, Minor: uint64(minor)}
		apiVersion, err := KubeadmAPIVersion(formatVersion(version))
		g.Expect(err).ToNot(HaveOccurred())
		readable, err := KubeadmAPIVersionReadable(formatVersion(version), apiVersion)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(readable).To(BeTrue(), "kubeadm %s and %s", formatVersion(version), apiVersion)
	}
}
