package managementplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capdmp/capdmp/internal/test/apiserver"
)

// ManagerOptions configure the CAPDMP manager process.
type ManagerOptions struct {
	// Binary is the manager (`make build` writes bin/manager).
	Binary string
	// DockerNetwork is its --docker-network.
	DockerNetwork string
	// IsolatedNetwork is its --docker-network-isolated: a DockerNetwork the plane or the manager
	// creates has no IP masquerade, so that nodes reach only the host and each other (the tiers
	// on a machine that must send nothing out ask for it). Off, it is created as kind creates it.
	IsolatedNetwork bool
	// Args are further flags, after the plane's own.
	Args []string
	// Log receives its standard output and error.
	Log io.Writer
	// NoWebhooks runs it with --enable-webhooks=false, against an API server that installs no
	// webhook configuration; it is ready when its readiness probe answers.
	NoWebhooks bool
	// Kubeconfig is where the manager's credentials are written; beside the API server's admin
	// kubeconfig when empty.
	Kubeconfig string
	// Metrics serves the manager's metrics on a free loopback port (MetricsURL); off when false.
	// A local process serves them as Cluster API's tests do, over plain HTTP to anyone
	// (--insecure-diagnostics); the Deployment keeps the default, HTTPS to clients the API
	// server authenticates and authorizes.
	Metrics bool
}

// Manager is the CAPDMP manager running as a process of its own against the management API
// server, with the flags config/manager ships but leader election (and metrics unless asked
// for), and its webhooks served on a local port with the API server's webhook certificate.
type Manager struct {
	o           ManagerOptions
	server      *apiserver.APIServer
	webhookAddr string
	// healthAddr serves its readiness probe, with NoWebhooks.
	healthAddr string
	// metricsAddr serves its metrics, with Metrics.
	metricsAddr string
	// kubeconfig holds the credentials of the manager's ServiceAccount, bound to the shipped RBAC.
	kubeconfig string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartManager installs CAPDMP's webhook configurations against a free local port and starts the
// manager serving them there; it returns once the webhook server answers. With NoWebhooks it
// installs none and returns once the manager's readiness probe answers.
func StartManager(ctx context.Context, s *apiserver.APIServer, o ManagerOptions) (*Manager, error) {
	if o.Kubeconfig == "" && s.Kubeconfig == "" {
		return nil, errors.New("the CAPDMP manager needs a place for its kubeconfig: ManagerOptions.Kubeconfig or the API server's")
	}
	if !o.NoWebhooks && s.WebhookCertDir == "" {
		return nil, errors.New("the CAPDMP manager's webhooks need the API server's webhook certificate")
	}
	m := &Manager{o: o, server: s, kubeconfig: cmp.Or(o.Kubeconfig, filepath.Join(filepath.Dir(s.Kubeconfig), "capdmp-manager.kubeconfig"))}
	cfg, err := s.ManagerConfig(ctx)
	if err != nil {
		return nil, err
	}
	if err := apiserver.WriteKubeconfig(cfg, m.kubeconfig); err != nil {
		return nil, err
	}
	if o.NoWebhooks {
		port, err := apiserver.FreePort(ctx, "127.0.0.1")
		if err != nil {
			return nil, fmt.Errorf("finding a port for the CAPDMP manager's readiness probe: %w", err)
		}
		m.healthAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	} else {
		port, err := apiserver.FreePort(ctx, s.WebhookHost)
		if err != nil {
			return nil, fmt.Errorf("finding a port for CAPDMP's webhooks: %w", err)
		}
		m.webhookAddr = net.JoinHostPort(s.WebhookHost, strconv.Itoa(port))
		if err := s.InstallCAPDMPWebhooks(ctx, m.webhookAddr); err != nil {
			return nil, err
		}
	}
	if o.Metrics {
		port, err := apiserver.FreePort(ctx, "127.0.0.1")
		if err != nil {
			return nil, fmt.Errorf("finding a port for the CAPDMP manager's metrics: %w", err)
		}
		m.metricsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	if err := m.Start(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// MetricsURL is where the manager serves its metrics; empty unless ManagerOptions.Metrics.
func (m *Manager) MetricsURL() string {
	if m.metricsAddr == "" {
		return ""
	}
	return "http://" + m.metricsAddr + "/metrics"
}

// Start starts the manager process unless it runs, and waits for its webhook server (or, with
// NoWebhooks, its readiness probe).
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return errors.New("the CAPDMP manager is already running")
	}
	args := []string{"--leader-elect=false", "--docker-network=" + m.o.DockerNetwork, "--v=2"}
	if m.o.IsolatedNetwork {
		args = append(args, "--docker-network-isolated")
	}
	if m.metricsAddr != "" {
		args = append(args, "--diagnostics-address="+m.metricsAddr, "--insecure-diagnostics")
	} else {
		args = append(args, "--diagnostics-address=0")
	}
	if m.o.NoWebhooks {
		args = append(args, "--enable-webhooks=false", "--health-probe-bind-address="+m.healthAddr)
	} else {
		_, port, _ := net.SplitHostPort(m.webhookAddr)
		args = append(args, "--health-probe-bind-address=127.0.0.1:0", "--webhook-port="+port, "--webhook-cert-dir="+m.server.WebhookCertDir)
	}
	args = append(args, m.o.Args...)
	// Not bound to ctx: the manager lives until Stop, not until the call that started it.
	cmd := exec.Command(m.o.Binary, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+m.kubeconfig)
	cmd.Stdout, cmd.Stderr = m.o.Log, m.o.Log
	cmd.SysProcAttr = managerProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the CAPDMP manager %s: %w", m.o.Binary, err)
	}
	fmt.Fprintf(m.o.Log, "=== started pid %d at %s\n", cmd.Process.Pid, time.Now().Format(time.RFC3339Nano))
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	m.cmd, m.exited = cmd, exited
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	if m.o.NoWebhooks {
		if err := waitReady(ctx, "http://"+m.healthAddr+"/readyz", time.Minute); err != nil {
			return fmt.Errorf("waiting for the CAPDMP manager to be ready (pid %d; its log says why): %w", cmd.Process.Pid, err)
		}
		return nil
	}
	if err := apiserver.WaitServing(ctx, m.webhookAddr, m.server.WebhookCA, time.Minute); err != nil {
		return fmt.Errorf("waiting for the CAPDMP manager's webhooks (pid %d; its log says why): %w", cmd.Process.Pid, err)
	}
	return nil
}

// waitReady waits until url answers 200.
func waitReady(ctx context.Context, url string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// Pid is the manager's process ID, 0 when it is not running.
func (m *Manager) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Stop stops the manager: SIGTERM, then SIGKILL after 10 s.
func (m *Manager) Stop() {
	m.end(syscall.SIGTERM, 10*time.Second)
}

// Kill kills the manager with SIGKILL, as an evicted Pod or a crash would end it.
func (m *Manager) Kill() {
	m.end(syscall.SIGKILL, 0)
}

// end sends sig and waits for the manager to exit, sending SIGKILL after grace.
func (m *Manager) end(sig syscall.Signal, grace time.Duration) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(sig)
	select {
	case <-m.exited:
	case <-time.After(grace):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
	fmt.Fprintf(m.o.Log, "=== %s pid %d at %s\n", sig, m.cmd.Process.Pid, time.Now().Format(time.RFC3339Nano))
	m.cmd = nil
}

// Restart stops and starts the manager, as a pod restart would.
func (m *Manager) Restart(ctx context.Context) error {
	m.Stop()
	return m.Start(ctx)
}
