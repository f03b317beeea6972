package hostpath

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestNewPolicy(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		wantErr string // a substring of the error; none when empty
	}{
		{name: "nothing allowed", allowed: []string{}},
		{name: "a dedicated directory", allowed: []string{"/var/lib/capdmp/mounts"}},
		{name: "several directories", allowed: []string{"/srv/data", "/opt/certs"}},
		{name: "a parent of never-allowed paths: they stay refused", allowed: []string{"/var"}},
		{name: "the host's root", allowed: []string{"/"}, wantErr: `"/" is /, which no pool may mount`},
		{name: "the Docker socket", allowed: []string{"/var/run/docker.sock"}, wantErr: `is /var/run/docker.sock`},
		{name: "below a never-allowed path", allowed: []string{"/run/containerd"}, wantErr: `"/run/containerd" is below /run`},
		{name: "relative", allowed: []string{"srv"}, wantErr: `"srv" is not an absolute path`},
		{name: "empty", allowed: []string{""}, wantErr: `"" is not an absolute path`},
		{name: "not clean", allowed: []string{"/srv/"}, wantErr: `"/srv/" is not clean: write it "/srv"`},
		{name: "with ..", allowed: []string{"/srv/../etc"}, wantErr: `write it "/etc"`},
		{name: "every bad entry is named", allowed: []string{"/srv", "/", "data"}, wantErr: `"data" is not an absolute path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, err := NewPolicy(tt.allowed)
			if tt.wantErr == "" {
				g.Expect(err).ToNot(HaveOccurred())
				g.Expect(p.Allowed()).To(Equal(tt.allowed))
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(err).To(MatchError(ContainSubstring("--" + Flag)))
		})
	}
}

func TestPolicyCheck(t *testing.T) {
	tests := []struct {
		name     string
		allowed  []string // nil: the zero Policy
		hostPath string
		wantErr  []string // substrings of the error; allowed when empty
	}{
		{name: "the allowed directory", allowed: []string{"/var/lib/capdmp/mounts"}, hostPath: "/var/lib/capdmp/mounts"},
		{name: "below the allowed directory", allowed: []string{"/var/lib/capdmp/mounts"}, hostPath: "/var/lib/capdmp/mounts/data/cache"},
		{name: "compared cleaned", allowed: []string{"/var/lib/capdmp/mounts"}, hostPath: "//var/lib/capdmp/./mounts/data/"},
		{name: "below the second entry", allowed: []string{"/srv", "/opt/certs"}, hostPath: "/opt/certs/ca.pem"},
		{
			name: "a sibling with a common prefix is not below", allowed: []string{"/var/lib/capdmp/mounts"}, hostPath: "/var/lib/capdmp/mountsX",
			wantErr: []string{`host path "/var/lib/capdmp/mountsX" is not at or below any of --allowed-host-paths=/var/lib/capdmp/mounts`, "by adding it to --allowed-host-paths"},
		},
		{
			name: "the parent of the allowed directory", allowed: []string{"/var/lib/capdmp/mounts"}, hostPath: "/var/lib/capdmp",
			wantErr: []string{"is not at or below any of --allowed-host-paths"},
		},
		{
			name: "outside the allowed directories", allowed: []string{"/srv", "/opt/certs"}, hostPath: "/etc",
			wantErr: []string{"--allowed-host-paths=/srv,/opt/certs"},
		},
		{
			name: "the zero policy allows nothing", hostPath: "/srv/data",
			wantErr: []string{`host path "/srv/data" is not allowed: the manager allows no host path (--allowed-host-paths is empty)`},
		},
		{
			name: "an empty list allows nothing", allowed: []string{}, hostPath: "/var/lib/capdmp/mounts",
			wantErr: []string{"the manager allows no host path"},
		},
		{
			name: "never-allowed under an allowed parent", allowed: []string{"/var"}, hostPath: "/var/lib/docker/volumes",
			wantErr: []string{`host path "/var/lib/docker/volumes" is below /var/lib/docker, which no pool may mount whatever --allowed-host-paths says`},
		},
		{
			name: "the Docker socket under an allowed parent", allowed: []string{"/var"}, hostPath: "/var/run/docker.sock",
			wantErr: []string{`is /var/run/docker.sock, which no pool may mount`},
		},
		{
			name: "the Docker socket under /run", allowed: []string{"/var"}, hostPath: "/run/docker.sock",
			wantErr: []string{`is /run/docker.sock`},
		},
		{
			name: "a process's root under /proc", allowed: []string{"/var"}, hostPath: "/proc/1/root",
			wantErr: []string{`is below /proc`},
		},
		{
			name: "an allowed directory that contains a never-allowed one", allowed: []string{"/var"}, hostPath: "/var/lib",
			wantErr: []string{`host path "/var/lib" contains /var/lib/docker, which no pool may mount`},
		},
		{
			name: "a directory below an allowed one that contains nothing never allowed", allowed: []string{"/var"}, hostPath: "/var/lib/capdmp",
		},
		{name: "the host's root", allowed: []string{"/var"}, hostPath: "/", wantErr: []string{`host path "/" is /`}},
		{name: "the host's root spelled //.", allowed: []string{"/var"}, hostPath: "//.", wantErr: []string{`host path "//." is /`}},
		{name: "relative", allowed: []string{"/var"}, hostPath: "var/lib/capdmp", wantErr: []string{"is not an absolute path"}},
		{name: "empty", allowed: []string{"/var"}, hostPath: "", wantErr: []string{"is not an absolute path"}},
		{
			name: "a .. element is refused before cleaning", allowed: []string{"/var/lib/capdmp/mounts"}, hostPath: "/var/lib/capdmp/mounts/../mounts/data",
			wantErr: []string{`has a ".." element`},
		},
		{
			name: "a .. that would leave the allowed directory", allowed: []string{"/var/lib/capdmp/mounts"}, hostPath: "/var/lib/capdmp/mounts/../../../../etc",
			wantErr: []string{`has a ".." element`},
		},
		{name: "a name that starts with .. is a name", allowed: []string{"/srv"}, hostPath: "/srv/..data"},
		{name: "procfs is not /proc", allowed: []string{"/procfs"}, hostPath: "/procfs"},
		{name: "/var/lib/dockerd is not /var/lib/docker", allowed: []string{"/var/lib/dockerd"}, hostPath: "/var/lib/dockerd/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var p Policy
			if tt.allowed != nil {
				var err error
				p, err = NewPolicy(tt.allowed)
				g.Expect(err).ToNot(HaveOccurred())
			}
			err := p.Check(tt.hostPath)
			if len(tt.wantErr) == 0 {
				g.Expect(err).ToNot(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			for _, want := range tt.wantErr {
				g.Expect(err.Error()).To(ContainSubstring(want))
			}
		})
	}
}

func TestZeroPolicyIsDefault(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Policy{}.Allowed()).To(Equal(DefaultAllowed))
	defaults, err := NewPolicy(DefaultAllowed)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(defaults.Allowed()).To(Equal(Policy{}.Allowed()))
}
