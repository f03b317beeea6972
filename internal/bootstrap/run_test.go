package bootstrap

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/container/fake"
)

func TestRun(t *testing.T) {
	ctx := context.Background()
	cmds := []Command{
		{Argv: []string{"a"}, Step: "first"},
		{Argv: []string{"b"}, Stdin: []byte("input"), Step: "second"},
		{Argv: []string{"c"}, Stdin: []byte{}, Step: "third"},
	}
	newNode := func(g Gomega, handler fake.ExecFunc) *fake.Runtime {
		rt := fake.New("img")
		rt.ExecHandler = handler
		_, err := rt.Create(ctx, container.Spec{Name: "n1", Image: "img"})
		g.Expect(err).ToNot(HaveOccurred())
		return rt
	}

	t.Run("all steps run in order with their stdin", func(t *testing.T) {
		g := NewWithT(t)
		rt := newNode(g, nil)
		g.Expect(Run(ctx, rt, "n1", cmds)).To(Succeed())
		g.Expect(rt.Execs()).To(Equal([]fake.ExecCall{
			{Container: "n1", Cmd: []string{"a"}},
			{Container: "n1", Cmd: []string{"b"}, Stdin: []byte("input")},
			{Container: "n1", Cmd: []string{"c"}, Stdin: []byte{}},
		}))
	})

	t.Run("a failing step stops the run with a StepError that keeps stderr out of its message", func(t *testing.T) {
		g := NewWithT(t)
		rt := newNode(g, func(_ container.Container, cmd []string, _ []byte) (container.ExecResult, error) {
			if cmd[0] == "b" {
				return container.ExecResult{ExitCode: 2, Stderr: []byte("token abcdef.0123456789abcdef rejected")}, nil
			}
			return container.ExecResult{}, nil
		})
		err := Run(ctx, rt, "n1", cmds)
		var stepErr *StepError
		g.Expect(errors.As(err, &stepErr)).To(BeTrue())
		g.Expect(*stepErr).To(Equal(StepError{Index: 1, Step: "second", ExitCode: 2, Stderr: []byte("token abcdef.0123456789abcdef rejected")}))
		g.Expect(err.Error()).To(Equal("bootstrap step 1 (second) failed with exit code 2"))
		g.Expect(rt.Execs()).To(HaveLen(2))
	})

	t.Run("a node that stopped is the runtime's typed error", func(t *testing.T) {
		g := NewWithT(t)
		rt := newNode(g, nil)
		g.Expect(rt.SetRunning("n1", false)).To(Succeed())
		g.Expect(Run(ctx, rt, "n1", cmds)).To(MatchError(container.ErrNotRunning))
	})
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		exitCode int
		want     State
		wantErr  bool
	}{
		{exitCode: 0, want: StateSucceeded},
		{exitCode: 80, want: StateNotStarted},
		{exitCode: 81, want: StateStarted},
		{exitCode: 127, wantErr: true},
	}
	for _, tt := range tests {
		g := NewWithT(t)
		rt := fake.New("img")
		rt.ExecHandler = func(_ container.Container, cmd []string, _ []byte) (container.ExecResult, error) {
			g.Expect(cmd).To(Equal(SentinelCheck().Argv))
			return container.ExecResult{ExitCode: tt.exitCode}, nil
		}
		_, err := rt.Create(ctx, container.Spec{Name: "n1", Image: "img"})
		g.Expect(err).ToNot(HaveOccurred())
		state, err := Check(ctx, rt, "n1")
		if tt.wantErr {
			g.Expect(err).To(HaveOccurred())
			continue
		}
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(state).To(Equal(tt.want))
	}
}
