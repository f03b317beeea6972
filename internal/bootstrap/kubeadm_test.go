package bootstrap

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
)

func TestJoinConfigurationAPIVersionAndToken(t *testing.T) {
	fileDiscovery := func(_ *cloudinit.NodeInput, jc *bootstrapv1.JoinConfiguration) {
		jc.Discovery.BootstrapToken = bootstrapv1.BootstrapTokenDiscovery{}
		jc.Discovery.File.KubeConfigPath = "/etc/kubernetes/discovery.conf"
	}
	tests := []struct {
		name           string
		data           func(t *testing.T) *Data
		wantAPIVersion string
		wantTokenID    string
		wantErr        error
		wantTokenErr   error
	}{
		{
			name:           "cloud-config for 1.36 (v1beta4)",
			data:           func(t *testing.T) *Data { return mustData(t, renderCloudConfig(t, "1.36.3", nil), "") },
			wantAPIVersion: "kubeadm.k8s.io/v1beta4",
			wantTokenID:    sampleTokenID,
		},
		{
			name:           "cloud-config for 1.31 (v1beta4)",
			data:           func(t *testing.T) *Data { return mustData(t, renderCloudConfig(t, "1.31.0", nil), "") },
			wantAPIVersion: "kubeadm.k8s.io/v1beta4",
			wantTokenID:    sampleTokenID,
		},
		{
			name:           "cloud-config for 1.30 (v1beta3)",
			data:           func(t *testing.T) *Data { return mustData(t, renderCloudConfig(t, "1.30.14", nil), "") },
			wantAPIVersion: "kubeadm.k8s.io/v1beta3",
			wantTokenID:    sampleTokenID,
		},
		{
			name:           "ignition for 1.36 (v1beta4)",
			data:           func(t *testing.T) *Data { return mustData(t, renderIgnition(t, "1.36.3", ""), FormatIgnition) },
			wantAPIVersion: "kubeadm.k8s.io/v1beta4",
			wantTokenID:    sampleTokenID,
		},
		{
			name:           "ignition for 1.30 (v1beta3)",
			data:           func(t *testing.T) *Data { return mustData(t, renderIgnition(t, "1.30.14", ""), FormatIgnition) },
			wantAPIVersion: "kubeadm.k8s.io/v1beta3",
			wantTokenID:    sampleTokenID,
		},
		{
			name:           "discovery by file: an API version but no token",
			data:           func(t *testing.T) *Data { return mustData(t, renderCloudConfig(t, "1.36.3", fileDiscovery), "") },
			wantAPIVersion: "kubeadm.k8s.io/v1beta4",
			wantTokenErr:   ErrNoBootstrapToken,
		},
		{
			name: "tlsBootstrapToken alone",
			data: func(t *testing.T) *Data {
				return mustData(t, renderCloudConfig(t, "1.36.3", func(in *cloudinit.NodeInput, jc *bootstrapv1.JoinConfiguration) {
					fileDiscovery(in, jc)
					jc.Discovery.TLSBootstrapToken = "zyxwvu.0123456789abcdef"
				}), "")
			},
			wantAPIVersion: "kubeadm.k8s.io/v1beta4",
			wantTokenID:    "zyxwvu",
		},
		{
			name: "unquoted jinja in a hand-written document does not hide the configuration",
			data: func(t *testing.T) *Data {
				return mustData(t, []byte("## template: jinja\n#cloud-config\nhostname: {{ ds.meta_data.hostname }}\nwrite_files:\n- path: /run/kubeadm/join.yaml\n  content: |\n    apiVersion: kubeadm.k8s.io/v1beta3\n    kind: JoinConfiguration\n    discovery:\n      bootstrapToken:\n        token: 123456.abcdefabcdefabcd\n"), "")
			},
			wantAPIVersion: "kubeadm.k8s.io/v1beta3",
			wantTokenID:    "123456",
		},
		{
			name: "a multi-document file, JoinConfiguration not first",
			data: func(t *testing.T) *Data {
				return mustData(t, []byte("#cloud-config\nwrite_files:\n- path: /etc/k.yaml\n  content: |\n    apiVersion: kubelet.config.k8s.io/v1beta1\n    kind: KubeletConfiguration\n    ---\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: JoinConfiguration\n    discovery:\n      bootstrapToken:\n        token: aaaaaa.bbbbbbbbbbbbbbbb\n"), "")
			},
			wantAPIVersion: "kubeadm.k8s.io/v1beta4",
			wantTokenID:    "aaaaaa",
		},
		{
			name: "a JoinConfiguration of another group does not count",
			data: func(t *testing.T) *Data {
				return mustData(t, []byte("#cloud-config\nwrite_files:\n- path: /x\n  content: |\n    apiVersion: example.com/v1\n    kind: JoinConfiguration\n"), "")
			},
			wantErr: ErrNoJoinConfiguration,
		},
		{
			name: "control plane init data has no JoinConfiguration",
			data: func(t *testing.T) *Data {
				return mustData(t, []byte("#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: |\n    ---\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: ClusterConfiguration\n    ---\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: InitConfiguration\nruncmd:\n- kubeadm init --config /run/kubeadm/kubeadm.yaml\n"), "")
			},
			wantErr: ErrNoJoinConfiguration,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			data := tt.data(t)
			apiVersion, err := JoinConfigurationAPIVersion(data)
			tokenID, tokenErr := BootstrapTokenID(data)
			if tt.wantErr != nil {
				g.Expect(err).To(MatchError(tt.wantErr))
				g.Expect(tokenErr).To(MatchError(tt.wantErr))
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(apiVersion).To(Equal(tt.wantAPIVersion))
			if tt.wantTokenErr != nil {
				g.Expect(tokenErr).To(MatchError(tt.wantTokenErr))
				return
			}
			g.Expect(tokenErr).ToNot(HaveOccurred())
			g.Expect(tokenID).To(Equal(tt.wantTokenID))
		})
	}
}

// TestBootstrapTokenIDMalformed: a token k8s.io/cluster-bootstrap does not parse as
// "<6 of [a-z0-9]>.<16 of [a-z0-9]>" is an error that never quotes the token, a credential.
func TestBootstrapTokenIDMalformed(t *testing.T) {
	tests := []struct {
		name  string
		token string
	}{
		{name: "not a token", token: "NOT-A-TOKEN-secretpart"},
		{name: "no dot", token: "abcdef0123456789secret"},
		{name: "a short ID", token: "abcde.0123456789secret"},
		{name: "a long ID", token: "abcdefg.0123456789secret"},
		{name: "a short secret", token: "abcdef.0123456789secre"},
		{name: "a long secret", token: "abcdef.0123456789secretx"},
		{name: "upper case", token: "ABCDEF.0123456789SECRET"},
		{name: "three parts", token: "abcdef.0123456789secret.0123456789secret"},
		{name: "an underscore", token: "abc_ef.0123456789secret"},
		{name: "leading space, as YAML keeps it when quoted", token: " abcdef.0123456789secret"},
		{name: "trailing newline", token: "abcdef.0123456789secret\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			data := mustData(t, renderCloudConfig(t, "1.36.3", func(_ *cloudinit.NodeInput, jc *bootstrapv1.JoinConfiguration) {
				jc.Discovery.BootstrapToken.Token = tt.token
			}), "")
			id, err := BootstrapTokenID(data)
			g.Expect(err).To(MatchError(ContainSubstring("malformed")), "read ID %q", id)
			g.Expect(err.Error()).ToNot(Or(ContainSubstring("0123456789"), ContainSubstring("secre")), "the error does not quote the token")
			g.Expect(errors.Is(err, ErrNoBootstrapToken)).To(BeFalse(), "a token is there, it does not parse")
		})
	}
}

func TestJoinConfigurationAPIVersionNil(t *testing.T) {
	g := NewWithT(t)
	_, err := JoinConfigurationAPIVersion(nil)
	g.Expect(err).To(MatchError(ErrNoJoinConfiguration))
}
