package stubnodes

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	kcpsetup "sigs.k8s.io/cluster-api/controlplane/kubeadm/setup"
	"sigs.k8s.io/cluster-api/util/index"
	"sigs.k8s.io/cluster-api/util/test/builder"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/capdmp/capdmp/controllers"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/test/apiserver"
	"github.com/capdmp/capdmp/internal/test/dockerengine"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/test/stubnode"
)

// Stub node image versions the scenarios use: four consecutive minors across kubeadm's
// v1beta3/v1beta4 boundary.
var (
	v130 = "v1.30.13"
	v131 = "v1.31.9"
	v132 = "v1.32.5"
	v133 = "v1.33.1"
)

// tokenTTL is CABPK's bootstrap token TTL here: short, so that a pause can outlive it.
const tokenTTL = 20 * time.Second

var (
	testEnv *testenv.Environment
	// mgmt is an uncached client of the management API server.
	mgmt client.Client
	// engine is a client of the Docker engine, for the tests' own checks.
	engine *container.Docker
	// managerStop stops the running manager; restartManager replaces it, under managerMu.
	managerStop context.CancelFunc
	managerMu   sync.Mutex
	logFile     *os.File
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctx := context.Background()
	host, err := dockerengine.Host(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL test/scenarios/stubnodes: %s: %v\n", dockerengine.MissingEngine, err)
		return 1
	}
	_ = os.Setenv("DOCKER_HOST", host)
	if engine, err = container.NewDocker(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := stubnode.EnsureImages(ctx, os.Stderr, v130, v131, v132, v133); err != nil {
		fmt.Fprintln(os.Stderr, "building stub node images:", err)
		return 1
	}

	artifacts := filepath.Join(testenv.RepoRoot(), "_artifacts")
	_ = os.MkdirAll(artifacts, 0o755)
	if logFile, err = os.Create(filepath.Join(artifacts, "test-local-manager.log")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer logFile.Close()
	logger := funcr.New(func(prefix, args string) { fmt.Fprintln(logFile, time.Now().Format("15:04:05.000"), prefix, args) }, funcr.Options{Verbosity: 4})
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	start := time.Now()
	if testEnv, err = testenv.Start(ctx, testenv.Options{Workload: true}); err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() { _ = testEnv.Stop() }()
	mgmt = testEnv.Management.Client
	if err := installInfrastructureClusterCRD(testEnv.Management.APIServer); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "management and workload API servers up in %s\n", time.Since(start).Round(time.Millisecond))

	if err := startManager(defaultManager); err != nil {
		fmt.Fprintln(os.Stderr, "starting the manager:", err)
		return 1
	}
	// Not `defer managerStop()`: a restart replaces managerStop, and the last one must run.
	defer func() { managerStop() }() //nolint:gocritic // see above
	code := m.Run()
	// The suite's verdict on the mission, in the form CI reads.
	skewViolationsMu.Lock()
	defer skewViolationsMu.Unlock()
	fmt.Printf("skew-violations: %d\n", skewViolationsTotal)
	return code
}

// installInfrastructureClusterCRD installs the CRD of the generic infrastructure cluster the stub
// tier's Clusters refer to (newTestCluster).
func installInfrastructureClusterCRD(apiServer *apiserver.APIServer) error {
	if _, err := envtest.InstallCRDs(apiServer.Config, envtest.CRDInstallOptions{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{builder.GenericInfrastructureClusterCRD.DeepCopy()},
	}); err != nil {
		return fmt.Errorf("installing the generic infrastructure cluster CRD: %w", err)
	}
	return nil
}

// managerConfig says how a manager started runs CAPDMP.
type managerConfig struct {
	// containerSyncPeriod is the pools' re-list period.
	containerSyncPeriod time.Duration
	// capdmpOutOfProcess leaves CAPDMP's reconcilers out of the manager: the test runs the manager
	// binary (startManagerProcess).
	capdmpOutOfProcess bool
	// wrapClient, when set, wraps the client CAPDMP's reconcilers read and write with.
	wrapClient func(client.Client) client.Client
	// engine is the engine CAPDMP's reconcilers use; the suite's when nil.
	engine *container.Docker
	// tokenTTL is CABPK's bootstrap token TTL; the suite's short one when zero.
	tokenTTL time.Duration
	// workers is every controller's MaxConcurrentReconciles; managerWorkers when zero.
	workers int
}

// defaultManager: a short sync period, so that tests which remove containers by hand see them
// replaced quickly.
var defaultManager = managerConfig{containerSyncPeriod: 2 * time.Second}

// currentManager is the configuration of the running manager, which restarts keep.
var currentManager = defaultManager

// startManager runs a manager with Cluster API's reconcilers and CAPDMP's, as a management
// cluster would: Cluster, Machine, MachinePool, KubeadmConfig, the ClusterCache, and CAPDMP's two
// on the host network (the workload API server listens on loopback).
func startManager(cfg managerConfig) error {
	stop, err := runManager(testEnv.Management.APIServer, cfg)
	if err != nil {
		return err
	}
	managerStop = stop
	currentManager = cfg
	return nil
}

// managerWorkers is how many reconciles of each controller runManager's manager runs at once
// (MaxConcurrentReconciles): 5 pools, 5 DockerMachinePoolMachines (bootstraps started), where the
// shipped manager runs 10 of each (--dockermachinepool-concurrency,
// --dockermachinepoolmachine-concurrency). Each pool creates controllers.DefaultMaxConcurrentCreates
// containers at once, as shipped.
const managerWorkers = 5

// runManager runs a manager with Cluster API's reconcilers and CAPDMP's against a management API
// server until the returned function stops it.
func runManager(apiServer *apiserver.APIServer, cfg managerConfig) (func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(apiServer.Config, ctrl.Options{
		Scheme:  apiServer.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Client: client.Options{Cache: &client.CacheOptions{
			DisableFor:   []client.Object{&corev1.Secret{}},
			Unstructured: true,
		}},
	})
	if err != nil {
		cancel()
		return nil, err
	}
	opts := controller.Options{MaxConcurrentReconciles: cmp.Or(cfg.workers, managerWorkers), SkipNameValidation: ptr.To(true)}
	secrets, err := kcpsetup.CreateSecretCachingClient(mgr)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("creating the Secret caching client: %w", err)
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secrets,
		Cache:        clustercache.CacheOptions{Indexes: []clustercache.CacheOptionsIndex{clustercache.NodeProviderIDIndex}},
		Client:       clustercache.ClientOptions{UserAgent: "capdmp-test-local"},
	}, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		cancel()
		return nil, err
	}
	capdmpClient, capdmpEngine := mgr.GetClient(), cmp.Or(cfg.engine, engine)
	if cfg.wrapClient != nil {
		capdmpClient = cfg.wrapClient(capdmpClient)
	}
	setups := []func() error{
		func() error {
			return testenv.SetupCoreReconcilers(ctx, mgr, cc, secrets, opts, cmp.Or(cfg.tokenTTL, tokenTTL))
		},
	}
	if !cfg.capdmpOutOfProcess {
		setups = append(setups,
			func() error {
				return (&controllers.DockerMachinePoolReconciler{
					Client: capdmpClient, APIReader: mgr.GetAPIReader(), ClusterCache: cc, Runtime: capdmpEngine,
					Network: container.HostNetwork, ContainerSyncPeriod: cfg.containerSyncPeriod,
				}).SetupWithManager(ctx, mgr, opts)
			},
			func() error {
				return (&controllers.DockerMachinePoolMachineReconciler{Client: capdmpClient, APIReader: mgr.GetAPIReader(), Runtime: capdmpEngine, ClusterCache: cc}).SetupWithManager(ctx, mgr, opts)
			})
	}
	for _, setup := range setups {
		if err := setup(); err != nil {
			cancel()
			return nil, err
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(logFile, "manager stopped:", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// withManager restarts the manager as cfg says for the rest of the test, and restores the
// default after it. Only tests that run alone (not parallel) may call it.
func withManager(t *testing.T, cfg managerConfig) {
	t.Helper()
	replaceManager(t, cfg)
	t.Cleanup(func() { replaceManager(t, defaultManager) })
}

// withLongSyncPeriod restarts the manager with a container sync period longer than the test, so
// that only watches (the control plane's, the Machines') can drive the pool, and restores it after.
func withLongSyncPeriod(t *testing.T) {
	t.Helper()
	withManager(t, managerConfig{containerSyncPeriod: time.Hour})
}

// restartManager stops the manager and starts a new one as it was, as a controller restart would.
func restartManager(t *testing.T) {
	t.Helper()
	replaceManager(t, currentManager)
}

func replaceManager(t *testing.T, cfg managerConfig) {
	t.Helper()
	managerMu.Lock()
	defer managerMu.Unlock()
	managerStop()
	if err := startManager(cfg); err != nil {
		t.Fatalf("restarting the manager: %v", err)
	}
}
