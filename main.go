// Command manager runs the CAPDMP controllers, DockerMachinePool and DockerMachinePoolMachine, and
// their webhooks against the management cluster of its kubeconfig (or its in-cluster config). It
// is what the image runs; test/devtools/cmd/management-plane runs it beside a local management plane.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/controllers"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/hostpath"
	"github.com/capdmp/capdmp/internal/webhooks"
	"github.com/capdmp/capdmp/version"
)

// options are the manager's flags.
type options struct {
	leaderElect                 bool
	leaderElectionLeaseDuration time.Duration
	leaderElectionRenewDeadline time.Duration
	leaderElectionRetryPeriod   time.Duration
	// managerOptions are Cluster API's flags of the diagnostics endpoint (metrics behind
	// authentication and authorization) and of TLS.
	managerOptions        flags.ManagerOptions
	healthProbeBindAddr   string
	syncPeriod            time.Duration
	restConfigQPS         float32
	restConfigBurst       int
	webhookPort           int
	webhookCertDir        string
	enableWebhooks        bool
	dockerNetwork         string
	dockerNetworkIsolated bool
	containerSyncPeriod   time.Duration
	dockerCallTimeout     time.Duration
	watchFilterValue      string
	watchNamespace        string
	poolConcurrency       int
	machineConcurrency    int
	createConcurrency     int
	allowedHostPaths      []string
	logOptions            *logs.Options
	printVersion          bool
	// skipNameValidation lets a process start more than one manager (benchmarks); not a flag.
	skipNameValidation bool
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Enable leader election, so that only one manager is active.")
	fs.DurationVar(&o.leaderElectionLeaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long non-leader candidates wait before they force acquire leadership.")
	fs.DurationVar(&o.leaderElectionRenewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader retries refreshing leadership before it gives up.")
	fs.DurationVar(&o.leaderElectionRetryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How long candidates wait between tries of actions.")
	flags.AddManagerOptions(fs, &o.managerOptions)
	fs.StringVar(&o.healthProbeBindAddr, "health-probe-bind-address", ":9440", "Address of the health probes.")
	fs.DurationVar(&o.syncPeriod, "sync-period", 10*time.Minute, "The minimum interval at which watched objects are reconciled again.")
	fs.Float32Var(&o.restConfigQPS, "kube-api-qps", 100, "Maximum queries per second from the manager's clients to the management cluster's API server.")
	fs.IntVar(&o.restConfigBurst, "kube-api-burst", 200, "Maximum burst of queries from the manager's clients to the management cluster's API server.")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Directory of the webhook server's certificate.")
	fs.BoolVar(&o.enableWebhooks, "enable-webhooks", true, "Serve the defaulting and validating webhooks.")
	fs.StringVar(&o.dockerNetwork, "docker-network", controllers.DefaultNetwork, "Docker network of the pools' containers (kind's network by default; 'host' for tests that reach loopback API servers).")
	fs.DurationVar(&o.containerSyncPeriod, "container-sync-period", controllers.DefaultContainerSyncPeriod, "How often pools re-list their containers to notice ones removed behind the controller's back.")
	fs.BoolVar(&o.dockerNetworkIsolated, "docker-network-isolated", false, "Create a missing --docker-network without IP masquerade, so that nodes reach only the host and each other (by default it is created as kind creates it).")
	fs.DurationVar(&o.dockerCallTimeout, "docker-call-timeout", container.DefaultCallTimeout, "How long a request to the Docker engine may take (an exec's output and event streams apart); a pool whose engine does not answer reports EngineUnavailable and retries.")
	fs.StringVar(&o.watchFilterValue, "watch-filter", "", fmt.Sprintf("Only reconcile objects with the label %s set to this value.", clusterv1.WatchLabel))
	fs.StringVar(&o.watchNamespace, "namespace", "", "Namespace the manager watches; all namespaces when empty (clusterctl's multi-tenancy contract).")
	fs.IntVar(&o.poolConcurrency, "dockermachinepool-concurrency", controllers.DefaultPoolConcurrency, "Number of DockerMachinePools reconciled at once.")
	fs.IntVar(&o.machineConcurrency, "dockermachinepoolmachine-concurrency", controllers.DefaultMachineConcurrency, "Number of DockerMachinePoolMachines reconciled (bootstrapped) at once.")
	fs.IntVar(&o.createConcurrency, "container-create-concurrency", controllers.DefaultMaxConcurrentCreates, "Number of containers a DockerMachinePool creates at once.")
	fs.StringSliceVar(&o.allowedHostPaths, hostpath.Flag, hostpath.DefaultAllowed,
		"Host paths (absolute, clean, comma-separated) at or below which DockerMachinePools' extraMounts may mount; none by default. Node containers are privileged: whoever may create a pool is root over what is listed. "+
			"/, the Docker sockets, /proc, /sys, /dev, /boot, /run, /var/run, /var/lib/docker, /var/lib/containerd and /var/lib/kubelet are never allowed.")
	o.logOptions = logs.NewOptions()
	logsv1.AddFlags(o.logOptions, fs)
	fs.BoolVar(&o.printVersion, "version", false, "Print the version (set at build time: hack/version.sh) and exit.")
}

func main() {
	o := &options{}
	o.addFlags(pflag.CommandLine)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine)
	pflag.Parse()
	if o.printVersion {
		fmt.Println(version.Get().Long())
		return
	}
	if err := logsv1.ValidateAndApply(o.logOptions, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctrl.SetLogger(klog.Background())
	klog.Background().Info("Version: " + version.Get().Long())
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		klog.Background().Error(err, "Manager failed")
		os.Exit(1)
	}
}

func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme,
		controlplanev1.AddToScheme, infrav1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return scheme
}

// cacheOptions scopes the manager's cache to the namespace it watches, all when empty. It holds
// no Secret: the manager reads Secrets by name, live (client.CacheOptions.DisableFor in
// newManager), and its role may not list or watch them. Nothing the manager does reads
// managedFields (it applies nothing server-side), and a pool's reconcile reads every Machine and
// machine of the pool: the cache holds them without.
func cacheOptions(namespace string) ctrlcache.Options {
	opts := ctrlcache.Options{DefaultTransform: ctrlcache.TransformStripManagedFields()}
	if namespace != "" {
		opts.DefaultNamespaces = map[string]ctrlcache.Config{namespace: {}}
	}
	return opts
}

// clientOptions are the manager's client's: reads from the cache but for Secrets.
func clientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{
		// Secrets (bootstrap data, for every container) are read live, by name: a cached read
		// would start an informer on every Secret, which the role does not allow.
		DisableFor: []client.Object{&corev1.Secret{}},
		// Control planes are read as unstructured through the contract; serve them from the
		// informer the gate watches instead of the API server.
		Unstructured: true,
	}}
}

func run(ctx context.Context, o *options) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = o.restConfigQPS, o.restConfigBurst
	engine, err := container.NewDocker()
	if err != nil {
		return fmt.Errorf("connecting to the Docker engine: %w", err)
	}
	engine.CallTimeout = o.dockerCallTimeout
	engine.IsolatedNetworks = o.dockerNetworkIsolated
	mgr, err := newManager(ctx, o, cfg, engine)
	if err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Starting manager", "version", version.Get().String())
	return mgr.Start(ctx)
}

// The diagnostics endpoint (flags.GetManagerOptions) serves metrics over HTTPS to clients the API
// server authenticates and authorizes, as Cluster API's managers do.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// newManager wires the manager: its cache and clients, the ClusterCache, both reconcilers on
// the container runtime, the webhooks and the health checks.
func newManager(ctx context.Context, o *options, cfg *rest.Config, runtimeEngine container.Runtime) (ctrl.Manager, error) {
	hostPaths, err := hostpath.NewPolicy(o.allowedHostPaths)
	if err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("Host paths pools may mount", "allowedHostPaths", hostPaths.Allowed())
	cache := cacheOptions(o.watchNamespace)
	cache.SyncPeriod = &o.syncPeriod
	tlsOptions, metricsOptions, err := flags.GetManagerOptions(o.managerOptions)
	if err != nil {
		return nil, fmt.Errorf("reading the diagnostics and TLS flags: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Controller:                 config.Controller{SkipNameValidation: ptr.To(o.skipNameValidation)},
		Cache:                      cache,
		Scheme:                     newScheme(),
		Metrics:                    *metricsOptions,
		HealthProbeBindAddress:     o.healthProbeBindAddr,
		LeaderElection:             o.leaderElect,
		LeaderElectionID:           "controller-leader-election-capdmp",
		LeaderElectionResourceLock: resourcelock.LeasesResourceLock,
		LeaseDuration:              &o.leaderElectionLeaseDuration,
		RenewDeadline:              &o.leaderElectionRenewDeadline,
		RetryPeriod:                &o.leaderElectionRetryPeriod,
		WebhookServer:              webhook.NewServer(webhook.Options{Port: o.webhookPort, CertDir: o.webhookCertDir, TLSOpts: tlsOptions}),
		Client:                     clientOptions(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}

	clusterCache, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient:     mgr.GetAPIReader(),
		WatchFilterValue: o.watchFilterValue,
		Client:           clustercache.ClientOptions{UserAgent: "capdmp-manager", Cache: clustercache.ClientCacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	}, controller.Options{MaxConcurrentReconciles: 10})
	if err != nil {
		return nil, fmt.Errorf("setting up the ClusterCache: %w", err)
	}

	if err := (&controllers.DockerMachinePoolReconciler{
		Client:               mgr.GetClient(),
		APIReader:            mgr.GetAPIReader(),
		ClusterCache:         clusterCache,
		Runtime:              runtimeEngine,
		Network:              o.dockerNetwork,
		Proxy:                container.ProxyFromEnvironment(),
		ContainerSyncPeriod:  o.containerSyncPeriod,
		WatchFilterValue:     o.watchFilterValue,
		HostPaths:            hostPaths,
		MaxConcurrentCreates: o.createConcurrency,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.poolConcurrency}); err != nil {
		return nil, err
	}
	if err := (&controllers.DockerMachinePoolMachineReconciler{
		Client:           mgr.GetClient(),
		APIReader:        mgr.GetAPIReader(),
		Runtime:          runtimeEngine,
		ClusterCache:     clusterCache,
		WatchFilterValue: o.watchFilterValue,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.machineConcurrency}); err != nil {
		return nil, err
	}
	if o.enableWebhooks {
		if err := webhooks.SetupWebhooksWithManager(mgr, hostPaths); err != nil {
			return nil, fmt.Errorf("setting up webhooks: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	// Ready once the webhook server serves, as Cluster API's managers: a Pod that is ready
	// before would get admission requests it refuses to answer.
	readyName, ready := "ping", healthz.Ping
	if o.enableWebhooks {
		readyName, ready = "webhook", mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck(readyName, ready); err != nil {
		return nil, err
	}
	return mgr, nil
}
