// Package dockerengine finds the Docker engine the tests use: DOCKER_HOST when it answers, else
// the one hack/docker-engine.sh started. Only the Docker CLI is used.
package dockerengine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capdmp/capdmp/internal/test/testenv"
)

// Host returns the DOCKER_HOST of an engine that answers `docker version`: the environment's, or
// the one `hack/docker-engine.sh env` names. It never starts an engine.
func Host(ctx context.Context) (string, error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return "", errors.New("no docker CLI in PATH (hack/docker-engine.sh start installs Debian's docker.io)")
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		if err := ping(ctx, h); err != nil {
			return "", fmt.Errorf("DOCKER_HOST=%s does not answer: %w", h, err)
		}
		return h, nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(testenv.RepoRoot(), "hack", "docker-engine.sh"), "env")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("no Docker engine answers (hack/docker-engine.sh env: %w)", err)
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "export DOCKER_HOST="), nil
}

// MissingEngine is what a test that needs a Docker engine says when none answers.
const MissingEngine = "no Docker engine answers: start one with hack/docker-engine.sh start (make test does)"

func ping(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}")
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+host)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Require returns the engine's DOCKER_HOST and sets it in the test's environment, so that the
// docker CLI and moby clients the test runs use it. With no engine the test fails, in CI or not:
// a test that needs an engine and did not run must not read as a pass.
func Require(t testing.TB) string {
	t.Helper()
	host, err := Host(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", MissingEngine, err)
	}
	t.Setenv("DOCKER_HOST", host)
	return host
}

// Docker runs the docker CLI against host and returns its standard output; the error carries
// standard error.
func Docker(ctx context.Context, host string, stdin []byte, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	// DOCKER_BUILDKIT=0: `docker build` uses the engine's own builder; Debian's docker.io has no buildx.
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+host, "DOCKER_BUILDKIT=0")
	if stdin != nil {
		cmd.Stdin = strings.NewReader(string(stdin))
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
