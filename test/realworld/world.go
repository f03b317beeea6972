// Package realworld runs the real tier of CAPDMP's tests and its demo on one machine: a management
// API server (kube-apiserver and etcd built from source) running Cluster API v1.14.2's core,
// KubeadmControlPlane and KubeadmConfig reconcilers and CAPD's DockerCluster and DockerMachine
// reconcilers in-process, and the CAPDMP manager as its own process with the flags it ships with.
// Workload clusters are real: CAPD makes the load balancer and the control-plane machines from
// the node images `make node-images` builds, CAPDMP makes the pools' nodes, and real kubelets
// register and report their versions.
package realworld

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/reconcilers/kubeadmconfig"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	kcpreconciler "sigs.k8s.io/cluster-api/controlplane/kubeadm/reconcilers/kubeadmcontrolplane"
	kcpsetup "sigs.k8s.io/cluster-api/controlplane/kubeadm/setup"
	clusterreconciler "sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	machinereconciler "sigs.k8s.io/cluster-api/core/reconcilers/machine"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinehealthcheck"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinepool"
	"sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	coresetup "sigs.k8s.io/cluster-api/core/setup"
	capdcontainer "sigs.k8s.io/cluster-api/test/infrastructure/container"
	capdcontrollers "sigs.k8s.io/cluster-api/test/infrastructure/docker/controllers"
	"sigs.k8s.io/cluster-api/util/index"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/capdmp/capdmp/internal/embedded"
	"github.com/capdmp/capdmp/internal/test/autogroup"
	"github.com/capdmp/capdmp/internal/test/dockerengine"
	"github.com/capdmp/capdmp/internal/test/envtest"
	"github.com/capdmp/capdmp/internal/test/hostsysctl"
)

// Network is the Docker network of every node: CAPD v1.14.2 puts its machines and load
// balancers on kind's network, and CAPDMP's --docker-network defaults to it.
const Network = "kind"

// Options configure a World.
type Options struct {
	// Artifacts is the folder for logs and the manager binary.
	Artifacts string
	// TokenTTL is CABPK's bootstrap token TTL.
	TokenTTL time.Duration
	// Progress receives one line per step of starting and stopping.
	Progress io.Writer
}

// World is a running management plane with its controllers.
type World struct {
	opts Options
	// Client is an uncached client of the management API server.
	Client client.Client
	// cached reads from the in-process manager's informers: the monitors' many reads cost the
	// management API server nothing.
	cached     client.Reader
	Management *envtest.Management
	// DockerHost is the engine every node runs on.
	DockerHost string
	// Kubeconfig is the path of the management API server's kubeconfig.
	Kubeconfig string

	coreStop       context.CancelFunc
	coreDone       chan struct{}
	createdNetwork bool
	sysctls        *hostsysctl.Snapshot
	restoreNice    func() error
	logFile        *os.File

	mu      sync.Mutex
	capdmp  *exec.Cmd
	exited  chan struct{}
	binary  string
	capdLog *os.File
}

// Start brings up the management API server, Cluster API's and CAPD's reconcilers and the CAPDMP
// manager. Stop undoes all of it, also after a partial start.
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
	host := hostsysctl.Host{StateFile: hostsysctl.DefaultStateFile(), Logf: w.progressf}
	if w.sysctls, err = host.Record(hostsysctl.KubeletChanged, hostsysctl.InotifyForManyNodes); err != nil {
		return nil, err
	}
	if err := w.ensureNetwork(ctx); err != nil {
		return nil, err
	}
	w.raisePriority()

	if w.logFile, err = os.Create(filepath.Join(o.Artifacts, "core-controllers.log")); err != nil {
		return nil, err
	}
	logger := funcr.New(func(prefix, args string) {
		fmt.Fprintln(w.logFile, time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{Verbosity: 2})
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	start := time.Now()
	if w.Management, err = envtest.StartManagement(ctx); err != nil {
		return nil, fmt.Errorf("starting the management API server: %w", err)
	}
	w.Client = w.Management.Client
	w.Kubeconfig = filepath.Join(o.Artifacts, "management.kubeconfig")
	if err := embedded.WriteKubeconfig(w.Management.Config, w.Kubeconfig); err != nil {
		return nil, err
	}
	w.progressf("management API server up in %s (kubeconfig %s)", time.Since(start).Round(time.Millisecond), w.Kubeconfig)

	if err := w.startCore(logger); err != nil {
		return nil, fmt.Errorf("starting Cluster API's and CAPD's reconcilers: %w", err)
	}
	w.progressf("Cluster API core, KubeadmControlPlane, KubeadmConfig and CAPD reconcilers running")

	if err := w.buildManager(ctx); err != nil {
		return nil, err
	}
	if err := w.StartCAPDMP(); err != nil {
		return nil, err
	}
	return w, nil
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

// ensureNetwork creates kind's network without masquerading (nothing leaves this machine) unless
// it exists.
func (w *World) ensureNetwork(ctx context.Context) error {
	if _, err := dockerengine.Docker(ctx, w.DockerHost, nil, "network", "inspect", Network); err == nil {
		return nil
	}
	if _, err := dockerengine.Docker(ctx, w.DockerHost, nil, "network", "create",
		"-o", "com.docker.network.bridge.enable_ip_masquerade=false", Network); err != nil {
		return fmt.Errorf("creating Docker network %s: %w", Network, err)
	}
	w.createdNetwork = true
	return nil
}

// startCore runs, in this process, what a management cluster runs besides CAPDMP: Cluster API's
// core controllers, KubeadmControlPlane, KubeadmConfig and CAPD's DockerCluster and DockerMachine.
func (w *World) startCore(logger logr.Logger) error {
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), logger))
	mgr, err := ctrl.NewManager(w.Management.Config, ctrl.Options{
		Scheme:  w.Management.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Client: client.Options{Cache: &client.CacheOptions{
			DisableFor: []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}},
		}},
	})
	if err != nil {
		cancel()
		return err
	}
	opts := controller.Options{MaxConcurrentReconciles: 10, SkipNameValidation: ptr.To(true)}
	// Reads Secrets from the manager's cache, as Cluster API's managers give KCP, CABPK and the
	// ClusterCache (the manager's own client reads them live).
	secrets, err := kcpsetup.CreateSecretCachingClient(mgr)
	if err != nil {
		cancel()
		return fmt.Errorf("creating the Secret caching client: %w", err)
	}
	// One ClusterCache serves every reconciler here; core's options (Pods read live, as drain
	// needs) suit KCP too, which then reads its static pods from the API server.
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secrets,
		Cache:        coresetup.ClusterCacheCacheOptions(),
		Client:       coresetup.ClusterCacheClientOptions("capdmp-realworld", 20, 30),
	}, opts)
	if err != nil {
		cancel()
		return err
	}
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		cancel()
		return err
	}
	runtime, err := capdcontainer.NewDockerClient()
	if err != nil {
		cancel()
		return fmt.Errorf("connecting CAPD to the Docker engine: %w", err)
	}
	// KCP's etcd client logs retries of members that are joining or leaving at warning level;
	// the controllers' own log says what matters.
	etcdLogger := zap.NewNop()
	setups := []func() error{
		func() error { return SetupCoreReconcilers(ctx, mgr, cc, secrets, opts, w.opts.TokenTTL) },
		func() error {
			return (&machineset.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc}).SetupWithManager(ctx, mgr, opts)
		},
		// The template's MachineHealthCheck on the control plane: KCP remediates what it marks.
		func() error {
			return (&machinehealthcheck.Reconciler{Client: mgr.GetClient(), ClusterCache: cc}).SetupWithManager(ctx, mgr, opts)
		},
		func() error {
			o := opts
			o.ReconciliationTimeout = 3 * time.Minute // KCP talks to every etcd member
			return (&kcpreconciler.Reconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), SecretCachingClient: secrets, ClusterCache: cc,
				EtcdDialTimeout: 10 * time.Second, EtcdCallTimeout: 15 * time.Second, EtcdLogger: etcdLogger,
				RemoteConditionsGracePeriod: 5 * time.Minute,
			}).SetupWithManager(ctx, mgr, o)
		},
		func() error {
			return (&capdcontrollers.DockerClusterReconciler{Client: mgr.GetClient(), ContainerRuntime: runtime}).SetupWithManager(ctx, mgr, opts)
		},
		func() error {
			return (&capdcontrollers.DockerMachineReconciler{Client: mgr.GetClient(), ContainerRuntime: runtime, ClusterCache: cc}).SetupWithManager(ctx, mgr, opts)
		},
	}
	for _, setup := range setups {
		if err := setup(); err != nil {
			cancel()
			return err
		}
	}
	w.coreDone = make(chan struct{})
	go func() {
		defer close(w.coreDone)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(w.logFile, "core manager stopped:", err)
		}
	}()
	w.coreStop = cancel
	w.cached = mgr.GetClient()
	return nil
}

// SetupCoreReconcilers adds what every MachinePool test needs of Cluster API's management side:
// the Cluster, Machine, MachinePool and KubeadmConfig reconcilers (CABPK with tokenTTL). The
// fast tier (test/local) runs these alone; the real world adds MachineSet, KCP and CAPD.
// secretCachingClient reads Secrets from the manager's cache, as Cluster API's managers do
// (CreateSecretCachingClient of sigs.k8s.io/cluster-api/controlplane/kubeadm/setup).
func SetupCoreReconcilers(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache, secretCachingClient client.Client, opts controller.Options, tokenTTL time.Duration) error {
	setups := []func() error{
		func() error {
			return (&clusterreconciler.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc, RemoteConnectionGracePeriod: 5 * time.Minute}).SetupWithManager(ctx, mgr, opts)
		},
		func() error {
			return (&machinereconciler.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc, RemoteConditionsGracePeriod: 5 * time.Minute}).SetupWithManager(ctx, mgr, opts)
		},
		func() error {
			return (&machinepool.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc}).SetupWithManager(ctx, mgr, opts)
		},
		func() error {
			return (&kubeadmconfig.Reconciler{Client: mgr.GetClient(), SecretCachingClient: secretCachingClient, APIReader: mgr.GetAPIReader(), ClusterCache: cc, TokenTTL: tokenTTL}).SetupWithManager(ctx, mgr, opts)
		},
	}
	for _, setup := range setups {
		if err := setup(); err != nil {
			return err
		}
	}
	return nil
}

// buildManager builds the manager binary from this repository, as `make build` does.
func (w *World) buildManager(ctx context.Context) error {
	w.binary = filepath.Join(w.opts.Artifacts, "manager")
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", w.binary, ".")
	cmd.Dir = envtest.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the CAPDMP manager: %w: %s", err, out)
	}
	w.progressf("CAPDMP manager built in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// StartCAPDMP starts the CAPDMP manager process against the management API server, with the flags
// config/manager ships but webhooks (no certificates here) and metrics (no port needed).
func (w *World) StartCAPDMP() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.capdmp != nil {
		return errors.New("the CAPDMP manager is already running")
	}
	if w.capdLog == nil {
		f, err := os.Create(filepath.Join(w.opts.Artifacts, "capdmp-manager.log"))
		if err != nil {
			return err
		}
		w.capdLog = f
	}
	cmd := exec.Command(w.binary,
		"--leader-elect=false", "--enable-webhooks=false", "--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:0", "--docker-network="+Network, "--v=2")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+w.Kubeconfig, "DOCKER_HOST="+w.DockerHost)
	cmd.Stdout, cmd.Stderr = w.capdLog, w.capdLog
	// Its own process group: a Ctrl-C to the terminal reaches this process, which stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the CAPDMP manager: %w", err)
	}
	fmt.Fprintf(w.capdLog, "=== started pid %d at %s\n", cmd.Process.Pid, time.Now().Format(time.RFC3339Nano))
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	w.capdmp, w.exited = cmd, exited
	w.progressf("CAPDMP manager running (pid %d, log %s)", cmd.Process.Pid, w.capdLog.Name())
	return nil
}

// StopCAPDMP stops the CAPDMP manager: SIGTERM, then SIGKILL after 10 s.
func (w *World) StopCAPDMP() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.capdmp == nil {
		return
	}
	_ = w.capdmp.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(10 * time.Second):
		_ = w.capdmp.Process.Kill()
		<-w.exited
	}
	fmt.Fprintf(w.capdLog, "=== stopped pid %d at %s\n", w.capdmp.Process.Pid, time.Now().Format(time.RFC3339Nano))
	w.capdmp = nil
}

// RestartCAPDMP stops and starts the CAPDMP manager, as a pod restart would.
func (w *World) RestartCAPDMP() error {
	w.StopCAPDMP()
	return w.StartCAPDMP()
}

// Stop stops everything Start started, in reverse order. Clusters must be deleted before.
func (w *World) Stop() {
	w.StopCAPDMP()
	if w.coreStop != nil {
		w.coreStop()
		<-w.coreDone
	}
	if w.Management != nil {
		_ = w.Management.Stop()
	}
	if w.createdNetwork {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := dockerengine.Docker(ctx, w.DockerHost, nil, "network", "rm", Network); err != nil {
			w.progressf("removing network %s: %v", Network, err)
		}
	}
	if w.sysctls != nil {
		if err := w.sysctls.Restore(); err != nil {
			w.progressf("%v", err)
		}
	}
	if w.restoreNice != nil {
		if err := w.restoreNice(); err != nil {
			w.progressf("%v", err)
		}
	}
	for _, f := range []*os.File{w.logFile, w.capdLog} {
		if f != nil {
			_ = f.Close()
		}
	}
}
