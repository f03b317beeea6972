package controllers

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// TestContainersGetTheManagersProxy: as CAPD does, the manager's proxy settings reach every node,
// with NO_PROXY extended by the network, the node and the Service domains.
func TestContainersGetTheManagersProxy(t *testing.T) {
	tests := []struct {
		name    string
		proxy   container.Proxy
		wantEnv func(node string) []string
	}{
		{name: "no proxy: no environment", wantEnv: func(string) []string { return nil }},
		{
			name:  "a proxy",
			proxy: container.Proxy{HTTPSProxy: "http://proxy.example:3128", NoProxy: "registry.example"},
			wantEnv: func(node string) []string {
				noProxy := fakeruntime.FakeSubnet + ",registry.example," + node + ",.svc,.svc.cluster,.svc.cluster.local"
				return []string{"HTTPS_PROXY=http://proxy.example:3128", "https_proxy=http://proxy.example:3128", "NO_PROXY=" + noProxy, "no_proxy=" + noProxy}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true}
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
			r, _ := newTestReconciler(g, w.objects(), rt)
			r.Proxy = tt.proxy
			reconcilePool(g, r)

			g.Expect(rt.Containers()).To(HaveLen(2))
			for _, c := range rt.Containers() {
				spec, ok := rt.Spec(c.Name)
				g.Expect(ok).To(BeTrue())
				g.Expect(spec.Env).To(Equal(tt.wantEnv(c.Name)))
			}
		})
	}
}
