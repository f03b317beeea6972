package dockerengine

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/test/testenv"
)

// TestEnvFollowsTheDockerContext: with no DOCKER_HOST, hack/docker-engine.sh env names the engine
// of the docker CLI's current context (Docker Desktop's, Colima's, OrbStack's), which the Go
// client would not find on its own. The context here points at the engine that answers through
// a socket path of its own, which no other candidate has.
func TestEnvFollowsTheDockerContext(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host, err := Host(ctx)
	g.Expect(err).NotTo(HaveOccurred(), MissingEngine)
	g.Expect(host).To(HavePrefix("unix://"), "the engine is on a local socket")

	dir := t.TempDir()
	socket := filepath.Join(dir, "desktop.sock")
	g.Expect(os.Symlink(strings.TrimPrefix(host, "unix://"), socket)).To(Succeed())
	config := filepath.Join(dir, "docker-config")
	env := []string{"DOCKER_CONFIG=" + config, "PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	create := exec.CommandContext(ctx, "docker", "context", "create", "desktop-like", "--docker", "host=unix://"+socket)
	create.Env = env
	out, err := create.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	script := filepath.Join(testenv.RepoRoot(), "hack", "docker-engine.sh")
	for _, tt := range []struct{ name, contextEnv, want string }{
		{name: "DOCKER_CONTEXT names it", contextEnv: "DOCKER_CONTEXT=desktop-like", want: "unix://" + socket},
		{name: "the default context: the usual candidates", contextEnv: "DOCKER_CONTEXT=default", want: host},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cmd := exec.CommandContext(ctx, script, "env")
			cmd.Env = append(env, tt.contextEnv, "CAPDMP_DOCKER_DIR="+filepath.Dir(strings.TrimPrefix(host, "unix://")))
			out, err := cmd.Output()
			g.Expect(err).NotTo(HaveOccurred(), string(out))
			g.Expect(strings.TrimSpace(string(out))).To(Equal("export DOCKER_HOST=" + tt.want))
		})
	}
}
