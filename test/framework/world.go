// Package framework is the world CAPDMP's real tier and its demo run in, on one machine: the
// management plane `make run` starts (test/devtools/managementplane): kube-apiserver and etcd built
// from source, Cluster API v1.14.2's core, KubeadmControlPlane and KubeadmConfig controllers and
// CAPD's DockerCluster and DockerMachine controllers in-process with every provider's webhooks,
// and the CAPDMP manager as its own process with the flags it ships with. Workload clusters are
// real: CAPD makes the load balancer and the control-plane machines from the node images `make
// node-images` builds, CAPDMP makes the pools' nodes, and real kubelets register and report their
// versions. CAPDMPPool and KitCluster are the pool as pkg/conformance's scenario table drives it,
// which every tier uses.
package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/test/autogroup"
	"github.com/capdmp/capdmp/internal/test/dockerengine"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/test/devtools/managementplane"
)

// Network is the Docker network of every node.
const Network = managementplane.Network

// Options configure a World.
type Options struct {
	// Artifacts is the folder for logs, the manager binary and the plane's state.
	Artifacts string
	// TokenTTL is CABPK's bootstrap token TTL.
	TokenTTL time.Duration
	// Progress receives one line per step of starting and stopping.
	Progress io.Writer
}

// World is a running management plane with its controllers.
type World struct {
	opts  Options
	plane *managementplane.Plane
	// Client is an uncached client of the management API server.
	Client client.Client
	// cached reads from the in-process controllers' informers: the monitors' many reads cost the
	// management API server nothing.
	cached client.Reader
	// DockerHost is the engine every node runs on.
	DockerHost string
	// Kubeconfig is the path of the management API server's kubeconfig.
	Kubeconfig string

	// engine is the framework's one client of the engine.
	engine *container.Docker

	createdNetwork bool
	restoreNice    func() error
	logFile        *os.File
	capdLog        *os.File
}

// Start brings up the management plane with a fresh API server in Artifacts/management-plane,
// building the CAPDMP manager first. Stop undoes all of it, also after a partial start.
func Start(ctx context.Context, o Options) (w *World, err error) {
	w = &World{opts: o}
	defer func() {
		if err != nil {
			w.Stop()
			w = nil
		}
	}()
	if err := os.MkdirAll(o.Artifacts, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", o.Artifacts, err)
	}
	if w.DockerHost, err = dockerengine.Host(ctx); err != nil {
		return nil, err
	}
	_ = os.Setenv("DOCKER_HOST", w.DockerHost)
	if w.engine, err = container.NewDocker(); err != nil {
		return nil, err
	}
	if _, err := dockerengine.Docker(ctx, w.DockerHost, nil, "network", "inspect", Network); err != nil {
		w.createdNetwork = true
	}
	w.raisePriority()
	assets, err := testenv.BinaryAssetsDirectory(ctx)
	if err != nil {
		return nil, err
	}
	manager, err := w.buildManager(ctx)
	if err != nil {
		return nil, err
	}

	if w.logFile, err = os.Create(filepath.Join(o.Artifacts, "core-controllers.log")); err != nil {
		return nil, err
	}
	if w.capdLog, err = os.Create(filepath.Join(o.Artifacts, "capdmp-manager.log")); err != nil {
		return nil, err
	}
	logger := funcr.New(func(prefix, args string) {
		fmt.Fprintln(w.logFile, time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{Verbosity: 2})
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	if w.plane, err = managementplane.Start(ctx, managementplane.Options{
		DataDir:               filepath.Join(o.Artifacts, "management-plane"),
		Fresh:                 true,
		BinaryAssetsDirectory: assets,
		Manager:               managementplane.ManagerOptions{Binary: manager, DockerNetwork: Network, IsolatedNetwork: true, Log: w.capdLog},
		ClusterAPI:            managementplane.ClusterAPIOptions{TokenTTL: o.TokenTTL, Logger: logger},
		Progress:              prefixed{w: o.Progress},
	}); err != nil {
		return nil, err
	}
	w.Client, w.cached, w.Kubeconfig = w.plane.APIServer.Client, w.plane.ClusterAPI.Reader, w.plane.Kubeconfig()
	return w, nil
}

// prefixed marks the plane's progress lines as the world's.
type prefixed struct{ w io.Writer }

func (p prefixed) Write(b []byte) (int, error) {
	if p.w == nil {
		return len(b), nil
	}
	if _, err := fmt.Fprintf(p.w, "[world] %s", b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// managementNice is the nice value of this process's session while the world runs: the
// management plane (API server, etcd, controllers, the CAPDMP manager) and the monitors are
// scheduled ahead of the workload clusters, as if they ran on machines of their own, and a
// monitor's samples are not held back by the nodes it watches. Measured under the real suite's
// load: at nice 0 the test process waited up to a second at a time for a CPU; see
// docs/testing.md.
const managementNice = -5

// raisePriority gives the session managementNice where the kernel schedules it as an autogroup.
// Without the privilege to do so the world runs as before, and says so.
func (w *World) raisePriority() {
	if err := autogroup.Applies(); err != nil {
		w.progressf("Not raising this session's CPU priority: %v", err)
		return
	}
	group := autogroup.Group{File: autogroup.Self}
	before, err := group.Nice()
	if err != nil {
		w.progressf("Not raising this session's CPU priority: %v", err)
		return
	}
	if before <= managementNice {
		return
	}
	if w.restoreNice, err = group.SetNice(managementNice); err != nil {
		w.progressf("Not raising this session's CPU priority: %v; under load the monitors' samples may come late", err)
		return
	}
	w.progressf("This session's scheduler autogroup at nice %d (was %d) while the world runs: the management plane and the monitors go before the nodes", managementNice, before)
}

func (w *World) progressf(format string, args ...any) {
	if w.opts.Progress != nil {
		fmt.Fprintf(w.opts.Progress, "[world] "+format+"\n", args...)
	}
}

// buildManager builds the manager binary from this repository, as `make build` does.
func (w *World) buildManager(ctx context.Context) (string, error) {
	binary := filepath.Join(w.opts.Artifacts, "manager")
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", binary, ".")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the CAPDMP manager: %w: %s", err, out)
	}
	w.progressf("CAPDMP manager built in %s", time.Since(start).Round(time.Millisecond))
	return binary, nil
}

// RestartCAPDMP stops and starts the CAPDMP manager, as a pod restart would.
func (w *World) RestartCAPDMP(ctx context.Context) error {
	return w.plane.Manager.Restart(ctx)
}

// RestartProvider implements conformance.Restarter: the CAPDMP manager restarts.
func (c *Cluster) RestartProvider(ctx context.Context) error {
	if c.w.plane == nil {
		return errors.New("the management plane runs in another process: restart it there")
	}
	return c.w.RestartCAPDMP(ctx)
}

// Stop stops everything Start started, in reverse order. Clusters must be deleted before.
func (w *World) Stop() {
	if w.plane != nil {
		w.plane.Stop()
	}
	if w.createdNetwork {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := dockerengine.Docker(ctx, w.DockerHost, nil, "network", "rm", Network); err != nil {
			w.progressf("removing network %s: %v", Network, err)
		}
	}
	if w.restoreNice != nil {
		if err := w.restoreNice(); err != nil {
			w.progressf("%v", err)
		}
	}
	if w.engine != nil {
		_ = w.engine.Close()
	}
	for _, f := range []*os.File{w.logFile, w.capdLog} {
		if f != nil {
			_ = f.Close()
		}
	}
}
