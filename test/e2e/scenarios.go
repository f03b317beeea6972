//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/clusterops"
	"github.com/capdmp/capdmp/pkg/conformance"
	capdmpframework "github.com/capdmp/capdmp/test/framework"
)

// ScenarioSpecInput is the input of ScenarioSpec.
type ScenarioSpecInput struct {
	E2EConfig             *clusterctl.E2EConfig
	ClusterctlConfigPath  string
	BootstrapClusterProxy framework.ClusterProxy
	ArtifactFolder        string
	SkipCleanup           bool

	// Scenario is the name of a scenario of pkg/conformance's table.
	Scenario string
	// Flavor of CAPDMP's cluster templates; "machinepool" when empty.
	Flavor string
}

// ScenarioSpec runs one scenario of pkg/conformance's table, the one every CAPDMP tier runs, on a
// workload cluster made with clusterctl from CAPDMP's templates in the scenario's shape at the
// oldest version it needs (KUBERNETES_VERSION_UPGRADE_FROM, then _TO; a chain of three versions
// also needs KUBERNETES_VERSION_UPGRADE_TO_NEXT). The monitor is the other tiers' one
// (test/framework): it asks each control-plane node's kube-apiserver its version at the node's
// own address, then reads the pool's containers and Nodes; a sample no kube-apiserver answered is
// counted apart, and the spec fails on any violation of the skew policy or a monitor that judged
// nothing. The provider is restarted by deleting its manager's Pods.
func ScenarioSpec(ctx context.Context, inputGetter func() ScenarioSpecInput) {
	var (
		input            ScenarioSpecInput
		specName         string
		namespace        *corev1.Namespace
		cancelWatches    context.CancelFunc
		clusterResources *clusterctl.ApplyClusterTemplateAndWaitResult
	)

	BeforeEach(func() {
		Expect(ctx).NotTo(BeNil(), "ctx is required for the scenario spec")
		input = inputGetter()
		// The namespace and the cluster are named after the scenario, whose '/' no object name may hold.
		specName = strings.ReplaceAll(input.Scenario, "/", "-")
		Expect(input.E2EConfig).ToNot(BeNil(), "Invalid argument. input.E2EConfig can't be nil when calling %s spec", specName)
		Expect(input.ClusterctlConfigPath).To(BeAnExistingFile(), "Invalid argument. input.ClusterctlConfigPath must be an existing file when calling %s spec", specName)
		Expect(input.BootstrapClusterProxy).ToNot(BeNil(), "Invalid argument. input.BootstrapClusterProxy can't be nil when calling %s spec", specName)
		Expect(os.MkdirAll(input.ArtifactFolder, 0o750)).To(Succeed(), "Invalid argument. input.ArtifactFolder can't be created for %s spec", specName)
		namespace, cancelWatches = framework.SetupSpecNamespace(ctx, specName, input.BootstrapClusterProxy, input.ArtifactFolder, nil)
		clusterResources = new(clusterctl.ApplyClusterTemplateAndWaitResult)
	})

	It("Should keep every kubelet within the skew policy of the kube-apiservers", func() {
		sc, ok := conformance.Lookup(input.Scenario)
		Expect(ok).To(BeTrue(), "pkg/conformance's table has no scenario %q", input.Scenario)
		versions := []string{input.E2EConfig.MustGetVariable(KubernetesVersionUpgradeFrom), input.E2EConfig.MustGetVariable(KubernetesVersionUpgradeTo)}
		if sc.Shape.Versions > 2 {
			if !input.E2EConfig.HasVariable(KubernetesVersionUpgradeToNext) {
				Skip(fmt.Sprintf("scenario %s needs %s", sc.Name, KubernetesVersionUpgradeToNext))
			}
			versions = append(versions, input.E2EConfig.MustGetVariable(KubernetesVersionUpgradeToNext))
		}
		from, err := sc.From(versions)
		Expect(err).NotTo(HaveOccurred())
		flavor := input.Flavor
		if flavor == "" {
			flavor = "machinepool"
		}

		By(fmt.Sprintf("Creating a workload cluster at %s: control plane x%d, CAPDMP MachinePool x%d", from, sc.Shape.ControlPlaneReplicas, sc.Shape.PoolReplicas))
		clusterctl.ApplyClusterTemplateAndWait(ctx, clusterctl.ApplyClusterTemplateAndWaitInput{
			ClusterProxy: input.BootstrapClusterProxy,
			ConfigCluster: clusterctl.ConfigClusterInput{
				LogFolder:                filepath.Join(input.ArtifactFolder, "clusters", input.BootstrapClusterProxy.GetName()),
				ClusterctlConfigPath:     input.ClusterctlConfigPath,
				KubeconfigPath:           input.BootstrapClusterProxy.GetKubeconfigPath(),
				InfrastructureProvider:   capdmpProvider,
				Flavor:                   flavor,
				Namespace:                namespace.Name,
				ClusterName:              fmt.Sprintf("%s-%s", specName, util.RandomString(6)),
				KubernetesVersion:        from,
				ControlPlaneMachineCount: ptr.To(int64(sc.Shape.ControlPlaneReplicas)),
				WorkerMachineCount:       ptr.To(int64(sc.Shape.PoolReplicas)),
			},
			CNIManifestPath:              input.E2EConfig.MustGetVariable(CNIPath),
			WaitForClusterIntervals:      input.E2EConfig.GetIntervals(specName, "wait-cluster"),
			WaitForControlPlaneIntervals: input.E2EConfig.GetIntervals(specName, "wait-control-plane"),
			WaitForMachinePools:          input.E2EConfig.GetIntervals(specName, "wait-machine-pool-nodes"),
		}, clusterResources)
		Expect(clusterResources.MachinePools).To(HaveLen(1), "the %q flavor must create one MachinePool", flavor)
		world, err := capdmpframework.Attach(input.BootstrapClusterProxy.GetKubeconfigPath(), os.Getenv("DOCKER_HOST"))
		Expect(err).NotTo(HaveOccurred(), "reaching the management cluster and the Docker engine (DOCKER_HOST) the workload nodes run on")
		defer world.Stop()
		c := deployedCluster{Cluster: world.Cluster(clusterResources.Cluster.Namespace, clusterResources.Cluster.Name)}
		Expect(c.MachinePool()).To(Equal(client.ObjectKeyFromObject(clusterResources.MachinePools[0])), "the flavor's MachinePool is named as test/framework expects")
		// deployedCluster offers every capability the table asks for: one missing is a bug here.
		ok, missing := sc.RunnableOn(c)
		Expect(ok).To(BeTrue(), "scenario %s needs %v of the deployed cluster", sc.Name, missing)
		if sc.Shape.CustomImage {
			Expect(c.SetImage(ctx, from)).To(Succeed())
		}

		By("Running scenario " + sc.Name + ": " + sc.Doc)
		budget := func(name string) time.Duration {
			intervals := input.E2EConfig.GetIntervals(specName, name)
			d, err := time.ParseDuration(intervals[0].(string))
			Expect(err).NotTo(HaveOccurred(), "interval %s", name)
			return d
		}
		start := time.Now()
		report, err := sc.Run(ctx, c, conformance.Options{
			Versions: versions, Interval: 100 * time.Millisecond, TokenTTL: 15 * time.Minute,
			Budgets: conformance.Budgets{
				ClusterReady: budget("wait-control-plane"), ControlPlaneMachine: budget("wait-control-plane"),
				ControlPlaneUpgrade: budget("wait-control-plane-upgrade"), PoolUpgrade: budget("wait-machine-pool-upgrade"),
				Gate: budget("wait-version-gate"), Settle: 30 * time.Second,
			},
			Logf:     func(format string, args ...any) { Byf(format, args...) },
			OnChange: func(x conformance.Sample) { timeline(start, x) },
		})
		for _, l := range report.Latencies {
			Byf("gate re-open to %s: %s after the last older kube-apiserver, %s after the control plane's status.versions",
				l.Target, l.FromAPIServers.Round(10*time.Millisecond), l.FromStatus.Round(10*time.Millisecond))
		}
		for _, v := range report.Violations[:min(len(report.Violations), 5)] {
			Byf("VIOLATION %s", v)
		}
		Byf("monitor: %s", report.Coverage)
		Expect(err).NotTo(HaveOccurred())
		Expect(report.Violations).To(BeEmpty(), "no kubelet breaks the skew policy")
		Expect(report.Coverage.Blind()).To(BeEmpty(), "the monitor judged most samples")
	})

	AfterEach(func() {
		framework.DumpSpecResourcesAndCleanup(ctx, specName, input.BootstrapClusterProxy, input.ClusterctlConfigPath, input.ArtifactFolder,
			namespace, cancelWatches, clusterResources.Cluster, input.E2EConfig.GetIntervals, input.SkipCleanup)
	})
}

// Byf is By with a format.
func Byf(format string, args ...any) { By(fmt.Sprintf(format, args...)) }

// timeline writes a sample that differs from the one before to the spec's output.
func timeline(start time.Time, x conformance.Sample) {
	_, _ = fmt.Fprintf(GinkgoWriter, "  %7.1fs  %s\n", x.At.Sub(start).Seconds(), x)
}

// deployedCluster is a scenario's cluster on the deployed management cluster: test/framework's
// Cluster, reached through the management cluster's kubeconfig, whose provider restarts the way
// a deployed one does.
type deployedCluster struct {
	*capdmpframework.Cluster
}

// RestartProvider deletes the CAPDMP manager's Pods, as a node drain or an OOM kill would, and
// waits until a new one is ready.
func (c deployedCluster) RestartProvider(ctx context.Context) error {
	manager := client.MatchingLabels{"control-plane": "controller-manager"}
	inNamespace := client.InNamespace(capdmpNamespace)
	restartedAt := time.Now()
	if err := c.Management.DeleteAllOf(ctx, &corev1.Pod{}, inNamespace, manager); err != nil {
		return fmt.Errorf("deleting the CAPDMP manager's Pods: %w", err)
	}
	return clusterops.WaitFor(ctx, 5*time.Minute, nil, func(ctx context.Context) (bool, string, error) {
		pods := &corev1.PodList{}
		if err := c.Management.List(ctx, pods, inNamespace, manager); err != nil {
			return false, "", err
		}
		for _, p := range pods.Items {
			if p.CreationTimestamp.After(restartedAt.Add(-time.Second)) && p.Status.Phase == corev1.PodRunning &&
				slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
					return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
				}) {
				return true, "a new manager Pod is ready", nil
			}
		}
		return false, fmt.Sprintf("%d manager Pods, none new and ready", len(pods.Items)), nil
	})
}

// capdmpNamespace is where CAPDMP's components deploy its manager.
const capdmpNamespace = "capdmp-system"
