package container

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestProxyNodeEnv(t *testing.T) {
	subnets := []string{"172.18.0.0/16", "fc00:f853:ccd:e793::/64"}
	tests := []struct {
		name  string
		proxy Proxy
		want  []string
	}{
		{name: "no proxy: nothing", proxy: Proxy{}, want: nil},
		{
			name:  "NO_PROXY alone is passed on, extended",
			proxy: Proxy{NoProxy: "example.com"},
			want: []string{
				"NO_PROXY=172.18.0.0/16,fc00:f853:ccd:e793::/64,example.com,pool-abc,.svc,.svc.cluster,.svc.cluster.local",
				"no_proxy=172.18.0.0/16,fc00:f853:ccd:e793::/64,example.com,pool-abc,.svc,.svc.cluster,.svc.cluster.local",
			},
		},
		{
			name:  "a proxy: both cases, NO_PROXY made of the network, the node and Services",
			proxy: Proxy{HTTPProxy: "http://proxy:3128", HTTPSProxy: "http://proxy:3129"},
			want: []string{
				"HTTP_PROXY=http://proxy:3128", "http_proxy=http://proxy:3128",
				"HTTPS_PROXY=http://proxy:3129", "https_proxy=http://proxy:3129",
				"NO_PROXY=172.18.0.0/16,fc00:f853:ccd:e793::/64,pool-abc,.svc,.svc.cluster,.svc.cluster.local",
				"no_proxy=172.18.0.0/16,fc00:f853:ccd:e793::/64,pool-abc,.svc,.svc.cluster,.svc.cluster.local",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(tt.proxy.NodeEnv(subnets, "pool-abc")).To(Equal(tt.want))
		})
	}
}

func TestProxyFromEnvironment(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Proxy
	}{
		{name: "none", want: Proxy{}},
		{name: "lower case", env: map[string]string{"http_proxy": "http://a", "no_proxy": "b"}, want: Proxy{HTTPProxy: "http://a", NoProxy: "b"}},
		{name: "upper case first", env: map[string]string{"HTTPS_PROXY": "http://up", "https_proxy": "http://low"}, want: Proxy{HTTPSProxy: "http://up"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"} {
				t.Setenv(name, tt.env[name])
			}
			NewWithT(t).Expect(ProxyFromEnvironment()).To(Equal(tt.want))
		})
	}
}
