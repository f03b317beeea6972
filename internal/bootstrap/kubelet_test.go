package bootstrap

import (
	"testing"

	. "github.com/onsi/gomega"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
)

// TestKubeletMaxPods reads the kubelet's max-pods from data CABPK renders: its kubeletExtraArgs
// flag in either JoinConfiguration API, else the kubeletconfiguration patches of the join's
// patches directory, in kubeadm's order.
func TestKubeletMaxPods(t *testing.T) {
	const patches = "/etc/kubeadm/patches"
	extraArgs := func(args ...string) func(*cloudinit.NodeInput, *bootstrapv1.JoinConfiguration) {
		return func(_ *cloudinit.NodeInput, jc *bootstrapv1.JoinConfiguration) {
			for i := 0; i < len(args); i += 2 {
				jc.NodeRegistration.KubeletExtraArgs = append(jc.NodeRegistration.KubeletExtraArgs, bootstrapv1.Arg{Name: args[i], Value: ptr(args[i+1])})
			}
		}
	}
	// withPatches writes files (path, content, ...) and sets the join's patches directory.
	withPatches := func(files ...string) func(*cloudinit.NodeInput, *bootstrapv1.JoinConfiguration) {
		return func(in *cloudinit.NodeInput, jc *bootstrapv1.JoinConfiguration) {
			jc.Patches.Directory = patches
			for i := 0; i < len(files); i += 2 {
				in.AdditionalFiles = append(in.AdditionalFiles, bootstrapv1.File{Path: files[i], Content: files[i+1], Permissions: "0644"})
			}
		}
	}
	both := func(mutates ...func(*cloudinit.NodeInput, *bootstrapv1.JoinConfiguration)) func(*cloudinit.NodeInput, *bootstrapv1.JoinConfiguration) {
		return func(in *cloudinit.NodeInput, jc *bootstrapv1.JoinConfiguration) {
			for _, m := range mutates {
				m(in, jc)
			}
		}
	}
	tests := []struct {
		name    string
		version string
		mutate  func(*cloudinit.NodeInput, *bootstrapv1.JoinConfiguration)
		want    int32
		wantOK  bool
		wantErr string
	}{
		{name: "not set: the kubelet's configuration decides", version: "1.36.3"},
		{name: "kubeletExtraArgs, v1beta4 list", version: "1.36.3", mutate: extraArgs("max-pods", "50"), want: 50, wantOK: true},
		{name: "kubeletExtraArgs, v1beta3 map", version: "1.30.14", mutate: extraArgs("max-pods", "50"), want: 50, wantOK: true},
		{name: "repeated flag: the last wins, as the kubelet parses flags", version: "1.36.3",
			mutate: extraArgs("max-pods", "50", "node-labels", "a=b", "max-pods", "70"), want: 70, wantOK: true},
		{name: "not a number", version: "1.36.3", mutate: extraArgs("max-pods", "lots"), wantErr: `max-pods is "lots"`},
		{name: "patches in kubeadm's order: by file name", version: "1.36.3", mutate: withPatches(
			patches+"/kubeletconfiguration1+json.json", `[{"op":"replace","path":"/maxPods","value":70}]`,
			patches+"/kubeletconfiguration0+strategic.yaml", "maxPods: 60\n",
			patches+"/kube-apiserver0+merge.yaml", "maxPods: 1\n",
			"/etc/elsewhere/kubeletconfiguration.yaml", "maxPods: 2\n",
		), want: 70, wantOK: true},
		{name: "a merge patch in YAML", version: "1.30.14", mutate: withPatches(patches+"/kubeletconfiguration+merge.yaml", "maxPods: 250\nserializeImagePulls: false\n"),
			want: 250, wantOK: true},
		{name: "a JSON patch that removes it: the kubelet's configuration decides", version: "1.36.3", mutate: withPatches(
			patches+"/kubeletconfiguration0.yaml", "maxPods: 60\n",
			patches+"/kubeletconfiguration1+json.yaml", "- op: remove\n  path: /maxPods\n",
		)},
		{name: "patches that leave it alone", version: "1.36.3", mutate: withPatches(patches+"/kubeletconfiguration.json", `{"serializeImagePulls":false}`)},
		{name: "the flag wins over the patches", version: "1.36.3",
			mutate: both(withPatches(patches+"/kubeletconfiguration.yaml", "maxPods: 60\n"), extraArgs("max-pods", "30")), want: 30, wantOK: true},
		{name: "a patch of another name is not kubeadm's", version: "1.36.3", mutate: withPatches(patches+"/kubeletconfiguration+other.yaml", "maxPods: 60\n")},
		{name: "a patch that sets it to something else than a number", version: "1.36.3",
			mutate: withPatches(patches+"/kubeletconfiguration.yaml", "maxPods: many\n"), wantErr: "kubeletconfiguration.yaml: maxPods is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			data := mustData(t, renderCloudConfig(t, tt.version, tt.mutate), "")
			got, ok, err := KubeletMaxPods(data)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(ok).To(Equal(tt.wantOK))
			g.Expect(got).To(Equal(tt.want))
		})
	}

	t.Run("data without a JoinConfiguration", func(t *testing.T) {
		g := NewWithT(t)
		_, _, err := KubeletMaxPods(mustData(t, []byte("#cloud-config\nruncmd:\n- echo hi\n"), ""))
		g.Expect(err).To(MatchError(ErrNoJoinConfiguration))
	})
}
