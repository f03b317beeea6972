//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
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
// also needs KUBERNETES_VERSION_UPGRADE_TO_NEXT). The monitor samples the control-plane Nodes'
// kubelets (kubeadm installs the kube-apiserver of the same version beside each) before the pool's
// instances and worker Nodes, and the spec fails on any violation of the skew policy or a monitor
// that judged nothing. The provider is restarted by deleting its manager's Pods.
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
		specName = input.Scenario
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
				InfrastructureProvider:   "capdmp",
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
		mp := clusterResources.MachinePools[0]
		c := deployedCluster{
			CAPDMPPool: &capdmpframework.CAPDMPPool{Management: input.BootstrapClusterProxy.GetClient(),
				Key: client.ObjectKeyFromObject(mp), ClusterName: clusterResources.Cluster.Name},
			workload: input.BootstrapClusterProxy.GetWorkloadCluster(ctx, clusterResources.Cluster.Namespace, clusterResources.Cluster.Name).GetClient(),
		}
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
		report, err := sc.Run(ctx, c, conformance.Options{
			Versions: versions, Interval: time.Second, TokenTTL: 15 * time.Minute,
			Budgets: conformance.Budgets{
				ClusterReady: budget("wait-control-plane"), ControlPlaneMachine: budget("wait-control-plane"),
				ControlPlaneUpgrade: budget("wait-control-plane-upgrade"), PoolUpgrade: budget("wait-machine-pool-upgrade"),
				Gate: budget("wait-version-gate"), Settle: 30 * time.Second,
			},
			Logf: func(format string, args ...any) { Byf(format, args...) },
		})
		Byf("monitor: %s; re-open latencies %v", report.Monitor.Coverage, report.Latencies)
		Expect(err).NotTo(HaveOccurred())
		Expect(report.Monitor.Violations).To(BeEmpty(), "no kubelet breaks the skew policy")
	})

	AfterEach(func() {
		framework.DumpSpecResourcesAndCleanup(ctx, specName, input.BootstrapClusterProxy, input.ClusterctlConfigPath, input.ArtifactFolder,
			namespace, cancelWatches, clusterResources.Cluster, input.E2EConfig.GetIntervals, input.SkipCleanup)
	})
}

// Byf is By with a format.
func Byf(format string, args ...any) { By(fmt.Sprintf(format, args...)) }

// deployedCluster is a scenario's cluster in a deployed management cluster: CAPDMP's pool read
// through the management API (the pool's status lists its instances), and the workload cluster's
// Nodes for the monitor.
type deployedCluster struct {
	*capdmpframework.CAPDMPPool
	workload client.Client
}

// Instances are the instances the DockerMachinePool's status lists.
func (c deployedCluster) Instances(ctx context.Context) ([]conformance.Instance, error) {
	pool := &infrav1.DockerMachinePool{}
	if err := c.Management.Get(ctx, c.Key, pool); err != nil {
		return nil, err
	}
	instances := make([]conformance.Instance, 0, len(pool.Status.Instances))
	for _, i := range pool.Status.Instances {
		instances = append(instances, conformance.Instance{Name: i.InstanceName, Version: i.Version})
	}
	return instances, nil
}

// RestartProvider deletes the CAPDMP manager's Pods, as a node drain or an OOM kill would, and
// waits until its Deployment is available again with new Pods.
func (c deployedCluster) RestartProvider(ctx context.Context) error {
	manager := client.MatchingLabels{"control-plane": "controller-manager"}
	inNamespace := client.InNamespace(capdmpNamespace)
	restartedAt := time.Now()
	if err := c.Management.DeleteAllOf(ctx, &corev1.Pod{}, inNamespace, manager); err != nil {
		return fmt.Errorf("deleting the CAPDMP manager's Pods: %w", err)
	}
	return conformance.WaitFor(ctx, 5*time.Minute, nil, func(ctx context.Context) (bool, string, error) {
		pods := &corev1.PodList{}
		if err := c.Management.List(ctx, pods, inNamespace, manager); err != nil {
			return false, "", err
		}
		for _, p := range pods.Items {
			if p.CreationTimestamp.Time.After(restartedAt.Add(-time.Second)) && p.Status.Phase == corev1.PodRunning &&
				slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
					return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
				}) {
				return true, "a new manager Pod is ready", nil
			}
		}
		return false, fmt.Sprintf("%d manager Pods, none new and ready", len(pods.Items)), nil
	})
}

// capdmpNamespace is where config/default deploys the CAPDMP manager.
const capdmpNamespace = "capdmp-system"

// MakeVersionAvailable does nothing: the e2e config's images are loaded into kind before the suite.
func (c deployedCluster) MakeVersionAvailable(context.Context, string) error { return nil }

// Source implements conformance.Observer.
func (c deployedCluster) Source() conformance.Source { return c }

// Observe reads the control-plane Nodes' kubelets (each beside a kube-apiserver of its version)
// before the pool's instances and the worker Nodes.
func (c deployedCluster) Observe(ctx context.Context) (conformance.Sample, error) {
	nodes := &corev1.NodeList{}
	if err := c.workload.List(ctx, nodes); err != nil {
		return conformance.Sample{}, err
	}
	s := conformance.Sample{}
	for _, n := range nodes.Items {
		if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; ok {
			s.APIServers = append(s.APIServers, n.Status.NodeInfo.KubeletVersion)
		}
	}
	instances, err := c.Instances(ctx)
	if err != nil {
		return conformance.Sample{}, err
	}
	for _, i := range instances {
		s.Instances = append(s.Instances, i.Version)
	}
	for _, n := range nodes.Items {
		if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; !ok {
			s.Kubelets = append(s.Kubelets, n.Status.NodeInfo.KubeletVersion)
		}
	}
	s.Gate, _, _ = c.Gate(ctx)
	return s, nil
}
