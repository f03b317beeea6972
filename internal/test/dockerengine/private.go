package dockerengine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/capdmp/capdmp/internal/test/testenv"
)

// Private is a Docker engine of a test's own, beside the shared one, that the test may stop and
// start: hack/docker-engine.sh's dockerd with its own socket, state and data, no iptables rules,
// and a bridge of its own for its default network (a dockerd without one deletes docker0, the
// shared engine's). Its tests run containers on the host's network.
type Private struct {
	// Host is its DOCKER_HOST.
	Host   string
	dir    string
	bridge string
}

// StartPrivate creates the engine's bridge and starts a private engine with its state and data
// under dir. Remove deletes both.
func StartPrivate(ctx context.Context, dir string) (*Private, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("a private Docker engine (hack/docker-engine.sh's dockerd, a Linux bridge and mounts) runs only on Linux, not on %s: run the tests that need one on Linux", runtime.GOOS)
	}
	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		return nil, err
	}
	// At most 15 characters, Linux's limit; an address range no engine here uses.
	p := &Private{dir: dir, bridge: "capdmp-pv" + hex.EncodeToString(suffix)}
	cidr := fmt.Sprintf("10.199.%d.1/24", suffix[0])
	for _, args := range [][]string{{"link", "add", "name", p.bridge, "type", "bridge"}, {"addr", "add", cidr, "dev", p.bridge}} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			_ = p.deleteBridge()
			return nil, fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	if err := p.Start(ctx); err != nil {
		return nil, errors.Join(err, p.deleteBridge())
	}
	return p, nil
}

func (p *Private) deleteBridge() error {
	if out, err := exec.Command("ip", "link", "del", p.bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		return fmt.Errorf("ip link del %s: %w: %s", p.bridge, err, out)
	}
	return nil
}

// Start starts the engine again after Stop; its containers with a restart policy come back.
func (p *Private) Start(ctx context.Context) error {
	out, err := p.script(ctx, "start")
	if err != nil {
		return err
	}
	p.Host = strings.TrimPrefix(strings.TrimSpace(out), "export DOCKER_HOST=")
	if p.Host == "" {
		return fmt.Errorf("hack/docker-engine.sh start printed no DOCKER_HOST for %s", p.dir)
	}
	return nil
}

// Stop stops the engine, as `systemctl stop docker` would: dockerd stops its containers.
func (p *Private) Stop(ctx context.Context) error {
	_, err := p.script(ctx, "stop")
	return err
}

// Remove stops the engine and removes its containers, images and state.
func (p *Private) Remove(ctx context.Context) error {
	var errs []error
	if p.Host != "" {
		if ids, err := Docker(ctx, p.Host, nil, "ps", "-aq"); err == nil && strings.TrimSpace(ids) != "" {
			_, err := Docker(ctx, p.Host, nil, append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
			errs = append(errs, err)
		}
	}
	errs = append(errs, p.Stop(ctx), p.deleteBridge(), unmountUnder(p.dir), os.RemoveAll(p.dir))
	return errors.Join(errs...)
}

func (p *Private) script(ctx context.Context, command string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(testenv.RepoRoot(), "hack", "docker-engine.sh"), command)
	cmd.Env = append(os.Environ(),
		"CAPDMP_DOCKER_DIR="+filepath.Join(p.dir, "run"),
		"CAPDMP_DOCKER_DATA_ROOT="+filepath.Join(p.dir, "data"),
		"CAPDMP_DOCKER_IPTABLES=false",
		"CAPDMP_DOCKER_BRIDGE="+p.bridge,
		"CAPDMP_DOCKER_OWN=true",
	)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/docker-engine.sh %s for the engine in %s: %w: %s", command, p.dir, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
