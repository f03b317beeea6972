package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/capdmp/capdmp/internal/container"
)

// Execer runs a command in a node container; container.Runtime is one.
type Execer interface {
	Exec(ctx context.Context, containerName string, cmd []string, stdin io.Reader) (container.ExecResult, error)
}

// StepError is returned by Run when a step exits with a non-zero code.
type StepError struct {
	// Index and Step say which command failed.
	Index int
	Step  string
	// ExitCode is the step's exit code.
	ExitCode int
	// Stderr is what the step wrote on its standard error. It is not part of Error(): a user's
	// command may print anything, and messages end up in conditions and logs.
	Stderr []byte
}

func (e *StepError) Error() string {
	return fmt.Sprintf("bootstrap step %d (%s) failed with exit code %d", e.Index, e.Step, e.ExitCode)
}

// Run runs the commands one after the other in the node and stops at the first that fails: a
// *StepError when it exits non-zero, the Execer's error (e.g. container.ErrNotRunning) when it
// cannot run. The context bounds the whole bootstrap; a command cut short by it keeps running in
// the node, which SentinelCheck then reports as StateStarted.
func Run(ctx context.Context, e Execer, node string, cmds []Command) error {
	for i, c := range cmds {
		var stdin io.Reader
		if c.Stdin != nil {
			stdin = bytes.NewReader(c.Stdin)
		}
		res, err := e.Exec(ctx, node, c.Argv, stdin)
		if err != nil {
			return fmt.Errorf("failed to run bootstrap step %d (%s) in %s: %w", i, c.Step, node, err)
		}
		if res.ExitCode != 0 {
			return &StepError{Index: i, Step: c.Step, ExitCode: res.ExitCode, Stderr: res.Stderr}
		}
	}
	return nil
}

// Check runs SentinelCheck in the node and returns how far its bootstrap went.
func Check(ctx context.Context, e Execer, node string) (State, error) {
	c := SentinelCheck()
	res, err := e.Exec(ctx, node, c.Argv, nil)
	if err != nil {
		return "", fmt.Errorf("failed to check the bootstrap of %s: %w", node, err)
	}
	state, err := ParseSentinelCheck(res.ExitCode)
	if err != nil {
		return "", fmt.Errorf("failed to check the bootstrap of %s: %w", node, err)
	}
	return state, nil
}
