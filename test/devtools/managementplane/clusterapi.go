package managementplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/utils/ptr"
	bootstrapadmission "sigs.k8s.io/cluster-api/bootstrap/kubeadm/webhooks/admission"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	kcpreconciler "sigs.k8s.io/cluster-api/controlplane/kubeadm/reconcilers/kubeadmcontrolplane"
	kcpsetup "sigs.k8s.io/cluster-api/controlplane/kubeadm/setup"
	controlplaneadmission "sigs.k8s.io/cluster-api/controlplane/kubeadm/webhooks/admission"
	controlplaneconversion "sigs.k8s.io/cluster-api/controlplane/kubeadm/webhooks/conversion"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	"sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	coresetup "sigs.k8s.io/cluster-api/core/setup"
	coreadmission "sigs.k8s.io/cluster-api/core/webhooks/admission"
	coreconversion "sigs.k8s.io/cluster-api/core/webhooks/conversion"
	capdcontainer "sigs.k8s.io/cluster-api/test/infrastructure/container"
	capdcontrollers "sigs.k8s.io/cluster-api/test/infrastructure/docker/controllers"
	capdwebhooks "sigs.k8s.io/cluster-api/test/infrastructure/docker/webhooks"
	"sigs.k8s.io/cluster-api/util/contract"
	"sigs.k8s.io/cluster-api/util/index"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/capdmp/capdmp/internal/test/apiserver"
	"github.com/capdmp/capdmp/internal/test/testenv"
)

// ClusterAPIOptions configure the in-process Cluster API controllers.
type ClusterAPIOptions struct {
	// TokenTTL is CABPK's bootstrap token TTL (its manager's --bootstrap-token-ttl, 15 minutes by
	// default).
	TokenTTL time.Duration
	// Logger receives the controllers' logs.
	Logger logr.Logger
}

// ClusterAPI is what a management cluster runs besides CAPDMP, in this process and one manager:
// Cluster API's core controllers (Cluster, Machine, MachineSet, MachineDeployment, MachinePool,
// MachineHealthCheck, with their ClusterCache), KubeadmControlPlane, KubeadmConfig and CAPD's
// DockerCluster, DockerMachine and DockerMachinePool, and the webhooks of all of them.
type ClusterAPI struct {
	// Reader reads from the manager's informers.
	Reader client.Reader
	stop   context.CancelFunc
	done   chan error
}

// StartClusterAPI starts the controllers and serves the webhooks apiserver.StartAPIServer installed, and
// returns once the webhook server answers.
func StartClusterAPI(s *apiserver.APIServer, o ClusterAPIOptions) (*ClusterAPI, error) {
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), o.Logger))
	c := &ClusterAPI{stop: cancel, done: make(chan error, 1)}
	mgr, err := ctrl.NewManager(s.Config, ctrl.Options{
		Scheme:  s.Scheme,
		Logger:  o.Logger,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Client: client.Options{Cache: &client.CacheOptions{
			DisableFor: []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}},
		}},
		WebhookServer: webhook.NewServer(webhook.Options{Host: s.WebhookHost, Port: s.WebhookPort, CertDir: s.WebhookCertDir}),
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("creating the Cluster API manager: %w", err)
	}
	if err := setupClusterAPI(ctx, mgr, o); err != nil {
		cancel()
		return nil, err
	}
	go func() { c.done <- mgr.Start(ctx) }()
	c.Reader = mgr.GetClient()
	if s.WebhookPort != 0 {
		if err := apiserver.WaitServing(ctx, net.JoinHostPort(s.WebhookHost, strconv.Itoa(s.WebhookPort)), s.WebhookCA, time.Minute); err != nil {
			return nil, errors.Join(fmt.Errorf("waiting for Cluster API's webhooks: %w", err), c.Stop())
		}
	}
	return c, nil
}

// Stop stops the controllers and the webhook server.
func (c *ClusterAPI) Stop() error {
	if c == nil {
		return nil
	}
	c.stop()
	return <-c.done
}

func setupClusterAPI(ctx context.Context, mgr ctrl.Manager, o ClusterAPIOptions) error {
	// Controller names are unique per process unless told otherwise: a process may stop this
	// plane and start another (the tests do).
	opts := controller.Options{MaxConcurrentReconciles: 10, SkipNameValidation: ptr.To(true)}
	// Reads Secrets from the manager's cache, as Cluster API's managers give KCP, CABPK and the
	// ClusterCache (the manager's own client reads them live).
	secrets, err := kcpsetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return fmt.Errorf("creating the Secret caching client: %w", err)
	}
	// One ClusterCache serves every reconciler here; core's options (Pods read live, as drain
	// needs) suit KCP too, which then reads its static pods from the API server.
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secrets,
		Cache:        coresetup.ClusterCacheCacheOptions(),
		Client:       coresetup.ClusterCacheClientOptions("capdmp-management-plane", 20, 30),
	}, opts)
	if err != nil {
		return fmt.Errorf("setting up the ClusterCache: %w", err)
	}
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		return err
	}
	runtime, err := capdcontainer.NewDockerClient()
	if err != nil {
		return fmt.Errorf("connecting CAPD to the Docker engine: %w", err)
	}
	// KCP's etcd client logs retries of members that are joining or leaving at warning level;
	// the controllers' own log says what matters.
	etcdLogger := zap.NewNop()
	setups := []struct {
		name  string
		setup func() error
	}{
		{"MachineSet", func() error {
			return (&machineset.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc}).SetupWithManager(ctx, mgr, opts)
		}},
		{"MachineDeployment", func() error {
			return (&machinedeployment.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(ctx, mgr, opts)
		}},
		{"KubeadmControlPlane", func() error {
			o := opts
			o.ReconciliationTimeout = 3 * time.Minute // KCP talks to every etcd member
			return (&kcpreconciler.Reconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), SecretCachingClient: secrets, ClusterCache: cc,
				EtcdDialTimeout: 10 * time.Second, EtcdCallTimeout: 15 * time.Second, EtcdLogger: etcdLogger,
				RemoteConditionsGracePeriod: 5 * time.Minute,
			}).SetupWithManager(ctx, mgr, o)
		}},
		{"DockerCluster", func() error {
			return (&capdcontrollers.DockerClusterReconciler{Client: mgr.GetClient(), ContainerRuntime: runtime}).SetupWithManager(ctx, mgr, opts)
		}},
		// Upstream's DockerMachinePool, which has no version-skew gate: the conformance kit's
		// other provider.
		{"DockerMachinePool", func() error {
			return (&capdcontrollers.DockerMachinePoolReconciler{Client: mgr.GetClient(), ContainerRuntime: runtime}).SetupWithManager(ctx, mgr, opts)
		}},
		{"DockerMachine", func() error {
			return (&capdcontrollers.DockerMachineReconciler{Client: mgr.GetClient(), ContainerRuntime: runtime, ClusterCache: cc}).SetupWithManager(ctx, mgr, opts)
		}},
		{"core", func() error { return testenv.SetupCoreReconcilers(ctx, mgr, cc, secrets, opts, o.TokenTTL) }},
		{"webhooks", func() error { return setupClusterAPIWebhooks(mgr, cc) }},
	}
	for _, s := range setups {
		if err := s.setup(); err != nil {
			return fmt.Errorf("setting up %s: %w", s.name, err)
		}
	}
	return nil
}

// setupClusterAPIWebhooks registers the webhooks the providers' managers serve (their main.go's
// setupWebhooks): admission, and conversion between Cluster API's v1beta1 and v1beta2, against
// the configurations apiserver.StartAPIServer installed.
func setupClusterAPIWebhooks(mgr ctrl.Manager, cc clustercache.ClusterCache) error {
	// Converting to v1beta1 writes the apiVersion of each reference, which the webhooks ask for.
	apiVersion := func(ctx context.Context, gk schema.GroupKind) (string, error) {
		return contractAPIVersion(ctx, mgr.GetClient(), gk)
	}
	coreconversion.SetAPIVersionGetter(apiVersion)
	controlplaneconversion.SetAPIVersionGetter(apiVersion)
	for _, hook := range []interface{ SetupWebhookWithManager(ctrl.Manager) error }{
		&coreadmission.ClusterClass{Client: mgr.GetClient()},
		&coreadmission.Cluster{Client: mgr.GetClient(), ClusterCacheReader: cc},
		&coreadmission.Machine{},
		&coreadmission.MachineSet{},
		&coreadmission.MachineDeployment{},
		&coreadmission.MachineDrainRule{},
		&coreadmission.MachinePool{},
		&coreadmission.ClusterResourceSet{},
		&coreadmission.ClusterResourceSetBinding{},
		&coreadmission.MachineHealthCheck{},
		&coreadmission.ExtensionConfig{},
		&coreadmission.IPAddress{Client: mgr.GetAPIReader()},
		&coreadmission.IPAddressClaim{},
		&bootstrapadmission.KubeadmConfig{},
		&bootstrapadmission.KubeadmConfigTemplate{},
		&controlplaneadmission.KubeadmControlPlane{},
		&controlplaneadmission.ScaleValidator{Client: mgr.GetClient()},
		&controlplaneadmission.KubeadmControlPlaneTemplate{},
		&capdwebhooks.DockerCluster{},
		&capdwebhooks.DockerClusterTemplate{},
		&capdwebhooks.DockerMachine{},
		&capdwebhooks.DockerMachineTemplate{},
	} {
		if err := hook.SetupWebhookWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the %T webhook: %w", hook, err)
		}
	}
	return nil
}

// contractAPIVersion is the apiVersion of kind gk that serves the v1beta2 contract, newest first,
// from its CRD's contract label: what Cluster API's managers answer the conversion webhooks with
// (internal/contract.GetAPIVersion of its module, which other modules cannot import).
func contractAPIVersion(ctx context.Context, c client.Reader, gk schema.GroupKind) (string, error) {
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := c.Get(ctx, client.ObjectKey{Name: contract.CalculateCRDName(gk.Group, gk.Kind)}, crd); err != nil {
		return "", fmt.Errorf("reading the CRD of %s: %w", gk, err)
	}
	versions := strings.Split(crd.GetLabels()[apiserver.ContractLabel], "_")
	slices.SortFunc(versions, version.CompareKubeAwareVersionStrings)
	if latest := versions[len(versions)-1]; latest != "" {
		return schema.GroupVersion{Group: gk.Group, Version: latest}.String(), nil
	}
	return "", fmt.Errorf("the CRD of %s has no %s label", gk, apiserver.ContractLabel)
}
