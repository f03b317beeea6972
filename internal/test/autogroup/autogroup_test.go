package autogroup

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestNice(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    int
		wantErr bool
		// wantDefault: the error says the process is in the default autogroup.
		wantDefault bool
	}{
		{name: "default", content: "/autogroup-38672 nice 0\n", want: 0},
		{name: "raised", content: "/autogroup-7 nice -5\n", want: -5},
		{name: "lowered", content: "/autogroup-7 nice 19\n", want: 19},
		{name: "not an autogroup file", content: "0\n", wantErr: true},
		{name: "the default autogroup", content: "", wantErr: true, wantDefault: true},
		{name: "nice not a number", content: "/autogroup-7 nice x\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			file := filepath.Join(t.TempDir(), "autogroup")
			g.Expect(os.WriteFile(file, []byte(tt.content), 0o600)).To(Succeed())
			nice, err := Group{File: file}.Nice()
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				g.Expect(errors.Is(err, ErrDefaultAutogroup)).To(Equal(tt.wantDefault))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(nice).To(Equal(tt.want))
		})
	}
}

func TestCPUCgroup(t *testing.T) {
	tests := []struct {
		name       string
		procCgroup string
		want       string
	}{
		{name: "cgroup v1, root", procCgroup: "9:name=systemd:/\n2:cpuacct:/\n1:cpu:/\n0::/\n", want: "/"},
		{name: "cgroup v1, a container", procCgroup: "4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n", want: "/docker/abc"},
		{name: "cgroup v2, a systemd session", procCgroup: "0::/user.slice/user-1000.slice/session-2.scope\n", want: "/user.slice/user-1000.slice/session-2.scope"},
		{name: "cgroup v2, root", procCgroup: "0::/\n", want: "/"},
		{name: "hybrid: v1 cpu wins", procCgroup: "3:cpu:/\n0::/user.slice\n", want: "/"},
		{name: "cpuset is not cpu", procCgroup: "3:cpuset:/x\n2:cpu:/\n", want: "/"},
		{name: "nothing", procCgroup: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(cpuCgroup(tt.procCgroup)).To(Equal(tt.want))
		})
	}
}

func TestSetNiceWritesAndRestores(t *testing.T) {
	g := NewWithT(t)
	file := filepath.Join(t.TempDir(), "autogroup")
	g.Expect(os.WriteFile(file, []byte("/autogroup-7 nice 3\n"), 0o600)).To(Succeed())

	restore, err := Group{File: file}.SetNice(-5)
	g.Expect(err).NotTo(HaveOccurred())
	// The kernel takes the bare number and shows "/autogroup-<id> nice <n>" again.
	g.Expect(os.ReadFile(file)).To(BeEquivalentTo("-5"))
	g.Expect(restore()).To(Succeed())
	g.Expect(os.ReadFile(file)).To(BeEquivalentTo("3"))
}

func TestSetNiceMissingFile(t *testing.T) {
	g := NewWithT(t)
	_, err := Group{File: filepath.Join(t.TempDir(), "none")}.SetNice(-5)
	g.Expect(err).To(MatchError(os.ErrNotExist))
}

// TestSelf changes this test's own session, briefly: one step below its nice value and back.
// Without CAP_SYS_NICE the kernel refuses and nothing changes. In the default autogroup, where
// CI's job runs, nothing is tried.
func TestSelf(t *testing.T) {
	g := NewWithT(t)
	self := Group{File: Self}
	if _, err := os.Stat(Self); err != nil {
		t.Skipf("this kernel has no scheduler autogroups: %v", err)
	}
	before, err := self.Nice()
	if errors.Is(err, ErrDefaultAutogroup) {
		_, err := self.SetNice(-1)
		g.Expect(err).To(MatchError(ErrDefaultAutogroup))
		g.Expect(os.ReadFile(Self)).To(BeEmpty(), "a refused change changes nothing")
		g.Expect(Applies()).To(MatchError(ErrDefaultAutogroup))
		return
	}
	g.Expect(err).NotTo(HaveOccurred())
	if before <= -20 {
		t.Skipf("the session already has the lowest nice value")
	}

	restore, err := self.SetNice(before - 1)
	if errors.Is(err, os.ErrPermission) {
		g.Expect(self.Nice()).To(Equal(before), "a refused change changes nothing")
		return
	}
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(self.Nice()).To(Equal(before - 1))
	g.Expect(restore()).To(Succeed())
	g.Expect(self.Nice()).To(Equal(before))
}
