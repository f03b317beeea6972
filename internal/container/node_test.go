package container

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestNodeSpec(t *testing.T) {
	tests := []struct {
		name  string
		input NodeSpecInput
		check func(g Gomega, spec Spec)
	}{
		{
			name: "kind worker node on a user network",
			input: NodeSpecInput{
				Name:        "pool-a-x7k2p",
				Image:       "kindest/node:v1.36.3",
				ClusterName: "c1",
				Network:     "kind",
				Labels:      map[string]string{"infrastructure.capdmp.dev/pool-name": "pool-a"},
			},
			check: func(g Gomega, spec Spec) {
				g.Expect(spec.Name).To(Equal("pool-a-x7k2p"))
				g.Expect(spec.Hostname).To(Equal("pool-a-x7k2p"))
				g.Expect(spec.Image).To(Equal("kindest/node:v1.36.3"))
				g.Expect(spec.Network).To(Equal("kind"))
				g.Expect(spec.Labels).To(Equal(map[string]string{
					"infrastructure.capdmp.dev/pool-name": "pool-a",
					"io.x-k8s.kind.cluster":               "c1",
					"io.x-k8s.kind.role":                  "worker",
				}))
				g.Expect(spec.Privileged).To(BeTrue())
				g.Expect(spec.SecurityOpt).To(ConsistOf("seccomp=unconfined", "apparmor=unconfined"))
				g.Expect(spec.CgroupnsMode).To(Equal("private"))
				g.Expect(spec.Tmpfs).To(Equal(map[string]string{"/tmp": "", "/run": ""}))
				g.Expect(spec.Volumes).To(Equal([]string{"/var"}))
				g.Expect(spec.Mounts).To(Equal([]Mount{{Source: "/lib/modules", Target: "/lib/modules", ReadOnly: true}}))
				g.Expect(spec.StopSignal).To(Equal("SIGRTMIN+3"))
				g.Expect(spec.Tty).To(BeTrue())
				g.Expect(spec.RestartPolicy).To(Equal("on-failure"))
				g.Expect(spec.MaxRestarts).To(Equal(1))
				g.Expect(spec.Init).To(HaveValue(BeFalse()))
				g.Expect(spec.Sysctls).To(BeEmpty())
			},
		},
		{
			name:  "host network: no hostname, Docker rejects it",
			input: NodeSpecInput{Name: "n1", Image: "i:v1.36.3", ClusterName: "c1", Network: "host", IPv6: true},
			check: func(g Gomega, spec Spec) {
				g.Expect(spec.Hostname).To(BeEmpty())
				g.Expect(spec.Network).To(Equal("host"))
				// Nor network sysctls, which the host's namespace does not accept either.
				g.Expect(spec.Sysctls).To(BeEmpty())
			},
		},
		{
			name:  "container network: no hostname",
			input: NodeSpecInput{Name: "n1", Image: "i:v1.36.3", Network: "container:other"},
			check: func(g Gomega, spec Spec) {
				g.Expect(spec.Hostname).To(BeEmpty())
			},
		},
		{
			name:  "default network keeps the hostname",
			input: NodeSpecInput{Name: "n1", Image: "i:v1.36.3"},
			check: func(g Gomega, spec Spec) {
				g.Expect(spec.Hostname).To(Equal("n1"))
				g.Expect(spec.Network).To(BeEmpty())
			},
		},
		{
			name:  "kind labels win over caller labels",
			input: NodeSpecInput{Name: "n1", ClusterName: "mine", Labels: map[string]string{"io.x-k8s.kind.cluster": "other", "io.x-k8s.kind.role": "control-plane"}},
			check: func(g Gomega, spec Spec) {
				g.Expect(spec.Labels).To(HaveKeyWithValue("io.x-k8s.kind.cluster", "mine"))
				g.Expect(spec.Labels).To(HaveKeyWithValue("io.x-k8s.kind.role", "worker"))
			},
		},
		{
			name: "extra mounts come before /lib/modules, env is passed",
			input: NodeSpecInput{
				Name:        "n1",
				ExtraMounts: []Mount{{Source: "/srv/data", Target: "/data"}, {Source: "/etc/certs", Target: "/certs", ReadOnly: true}},
				Env:         []string{"HTTP_PROXY=http://127.0.0.1:3128"},
			},
			check: func(g Gomega, spec Spec) {
				g.Expect(spec.Mounts).To(Equal([]Mount{
					{Source: "/srv/data", Target: "/data"},
					{Source: "/etc/certs", Target: "/certs", ReadOnly: true},
					{Source: "/lib/modules", Target: "/lib/modules", ReadOnly: true},
				}))
				g.Expect(spec.Env).To(Equal([]string{"HTTP_PROXY=http://127.0.0.1:3128"}))
			},
		},
		{
			name:  "IPv6 enables IPv6 sysctls like kind",
			input: NodeSpecInput{Name: "n1", Network: "kind", IPv6: true},
			check: func(g Gomega, spec Spec) {
				g.Expect(spec.Sysctls).To(Equal(map[string]string{
					"net.ipv6.conf.all.disable_ipv6": "0",
					"net.ipv6.conf.all.forwarding":   "1",
				}))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			tt.check(g, NodeSpec(tt.input))
		})
	}
}

func TestNodeSpecDoesNotAliasInput(t *testing.T) {
	g := NewWithT(t)
	in := NodeSpecInput{Name: "n1", Labels: map[string]string{"a": "b"}, Env: []string{"X=1"}, ExtraMounts: []Mount{{Source: "/a", Target: "/b"}}}
	spec := NodeSpec(in)
	spec.Labels["a"] = "changed"
	spec.Env[0] = "X=2"
	spec.Mounts[0].Source = "/changed"
	g.Expect(in.Labels).To(HaveKeyWithValue("a", "b"))
	g.Expect(in.Env).To(Equal([]string{"X=1"}))
	g.Expect(in.ExtraMounts[0].Source).To(Equal("/a"))
}
