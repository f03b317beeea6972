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
	kindv1 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// Suite flags, named as in Cluster API's own e2e suite.
var (
	configPath         string
	artifactFolder     string
	clusterctlConfig   string
	useExistingCluster bool
	skipCleanup        bool
)

// Suite state shared by the specs.
var (
	ctx = ctrl.SetupSignalHandler()

	// watchesCtx stops the log and event streams when the suite ends.
	watchesCtx, cancelWatches = context.WithCancel(ctx)

	e2eConfig                *clusterctl.E2EConfig
	clusterctlConfigPath     string
	bootstrapClusterProvider bootstrap.ClusterProvider
	bootstrapClusterProxy    framework.ClusterProxy
)

func init() {
	flag.StringVar(&configPath, "e2e.config", "config/capdmp.yaml", "path to the e2e config file")
	flag.StringVar(&artifactFolder, "e2e.artifacts-folder", "../../_artifacts/e2e", "folder where e2e test artifacts are stored")
	flag.StringVar(&clusterctlConfig, "e2e.clusterctl-config", "", "clusterctl config of an existing local repository (make clusterctl-repository's); empty writes one from the e2e config's providers")
	flag.BoolVar(&useExistingCluster, "e2e.use-existing-cluster", false, "use the current kubeconfig's cluster instead of creating a kind cluster")
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

	clusterctlConfigPath = clusterctlConfigOf(e2eConfig)

	By("Setting up the management cluster")
	bootstrapClusterProvider, bootstrapClusterProxy = setupBootstrapCluster(e2eConfig, initScheme())

	By("Installing Cluster API, CAPD and CAPDMP with clusterctl init")
	clusterctl.InitManagementClusterAndWatchControllerLogs(watchesCtx, clusterctl.InitManagementClusterAndWatchControllerLogsInput{
		ClusterProxy:            bootstrapClusterProxy,
		ClusterctlConfigPath:    clusterctlConfigPath,
		InfrastructureProviders: e2eConfig.InfrastructureProviders(),
		LogFolder:               filepath.Join(artifactFolder, "clusters", bootstrapClusterProxy.GetName()),
	}, e2eConfig.GetIntervals(bootstrapClusterProxy.GetName(), "wait-controllers")...)

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
	if bootstrapClusterProxy != nil {
		bootstrapClusterProxy.Dispose(ctx)
	}
	// A cluster the suite did not make (-e2e.use-existing-cluster) is left to its maker.
	if bootstrapClusterProvider != nil {
		By("Tearing down the management cluster")
		bootstrapClusterProvider.Dispose(ctx)
	}
})

func loadE2EConfig(path string) *clusterctl.E2EConfig {
	config := clusterctl.LoadE2EConfig(ctx, clusterctl.LoadE2EConfigInput{ConfigPath: path})
	Expect(config).ToNot(BeNil(), "failed to load the e2e config from %s", path)
	return config
}

// clusterctlConfigOf is the clusterctl config the specs use: -e2e.clusterctl-config's, with the e2e
// config's variables added (in a copy in the artifacts folder), or a local repository written from
// the e2e config's providers, as Cluster API's suite does.
func clusterctlConfigOf(config *clusterctl.E2EConfig) string {
	if clusterctlConfig == "" {
		By("Creating a clusterctl local repository in " + artifactFolder)
		return clusterctl.CreateRepository(ctx, clusterctl.CreateRepositoryInput{
			E2EConfig:        config,
			RepositoryFolder: filepath.Join(artifactFolder, "repository"),
		})
	}
	By("Using the clusterctl config " + clusterctlConfig + " with the e2e config's variables")
	path := filepath.Join(artifactFolder, "repository", "clusterctl-config.yaml")
	Expect(os.MkdirAll(filepath.Dir(path), 0o750)).To(Succeed())
	Expect(clusterctl.CopyAndAmendClusterctlConfig(ctx, clusterctl.CopyAndAmendClusterctlConfigInput{
		ClusterctlConfigPath: clusterctlConfig,
		OutputPath:           path,
		Variables:            config.Variables,
	})).To(Succeed())
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

// setupBootstrapCluster creates the kind management cluster, with the host's Docker socket
// mounted (CAPD and CAPDMP create containers on the host's engine) and the e2e images loaded.
func setupBootstrapCluster(config *clusterctl.E2EConfig, scheme *runtime.Scheme) (bootstrap.ClusterProvider, framework.ClusterProxy) {
	var provider bootstrap.ClusterProvider
	kubeconfigPath := ""
	if !useExistingCluster {
		ipFamily := config.GetVariableOrEmpty(IPFamily)
		if ipFamily == "" {
			ipFamily = string(kindv1.IPv4Family)
		}
		provider = bootstrap.CreateKindBootstrapClusterAndLoadImages(ctx, bootstrap.CreateKindBootstrapClusterAndLoadImagesInput{
			Name:               config.ManagementClusterName,
			KubernetesVersion:  config.MustGetVariable(KubernetesVersionManagement),
			RequiresDockerSock: true,
			Images:             config.Images,
			IPFamily:           ipFamily,
			LogFolder:          filepath.Join(artifactFolder, "kind"),
		})
		Expect(provider).ToNot(BeNil(), "failed to create the kind cluster")
		kubeconfigPath = provider.GetKubeconfigPath()
		Expect(kubeconfigPath).To(BeAnExistingFile())
	}
	proxy := framework.NewClusterProxy("bootstrap", kubeconfigPath, scheme)
	Expect(proxy).ToNot(BeNil())
	return provider, proxy
}

// createManagementCluster makes another kind management cluster the way the suite's own was made
// (hack/kind-management.sh: the node image of KUBERNETES_VERSION_MANAGEMENT, the images loaded,
// clusterctl init from the local repository), and returns it with the function that deletes it.
func createManagementCluster(ctx context.Context, name string) (framework.ClusterProxy, func()) {
	script := filepath.Join("..", "..", "hack", "kind-management.sh")
	env := append(os.Environ(),
		"KIND_MANAGEMENT_NAME="+name,
		"KIND_MANAGEMENT_NODE_IMAGE=kindest/node:"+e2eConfig.MustGetVariable(KubernetesVersionManagement),
		"KIND_MANAGEMENT_DIR="+filepath.Join(artifactFolder, "kind", name),
	)
	if clusterctlConfig != "" {
		env = append(env, "CLUSTERCTL_REPOSITORY="+filepath.Dir(clusterctlConfig))
	}
	for _, v := range []string{"EXP_MACHINE_POOL", "CLUSTER_TOPOLOGY"} {
		env = append(env, v+"="+e2eConfig.GetVariableOrEmpty(v))
	}
	run := func(action string) string {
		cmd := exec.CommandContext(ctx, script, action)
		cmd.Env, cmd.Stderr = env, GinkgoWriter
		out, err := cmd.Output()
		Expect(err).NotTo(HaveOccurred(), "%s %s of management cluster %s", script, action, name)
		return strings.TrimSpace(string(out))
	}
	kubeconfig := run("create")
	proxy := framework.NewClusterProxy(name, kubeconfig, initScheme())
	return proxy, func() {
		proxy.Dispose(ctx)
		if !skipCleanup {
			run("delete")
		}
	}
}
