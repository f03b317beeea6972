//go:build published

package published

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capdmp/capdmp/internal/test/testenv"
)

// registryStartTimeout bounds the registry answering /v2/ after it starts; it took well under a
// second here.
const registryStartTimeout = 30 * time.Second

// registry is a distribution registry on loopback: plain HTTP, which dockerd accepts from
// 127.0.0.0/8 without an insecure-registries entry, and filesystem storage in a temporary folder.
type registry struct {
	// Addr is its host:port, the first component of the references pushed to it.
	Addr string
	cmd  *exec.Cmd
	done chan error
}

// registryBinary is the registry hack/registry.sh builds (once, into the tools cache).
func registryBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), filepath.Join(testenv.RepoRoot(), "hack", "registry.sh"), "build").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("hack/registry.sh build: %v: %s", err, exit.Stderr)
		}
		t.Fatalf("hack/registry.sh build: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// startRegistry starts the registry on a free loopback port; it is killed by its PID when the
// test ends, and its log is shown when the test failed.
func startRegistry(t *testing.T, bin string) *registry {
	t.Helper()
	dir := t.TempDir()
	addr := freeLoopbackAddr(t)
	config := fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`, filepath.Join(dir, "storage"), addr)
	configFile := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	r := &registry{Addr: addr, done: make(chan error, 1)}
	// Not tied to the test's context: Stop ends it, by its PID.
	r.cmd = exec.Command(bin, "serve", configFile)
	r.cmd.Stdout, r.cmd.Stderr = logFile, logFile
	// No telemetry exporter: nothing listens for one here.
	r.cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none")
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting the registry %s: %v", bin, err)
	}
	go func() { r.done <- r.cmd.Wait(); _ = logFile.Close() }()
	t.Cleanup(func() {
		r.Stop(t)
		if t.Failed() {
			if content, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("registry log (%s):\n%s", logFile.Name(), tail(string(content), 20))
			}
		}
	})
	t.Logf("registry %s serving on %s (PID %d, storage in %s)", bin, addr, r.cmd.Process.Pid, dir)
	r.waitReady(t)
	return r
}

// waitReady polls /v2/ until it answers 200, failing when the registry exits first.
func (r *registry) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(registryStartTimeout)
	url := "http://" + r.Addr + "/v2/"
	for {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("the registry exited before it answered %s: %v", url, err)
		default:
		}
		if status, err := get(t.Context(), url); err == nil && status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry did not answer %s within %s", url, registryStartTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop kills the registry by its PID and waits for it; afterwards nothing listens on Addr.
func (r *registry) Stop(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // exited already
		return
	default:
	}
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("killing the registry (PID %d): %v", r.cmd.Process.Pid, err)
	}
	r.done <- <-r.done
	t.Logf("registry on %s stopped (PID %d killed)", r.Addr, r.cmd.Process.Pid)
}

func get(ctx context.Context, url string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// freeLoopbackAddr is a 127.0.0.1 port nothing listens on now (the kernel's choice).
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
