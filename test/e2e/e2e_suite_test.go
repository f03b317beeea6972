//go:build e2e

package e2e

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/bootstrap"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
	capdv1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// Suite flags, named as in Cluster API's own e2e suite.
var (
	configPath         string
	artifactFolder     string
	useExistingCluster bool
	skipCleanup        bool
)

// Suite state shared by the specs.
var (
	ctx = ctrl.SetupSignalHandler()

	// watchesCtx stops the log and event streams when the suite ends.
	watchesCtx, cancelWatches = context.WithCancel(ctx)

	e2eConfig             *clusterctl.E2EConfig
	clusterctlConfigPath  string
	bootstrapClusterProxy framework.ClusterProxy
	// deleteBootstrapCluster deletes the management cluster the suite made; nil when it made none.
	deleteBootstrapCluster func()
)

func init() {
	flag.StringVar(&configPath, "e2e.config", "config/capdmp.yaml", "path to the e2e config file")
	flag.StringVar(&artifactFolder, "e2e.artifacts-folder", "../../_artifacts/e2e", "folder where e2e test artifacts are stored")
	flag.BoolVar(&useExistingCluster, "e2e.use-existing-cluster", false, "use the current kubeconfig's cluster, its images loaded, instead of creating a kind cluster")
	flag.BoolVar(&skipCleanup, "e2e.skip-resource-cleanup", false, "keep the clusters and resources the tests created")
}

func TestE2E(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	if prowArtifacts, ok := os.LookupEnv("ARTIFACTS"); ok {
		artifactFolder = prowArtifacts
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "capdmp-e2e")
}

// The kind cluster, the clusterctl repository and the providers are set up once, on the first
// parallel process, and shared by all of them.
var _ = SynchronizedBeforeSuite(func() []byte {
	Expect(configPath).To(BeAnExistingFile(), "-e2e.config must name an existing file")
	Expect(os.MkdirAll(artifactFolder, 0o750)).To(Succeed())

	By("Loading the e2e configuration from " + configPath)
	e2eConfig = loadE2EConfig(configPath)

	clusterctlConfigPath = createRepository(e2eConfig)

	if useExistingCluster {
		By("Using the current kubeconfig's cluster")
		bootstrapClusterProxy = framework.NewClusterProxy("bootstrap", "", initScheme())
		initManagementCluster(bootstrapClusterProxy)
	} else {
		bootstrapClusterProxy, deleteBootstrapCluster = createManagementCluster(ctx, e2eConfig.ManagementClusterName)
	}

	return []byte(strings.Join([]string{artifactFolder, configPath, clusterctlConfigPath, bootstrapClusterProxy.GetKubeconfigPath()}, ","))
}, func(data []byte) {
	parts := strings.Split(string(data), ",")
	Expect(parts).To(HaveLen(4))
	artifactFolder, configPath, clusterctlConfigPath = parts[0], parts[1], parts[2]
	e2eConfig = loadE2EConfig(configPath)
	bootstrapClusterProxy = framework.NewClusterProxy("bootstrap", parts[3], initScheme())
})

var _ = SynchronizedAfterSuite(func() {}, func() {
	if skipCleanup {
		return
	}
	cancelWatches()
	// A cluster the suite did not make (-e2e.use-existing-cluster) is left to its maker.
	if deleteBootstrapCluster != nil {
		By("Tearing down the management cluster")
		deleteBootstrapCluster()
	} else if bootstrapClusterProxy != nil {
		bootstrapClusterProxy.Dispose(ctx)
	}
})

func loadE2EConfig(path string) *clusterctl.E2EConfig {
	config := clusterctl.LoadE2EConfig(ctx, clusterctl.LoadE2EConfigInput{ConfigPath: path})
	Expect(config).ToNot(BeNil(), "failed to load the e2e config from %s", path)
	return config
}

// createRepository writes the local clusterctl repository the specs use, with Cluster API's e2e
// framework, from the e2e config's providers: the components make clusterctl-repository renders
// from the providers' modules with the images make images builds (a kustomize build of a module's
// config/ in the module cache and an image of a tag of this machine, which the e2e config cannot
// name), and the e2e config's variables. The framework's clusterctl config has no cert-manager
// entry, so clusterctl init would fetch cert-manager from GitHub: it names the local one
// (CERT_MANAGER_COMPONENTS).
func createRepository(config *clusterctl.E2EConfig) string {
	By("Creating a clusterctl local repository in " + artifactFolder)
	path := clusterctl.CreateRepository(ctx, clusterctl.CreateRepositoryInput{
		E2EConfig:        config,
		RepositoryFolder: filepath.Join(artifactFolder, "repository"),
	})
	certManager := config.MustGetVariable(CertManagerComponents)
	if !filepath.IsAbs(certManager) {
		certManager = filepath.Join(filepath.Dir(configPath), certManager)
	}
	certManager, err := filepath.Abs(certManager)
	Expect(err).NotTo(HaveOccurred())
	Expect(certManager).To(BeAnExistingFile(), "cert-manager's components (make clusterctl-repository)")
	raw, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	values := map[string]any{}
	Expect(yaml.Unmarshal(raw, &values)).To(Succeed())
	// The version is the folder's, as clusterctl's local repositories have it; without one
	// clusterctl looks for its own default version beside the file.
	values["cert-manager"] = map[string]any{"url": "file://" + certManager, "version": filepath.Base(filepath.Dir(certManager))}
	raw, err = yaml.Marshal(values)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(path, raw, 0o600)).To(Succeed())
	return path
}

func initScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	framework.TryAddDefaultSchemes(scheme)
	Expect(bootstrapv1.AddToScheme(scheme)).To(Succeed())
	Expect(controlplanev1.AddToScheme(scheme)).To(Succeed())
	Expect(capdv1.AddToScheme(scheme)).To(Succeed())
	Expect(infrav1.AddToScheme(scheme)).To(Succeed())
	return scheme
}

// createManagementCluster makes a kind management cluster, named name, and returns it with the
// function that deletes it: the suite's own, and the move spec's target. The kind cluster comes
// from hack/kind-management.sh, as make kind-management's does (the framework's kind provider
// cannot make it here: see the script's usage); Cluster API's e2e framework loads the e2e config's
// images into it and runs clusterctl init from the suite's repository.
func createManagementCluster(ctx context.Context, name string) (framework.ClusterProxy, func()) {
	script := filepath.Join("..", "..", "hack", "kind-management.sh")
	env := append(os.Environ(),
		"KIND_MANAGEMENT_NAME="+name,
		"KIND_MANAGEMENT_NODE_IMAGE=kindest/node:"+e2eConfig.MustGetVariable(KubernetesVersionManagement),
		"KIND_MANAGEMENT_DIR="+filepath.Join(artifactFolder, "kind", name),
	)
	run := func(action string) string {
		cmd := exec.CommandContext(ctx, script, action)
		cmd.Env, cmd.Stderr = env, GinkgoWriter
		out, err := cmd.Output()
		Expect(err).NotTo(HaveOccurred(), "%s %s of management cluster %s", script, action, name)
		return strings.TrimSpace(string(out))
	}
	By("Creating the kind cluster " + name)
	kubeconfig := run("cluster")
	remove := func() {
		if !skipCleanup {
			run("delete")
		}
	}
	By("Loading the e2e config's images into " + name)
	Expect(bootstrap.LoadImagesToKindCluster(ctx, bootstrap.LoadImagesToKindClusterInput{
		Name: name, Images: e2eConfig.Images,
	})).To(Succeed(), "loading the images into kind cluster %s", name)
	proxy := framework.NewClusterProxy(name, kubeconfig, initScheme())
	initManagementCluster(proxy)
	return proxy, func() {
		proxy.Dispose(ctx)
		remove()
	}
}

// initManagementCluster installs Cluster API, kubeadm, CAPD and CAPDMP with clusterctl init, and
// streams the controllers' logs into the artifacts.
func initManagementCluster(proxy framework.ClusterProxy) {
	By("Installing Cluster API, CAPD and CAPDMP with clusterctl init on " + proxy.GetName())
	clusterctl.InitManagementClusterAndWatchControllerLogs(watchesCtx, clusterctl.InitManagementClusterAndWatchControllerLogsInput{
		ClusterProxy:            proxy,
		ClusterctlConfigPath:    clusterctlConfigPath,
		InfrastructureProviders: e2eConfig.InfrastructureProviders(),
		LogFolder:               filepath.Join(artifactFolder, "clusters", proxy.GetName()),
	}, e2eConfig.GetIntervals(proxy.GetName(), "wait-controllers")...)
}
