//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/pkg/skew"
)

// UpgradeBothAtOnceSpecInput is the input of UpgradeBothAtOnceSpec.
type UpgradeBothAtOnceSpecInput struct {
	E2EConfig             *clusterctl.E2EConfig
	ClusterctlConfigPath  string
	BootstrapClusterProxy framework.ClusterProxy
	ArtifactFolder        string
	SkipCleanup           bool

	// Flavor of CAPDMP's cluster templates; "machinepool" when empty.
	Flavor string
	// ControlPlaneMachineCount defaults to 1, WorkerMachineCount (the MachinePool's replicas) to 2.
	ControlPlaneMachineCount *int64
	WorkerMachineCount       *int64
}

// UpgradeBothAtOnceSpec is the scenario CAPDMP exists for: a workload cluster whose workers are a
// CAPDMP MachinePool is created at KUBERNETES_VERSION_UPGRADE_FROM, then the KubeadmControlPlane
// and the MachinePool get KUBERNETES_VERSION_UPGRADE_TO in the same apply, as a GitOps tool or a
// Helm chart would write them. It checks that
//   - the pool's version-skew gate waits (ControlPlaneOlder) while the control plane is older;
//   - no worker Node ever runs a kubelet newer than the oldest control-plane Node, sampled on the
//     workload cluster during the whole rollout;
//   - the control plane, then every instance of the pool, ends at the new version.
func UpgradeBothAtOnceSpec(ctx context.Context, inputGetter func() UpgradeBothAtOnceSpecInput) {
	const specName = "upgrade-both-at-once"
	var (
		input            UpgradeBothAtOnceSpecInput
		namespace        *corev1.Namespace
		cancelWatches    context.CancelFunc
		clusterResources *clusterctl.ApplyClusterTemplateAndWaitResult
	)

	BeforeEach(func() {
		Expect(ctx).NotTo(BeNil(), "ctx is required for %s spec", specName)
		input = inputGetter()
		Expect(input.E2EConfig).ToNot(BeNil(), "Invalid argument. input.E2EConfig can't be nil when calling %s spec", specName)
		Expect(input.ClusterctlConfigPath).To(BeAnExistingFile(), "Invalid argument. input.ClusterctlConfigPath must be an existing file when calling %s spec", specName)
		Expect(input.BootstrapClusterProxy).ToNot(BeNil(), "Invalid argument. input.BootstrapClusterProxy can't be nil when calling %s spec", specName)
		Expect(os.MkdirAll(input.ArtifactFolder, 0o750)).To(Succeed(), "Invalid argument. input.ArtifactFolder can't be created for %s spec", specName)
		Expect(input.E2EConfig.Variables).To(HaveKey(KubernetesVersionUpgradeFrom))
		Expect(input.E2EConfig.Variables).To(HaveKey(KubernetesVersionUpgradeTo))

		namespace, cancelWatches = framework.SetupSpecNamespace(ctx, specName, input.BootstrapClusterProxy, input.ArtifactFolder, nil)
		clusterResources = new(clusterctl.ApplyClusterTemplateAndWaitResult)
	})

	It("Should hold the MachinePool's new version until the control plane runs it, then upgrade both", func() {
		fromVersion := input.E2EConfig.MustGetVariable(KubernetesVersionUpgradeFrom)
		toVersion := input.E2EConfig.MustGetVariable(KubernetesVersionUpgradeTo)
		flavor := input.Flavor
		if flavor == "" {
			flavor = "machinepool"
		}
		mgmtClient := input.BootstrapClusterProxy.GetClient()

		By("Creating a workload cluster at " + fromVersion + " with a CAPDMP MachinePool")
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
				KubernetesVersion:        fromVersion,
				ControlPlaneMachineCount: ptr.To(ptr.Deref(input.ControlPlaneMachineCount, 1)),
				WorkerMachineCount:       ptr.To(ptr.Deref(input.WorkerMachineCount, 2)),
			},
			CNIManifestPath:              input.E2EConfig.MustGetVariable(CNIPath),
			WaitForClusterIntervals:      input.E2EConfig.GetIntervals(specName, "wait-cluster"),
			WaitForControlPlaneIntervals: input.E2EConfig.GetIntervals(specName, "wait-control-plane"),
			WaitForMachinePools:          input.E2EConfig.GetIntervals(specName, "wait-machine-pool-nodes"),
		}, clusterResources)
		cluster := clusterResources.Cluster
		Expect(clusterResources.ControlPlane).ToNot(BeNil())
		Expect(clusterResources.MachinePools).ToNot(BeEmpty(), "the %q flavor must create a MachinePool", flavor)

		By("Sampling the version skew of the workload cluster's Nodes during the rollout")
		workloadClient := input.BootstrapClusterProxy.GetWorkloadCluster(ctx, cluster.Namespace, cluster.Name).GetClient()
		stopSampling := sampleNodeSkew(ctx, workloadClient, 5*time.Second)

		By("Setting " + toVersion + " on the KubeadmControlPlane and the MachinePools at once")
		controlPlane := clusterResources.ControlPlane
		cpPatch, err := patch.NewHelper(controlPlane, mgmtClient)
		Expect(err).ToNot(HaveOccurred())
		controlPlane.Spec.Version = toVersion
		Expect(cpPatch.Patch(ctx, controlPlane)).To(Succeed())
		for _, mp := range clusterResources.MachinePools {
			mpPatch, err := patch.NewHelper(mp, mgmtClient)
			Expect(err).ToNot(HaveOccurred())
			mp.Spec.Template.Spec.Version = toVersion
			Expect(mpPatch.Patch(ctx, mp)).To(Succeed())
		}

		By("Checking that each pool's version-skew gate waits for the control plane")
		for _, mp := range clusterResources.MachinePools {
			Eventually(func(g Gomega) {
				pool := &infrav1.DockerMachinePool{}
				key := client.ObjectKey{Namespace: mp.Namespace, Name: mp.Spec.Template.Spec.InfrastructureRef.Name}
				g.Expect(mgmtClient.Get(ctx, key, pool)).To(Succeed())
				g.Expect(pool.Status.VersionGate.WaitingReason).To(Equal(string(skew.ControlPlaneOlder)))
			}, input.E2EConfig.GetIntervals(specName, "wait-version-gate")...).Should(Succeed(),
				"the version-skew gate of MachinePool %s never reported %s", mp.Name, skew.ControlPlaneOlder)
		}

		By("Waiting for the control plane to run " + toVersion)
		framework.WaitForControlPlaneMachinesToBeUpgraded(ctx, framework.WaitForControlPlaneMachinesToBeUpgradedInput{
			Lister:                   mgmtClient,
			Cluster:                  cluster,
			MachineCount:             int(ptr.Deref(controlPlane.Spec.Replicas, 1)),
			KubernetesUpgradeVersion: toVersion,
		}, input.E2EConfig.GetIntervals(specName, "wait-control-plane-upgrade")...)

		By("Waiting for every MachinePool instance to run " + toVersion)
		for _, mp := range clusterResources.MachinePools {
			framework.WaitForMachinePoolInstancesToBeUpgraded(ctx, framework.WaitForMachinePoolInstancesToBeUpgradedInput{
				Getter:                   mgmtClient,
				WorkloadClusterGetter:    workloadClient,
				Cluster:                  cluster,
				MachineCount:             int(ptr.Deref(mp.Spec.Replicas, 0)),
				KubernetesUpgradeVersion: toVersion,
				MachinePool:              mp,
			}, input.E2EConfig.GetIntervals(specName, "wait-machine-pool-upgrade")...)
		}

		By("Checking that no worker ever ran a kubelet newer than the oldest control-plane Node")
		Expect(stopSampling()).To(BeEmpty())
	})

	AfterEach(func() {
		framework.DumpSpecResourcesAndCleanup(ctx, specName, input.BootstrapClusterProxy, input.ClusterctlConfigPath, input.ArtifactFolder,
			namespace, cancelWatches, clusterResources.Cluster, input.E2EConfig.GetIntervals, input.SkipCleanup)
	})
}

// sampleNodeSkew lists the workload cluster's Nodes every interval until the returned function is
// called; that function returns every sample where a worker's kubelet was newer than the oldest
// control-plane Node's (on kubeadm nodes, the kubelet and the API server of a control-plane Node
// share its version). Listing errors are skipped: API servers restart during the rollout.
func sampleNodeSkew(ctx context.Context, c client.Client, interval time.Duration) func() []string {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu         sync.Mutex
		violations []string
		done       = make(chan struct{})
	)
	go func() {
		defer GinkgoRecover()
		defer close(done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			nodes := &corev1.NodeList{}
			if err := c.List(ctx, nodes); err == nil {
				if v := skewViolation(nodes.Items); v != "" {
					mu.Lock()
					violations = append(violations, v)
					mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	return func() []string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return violations
	}
}

// skewViolation describes the worker Nodes whose kubelets break the skew policy against the
// control-plane Nodes' (the kube-apiservers' versions, as kubeadm installs them together), with
// the one rule of pkg/skew, or returns "" when there is none.
func skewViolation(nodes []corev1.Node) string {
	var controlPlane, workers []string
	names := map[string][]string{}
	for i := range nodes {
		v := nodes[i].Status.NodeInfo.KubeletVersion
		if _, ok := nodes[i].Labels["node-role.kubernetes.io/control-plane"]; ok {
			controlPlane = append(controlPlane, v)
			continue
		}
		workers = append(workers, v)
		names[v] = append(names[v], nodes[i].Name)
	}
	violations, err := skew.Violations(workers, controlPlane)
	if err != nil {
		return fmt.Sprintf("%s: %v", time.Now().Format(time.RFC3339), err)
	}
	var problems []string
	for _, v := range violations {
		problems = append(problems, fmt.Sprintf("workers %v: %s", names[v.Kubelet], v))
	}
	if len(problems) == 0 {
		return ""
	}
	return time.Now().Format(time.RFC3339) + ": " + strings.Join(problems, "; ")
}
