package container

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestCheckExtraMountTarget(t *testing.T) {
	tests := []struct {
		path        string
		wantErr     string // substring; "" when the path is accepted
		notBindable bool
	}{
		{path: "/data"},
		{path: "/srv/proc"},
		{path: "/procfs"},
		{path: "/kindred"},
		{path: "/var/lib/data"},
		{path: "/run/secrets"},
		{path: "/tmp/cache"},
		{path: "/lib/modules-extra"},
		// The engine reads a ":" as the start of the bind's options, or of its target.
		{path: "/proc:ro", wantErr: `container path "/proc:ro" contains ":"`, notBindable: true},
		{path: "/data:rshared", wantErr: `contains ":"`, notBindable: true},
		{path: "/data:/other", wantErr: `contains ":"`, notBindable: true},
		// What the node needs, hidden.
		{path: "/", wantErr: `container path "/" is /:`},
		{path: "/./", wantErr: "is /:"},
		{path: "/proc", wantErr: "is /proc:"},
		{path: "/proc/", wantErr: "is /proc:"},
		{path: "/proc/1/root", wantErr: "is below /proc:"},
		{path: "/kind/version", wantErr: "is below /kind:"},
		{path: "/srv/../kind", wantErr: "is /kind:"},
		// Where every node mounts something of its own (NodeSpec).
		{path: "/tmp", wantErr: `container path "/tmp" is where every node container mounts a tmpfs of its own`},
		{path: "/run/", wantErr: "mounts a tmpfs of its own"},
		{path: "/lib/modules", wantErr: "mounts the host's /lib/modules"},
		{path: "/lib//modules/.", wantErr: "mounts the host's /lib/modules"},
		{path: "/var", wantErr: "a volume of its own for its state"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			g := NewWithT(t)
			err := CheckExtraMountTarget(tt.path)
			if tt.wantErr == "" {
				g.Expect(err).ToNot(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			if tt.notBindable {
				g.Expect(err).To(MatchError(ErrNotBindable))
			} else {
				g.Expect(err).ToNot(MatchError(ErrNotBindable))
			}
		})
	}
}

// TestCheckExtraMountTargetFollowsNodeSpec: every path NodeSpec mounts something on is refused as
// an extra mount's target, so that a mount added to nodes later is covered without a list to keep.
func TestCheckExtraMountTargetFollowsNodeSpec(t *testing.T) {
	g := NewWithT(t)
	node := NodeSpec(NodeSpecInput{})
	var mountPoints []string
	for p := range node.Tmpfs {
		mountPoints = append(mountPoints, p)
	}
	mountPoints = append(mountPoints, node.Volumes...)
	for _, m := range node.Mounts {
		mountPoints = append(mountPoints, m.Target)
	}
	g.Expect(mountPoints).To(ConsistOf("/tmp", "/run", "/var", "/lib/modules"))
	for _, p := range mountPoints {
		g.Expect(CheckExtraMountTarget(p)).To(MatchError(ContainSubstring("is where every node container mounts")), p)
	}
}

func TestCheckExtraMountSource(t *testing.T) {
	tests := []struct {
		path    string
		wantErr string
	}{
		{path: "/srv/data"},
		// The check is how the path can be given to the engine; which paths are allowed is
		// internal/hostpath's.
		{path: "/etc"},
		{path: "/srv/a:/b", wantErr: `host path "/srv/a:/b" contains ":"`},
		{path: "/srv/a:ro", wantErr: `contains ":"`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			g := NewWithT(t)
			err := CheckExtraMountSource(tt.path)
			if tt.wantErr == "" {
				g.Expect(err).ToNot(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(err).To(MatchError(ErrNotBindable))
		})
	}
}
