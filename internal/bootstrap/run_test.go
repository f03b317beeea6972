package bootstrap

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/container/fake"
)

func TestStart(t *testing.T) {
	ctx := context.Background()
	cmds := []Command{
		{Argv: []string{"a", "it's $HOME"}, Step: "first"},
		{Argv: []string{"b"}, Stdin: []byte("input"), Step: "second\nline"},
		{Argv: []string{"c"}, Stdin: []byte{}, Step: "third"},
	}
	newNode := func(g Gomega, handler fake.ExecFunc) *fake.Runtime {
		rt := fake.New("img")
		rt.ExecHandler = handler
		_, err := rt.Create(ctx, container.Spec{Name: "n1", Image: "img"})
		g.Expect(err).ToNot(HaveOccurred())
		return rt
	}

	t.Run("stages every input as a file and the steps as a runner, and starts it, in one exec", func(t *testing.T) {
		g := NewWithT(t)
		rt := newNode(g, nil)
		g.Expect(Start(ctx, rt, "n1", cmds)).To(Succeed())
		execs := rt.Execs()
		g.Expect(execs).To(HaveLen(1))
		script := execs[0].Cmd[2]
		g.Expect(script).To(ContainSubstring("rm -rf"))
		g.Expect(script).To(ContainSubstring(runDir))
		g.Expect(script).To(ContainSubstring("tar -x"))
		g.Expect(strings.Index(script, "tar -x")).To(BeNumerically("<", strings.Index(script, "setsid")), "staged before it starts")
		g.Expect(strings.Join(execs[0].Cmd, " ")).ToNot(ContainSubstring("input"), "bootstrap data is never an argument")

		staged := untar(g, execs[0].Stdin)
		g.Expect(staged).To(Equal(map[string]string{"1.stdin": "input", "2.stdin": "", "run.sh": staged["run.sh"]}))
		runner := staged["run.sh"]
		g.Expect(runner).To(ContainSubstring(`step 0 'first' 'a' 'it'\''s $HOME'` + "\n"))
		g.Expect(runner).To(ContainSubstring("step 1 'second line' 'b'\n"), "a step name stays on one line of the report")
		g.Expect(runner).To(ContainSubstring("step 2 'third' 'c'\n"))
	})

	t.Run("a staging that fails is the start's error", func(t *testing.T) {
		g := NewWithT(t)
		rt := newNode(g, func(_ container.Container, _ []string, _ []byte) (container.ExecResult, error) {
			return container.ExecResult{ExitCode: 1, Stderr: []byte("tar: write error: No space left on device")}, nil
		})
		g.Expect(Start(ctx, rt, "n1", cmds)).To(MatchError(ContainSubstring("No space left on device")))
	})

	t.Run("a node that stopped is the runtime's typed error", func(t *testing.T) {
		g := NewWithT(t)
		rt := newNode(g, nil)
		g.Expect(rt.SetRunning("n1", false)).To(Succeed())
		g.Expect(Start(ctx, rt, "n1", cmds)).To(MatchError(container.ErrNotRunning))
	})
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		res     container.ExecResult
		want    Status
		wantErr string
	}{
		{name: "sentinel, start unknown", res: container.ExecResult{ExitCode: 0}, want: Status{State: StateSucceeded}},
		{name: "sentinel, ran 7s", res: container.ExecResult{ExitCode: 0, Stdout: []byte("7\n")}, want: Status{State: StateSucceeded, Elapsed: 7 * time.Second, Timed: true}},
		{name: "sentinel, ran within a second", res: container.ExecResult{ExitCode: 0, Stdout: []byte("0\n")}, want: Status{State: StateSucceeded, Timed: true}},
		{name: "sentinel, garbled time", res: container.ExecResult{ExitCode: 0, Stdout: []byte("x")}, wantErr: "running time"},
		{name: "nothing ran", res: container.ExecResult{ExitCode: 80}, want: Status{State: StateNotStarted}},
		{name: "runner gone without a result", res: container.ExecResult{ExitCode: 81}, want: Status{State: StateInterrupted}},
		{name: "systemd not up", res: container.ExecResult{ExitCode: 82}, want: Status{State: StateBooting}},
		{name: "running for 42s", res: container.ExecResult{ExitCode: 83, Stdout: []byte("42\n")}, want: Status{State: StateRunning, Elapsed: 42 * time.Second}},
		{name: "running, garbled time", res: container.ExecResult{ExitCode: 83, Stdout: []byte("soon")}, wantErr: "running time"},
		{
			name: "a step failed",
			res:  container.ExecResult{ExitCode: 84, Stdout: []byte("1\nruncmd[0]\n[preflight] error execution phase preflight\nmore\n")},
			want: Status{State: StateFailed, Step: "runcmd[0]", ExitCode: 1, Output: []byte("[preflight] error execution phase preflight\nmore")},
		},
		{
			name: "stopped by Stop",
			res:  container.ExecResult{ExitCode: 84, Stdout: []byte("stopped\nruncmd[0]\n[kubelet-start] waiting\n")},
			want: Status{State: StateFailed, Step: "runcmd[0]", Stopped: true, Output: []byte("[kubelet-start] waiting")},
		},
		{name: "failed, garbled report", res: container.ExecResult{ExitCode: 84, Stdout: []byte("x\n")}, wantErr: "exit code"},
		{name: "no shell", res: container.ExecResult{ExitCode: 127, Stderr: []byte("exec: /bin/sh: not found")}, wantErr: "/bin/sh: not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rt := fake.New("img")
			rt.ExecHandler = func(_ container.Container, cmd []string, _ []byte) (container.ExecResult, error) {
				g.Expect(cmd).To(Equal(StatusCommand().Argv))
				return tt.res, nil
			}
			_, err := rt.Create(ctx, container.Spec{Name: "n1", Image: "img"})
			g.Expect(err).ToNot(HaveOccurred())
			status, err := Check(ctx, rt, "n1")
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(status).To(Equal(tt.want))
		})
	}
}

// untar reads a staging archive's files.
func untar(g Gomega, archive []byte) map[string]string {
	files := map[string]string{}
	r := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := r.Next()
		if err == io.EOF {
			return files
		}
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(h.Mode).To(BeEquivalentTo(0o600), h.Name)
		content, err := io.ReadAll(r)
		g.Expect(err).ToNot(HaveOccurred())
		files[h.Name] = string(content)
	}
}
