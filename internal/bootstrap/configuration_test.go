package bootstrap

import (
	"bytes"
	"testing"

	. "github.com/onsi/gomega"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
)

// TestConfiguration: renderings of one configuration with other tokens share a Configuration; a
// change of what the nodes get changes it.
func TestConfiguration(t *testing.T) {
	const rotated = "zyx987.zyxwvutsrq987654"
	withToken := func(token string) func(*cloudinit.NodeInput, *bootstrapv1.JoinConfiguration) {
		return func(_ *cloudinit.NodeInput, jc *bootstrapv1.JoinConfiguration) {
			jc.Discovery.BootstrapToken.Token = token
		}
	}
	base := mustData(t, renderCloudConfig(t, "1.31.0", nil), FormatCloudConfig)
	tests := []struct {
		name string
		data *Data
		same bool
	}{
		{name: "the same rendering", data: mustData(t, renderCloudConfig(t, "1.31.0", nil), FormatCloudConfig), same: true},
		{name: "a rotated token", data: mustData(t, renderCloudConfig(t, "1.31.0", withToken(rotated)), FormatCloudConfig), same: true},
		{name: "another Kubernetes version in the same kubeadm API", data: mustData(t, renderCloudConfig(t, "1.32.0", nil), FormatCloudConfig), same: true},
		{name: "a pre-kubeadm command added", data: mustData(t, renderCloudConfig(t, "1.31.0", func(in *cloudinit.NodeInput, _ *bootstrapv1.JoinConfiguration) {
			in.PreKubeadmCommands = append(in.PreKubeadmCommands, "echo more > /tmp/more")
		}), FormatCloudConfig)},
		{name: "a file's content changed", data: mustData(t, renderCloudConfig(t, "1.31.0", func(in *cloudinit.NodeInput, _ *bootstrapv1.JoinConfiguration) {
			in.AdditionalFiles[0].Content = "other text\n"
		}), FormatCloudConfig)},
		{name: "a kubelet flag changed", data: mustData(t, renderCloudConfig(t, "1.31.0", func(_ *cloudinit.NodeInput, jc *bootstrapv1.JoinConfiguration) {
			jc.NodeRegistration.KubeletExtraArgs = append(jc.NodeRegistration.KubeletExtraArgs, bootstrapv1.Arg{Name: "max-pods", Value: ptr("50")})
		}), FormatCloudConfig)},
		{name: "another kubeadm API (1.30 reads v1beta3)", data: mustData(t, renderCloudConfig(t, "1.30.0", nil), FormatCloudConfig)},
		{name: "the same configuration in Ignition", data: mustData(t, renderIgnition(t, "1.31.0", ""), FormatIgnition)},
		{name: "data that is not cloud-config", data: &Data{Value: []byte("not yaml: ["), Format: FormatCloudConfig}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(configurationOf(t, tt.data)).To(HaveLen(hashLabelLength))
			if tt.same {
				g.Expect(configurationOf(t, tt.data)).To(Equal(configurationOf(t, base)))
			} else {
				g.Expect(configurationOf(t, tt.data)).ToNot(Equal(configurationOf(t, base)))
			}
		})
	}

	t.Run("Ignition renderings with other tokens", func(t *testing.T) {
		g := NewWithT(t)
		ignition := mustData(t, renderIgnition(t, "1.31.0", ""), FormatIgnition)
		rotatedValue := bytes.ReplaceAll(ignition.Value, []byte(sampleToken), []byte(rotated))
		g.Expect(rotatedValue).ToNot(Equal(ignition.Value), "the Ignition sample holds a token in the clear")
		g.Expect(configurationOf(t, mustData(t, rotatedValue, FormatIgnition))).To(Equal(configurationOf(t, ignition)))
	})
}
