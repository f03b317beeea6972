package skew

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestViolations(t *testing.T) {
	tests := []struct {
		name       string
		kubelets   []string
		apiServers []string
		want       []string
		wantErr    bool
	}{
		{name: "no kube-apiserver judges nothing", kubelets: []string{"v1.37.2"}},
		{name: "no kubelet", apiServers: []string{"v1.36.3"}},
		{name: "same version", kubelets: []string{"v1.36.3"}, apiServers: []string{"v1.36.3"}},
		{name: "three minors older", kubelets: []string{"v1.33.9"}, apiServers: []string{"v1.36.3"}},
		{
			name: "newer minor than the oldest of a mixed control plane", kubelets: []string{"v1.36.3", "v1.37.2"}, apiServers: []string{"v1.37.2", "v1.36.3"},
			want: []string{"kubelet v1.37.2 newer than kube-apiserver v1.36.3"},
		},
		{
			name: "newer patch: stricter than the policy, as the gate is", kubelets: []string{"1.36.4"}, apiServers: []string{"v1.36.3"},
			want: []string{"kubelet v1.36.4 newer than kube-apiserver v1.36.3"},
		},
		{
			name: "four minors older than the newest", kubelets: []string{"v1.32.5"}, apiServers: []string{"v1.35.4", "v1.36.3"},
			want: []string{"kubelet v1.32.5 more than 3 minors older than kube-apiserver v1.36.3"},
		},
		{name: "build metadata does not order", kubelets: []string{"v1.36.3+k3s1"}, apiServers: []string{"v1.36.3"}},
		{name: "a kubelet version that does not parse", kubelets: []string{"1.36"}, apiServers: []string{"v1.36.3"}, wantErr: true},
		{name: "a kube-apiserver version that does not parse", kubelets: []string{"v1.36.3"}, apiServers: []string{"latest"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := Violations(tt.kubelets, tt.apiServers)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			var described []string
			for _, v := range got {
				described = append(described, v.String())
			}
			g.Expect(described).To(Equal(tt.want))
		})
	}
}
