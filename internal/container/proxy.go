package container

import (
	"strings"

	"golang.org/x/net/http/httpproxy"
)

// Proxy is the proxy configuration node containers get, as CAPD passes its own environment's to
// its nodes: the nodes' containerd pulls images through it.
type Proxy struct {
	HTTPProxy, HTTPSProxy, NoProxy string
}

// ProxyFromEnvironment reads HTTP_PROXY, HTTPS_PROXY and NO_PROXY, each of them in upper case
// first, then in lower case, as Go's HTTP client does.
func ProxyFromEnvironment() Proxy {
	c := httpproxy.FromEnvironment()
	return Proxy{HTTPProxy: c.HTTPProxy, HTTPSProxy: c.HTTPSProxy, NoProxy: c.NoProxy}
}

// NodeEnv is the environment of a node container named nodeName on a network of these subnets:
// each proxy setting in upper and lower case, and, when any is set, NO_PROXY extended by the
// subnets, the node's name and the cluster's Service domains, so that nodes reach each other, the
// load balancer and Services directly. Nothing when no proxy is set.
func (p Proxy) NodeEnv(subnets []string, nodeName string) []string {
	if p == (Proxy{}) {
		return nil
	}
	noProxy := append([]string{}, subnets...)
	if p.NoProxy != "" {
		noProxy = append(noProxy, p.NoProxy)
	}
	noProxy = append(noProxy, nodeName, ".svc", ".svc.cluster", ".svc.cluster.local")
	var env []string
	for _, v := range []struct{ name, value string }{
		{"HTTP_PROXY", p.HTTPProxy}, {"HTTPS_PROXY", p.HTTPSProxy}, {"NO_PROXY", strings.Join(noProxy, ",")},
	} {
		if v.value != "" {
			env = append(env, v.name+"="+v.value, strings.ToLower(v.name)+"="+v.value)
		}
	}
	return env
}
