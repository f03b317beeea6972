// Package containertest gives tests a real Docker engine and a tiny image to run on it.
package containertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/test/dockerengine"
)

// BusyboxImage is a 2 MB image with a static busybox and its applets, built from Debian's
// busybox-static by EnsureBusyboxImage; nothing is ever pulled.
const BusyboxImage = "capdmp.local/busybox:test"

// Engine returns a Runtime for the engine hack/docker-engine.sh started (or DOCKER_HOST's). With
// no engine the test fails.
func Engine(t testing.TB) *container.Docker {
	t.Helper()
	// Finds the engine (fails without one) and sets DOCKER_HOST.
	dockerengine.Require(t)
	d, err := container.NewDocker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	version, err := d.Ping(ctx)
	if err != nil {
		t.Fatalf("Docker engine at %s answers the CLI but not the API client: %v", os.Getenv("DOCKER_HOST"), err)
	}
	t.Logf("Docker engine at %s, API %s", os.Getenv("DOCKER_HOST"), version)
	d.ResetCalls()
	return d
}

// EnsureBusyboxImage builds BusyboxImage unless the engine has it: FROM scratch, a static
// busybox, its applet links and a PATH.
func EnsureBusyboxImage(t testing.TB, d *container.Docker) {
	t.Helper()
	exists, err := d.ImageExists(context.Background(), BusyboxImage)
	if err != nil {
		t.Fatal(err)
	}
	if exists {
		return
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox (Debian's busybox-static) is needed to build %s: %v", BusyboxImage, err)
	}
	dir := t.TempDir()
	content, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "busybox"), content, 0o755); err != nil { // an executable
		t.Fatal(err)
	}
	dockerfile := "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n" +
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("docker", "build", "--pull=false", "-t", BusyboxImage, dir)
	// The classic builder: BuildKit may be missing from Debian's docker.io.
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v: %s", BusyboxImage, err, out)
	}
}
