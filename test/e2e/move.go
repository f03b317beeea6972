//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// MoveSpecInput is the input of MoveSpec.
type MoveSpecInput struct {
	E2EConfig             *clusterctl.E2EConfig
	ClusterctlConfigPath  string
	BootstrapClusterProxy framework.ClusterProxy
	ArtifactFolder        string
	SkipCleanup           bool

	// CreateTarget makes another management cluster with the same providers, named name, and
	// returns it with the function that deletes it.
	CreateTarget func(ctx context.Context, name string) (framework.ClusterProxy, func())
}

// MoveSpec moves a cluster whose workers are a CAPDMP MachinePool to another management cluster
// with `clusterctl move`, scales the pool there, and moves it back. Neither move may roll a
// machine: the Machines and the pool's instances are the same before and after, and the target's
// CAPDMP adopts the containers the source's made.
func MoveSpec(ctx context.Context, inputGetter func() MoveSpecInput) {
	var (
		specName         = "clusterctl-move"
		input            MoveSpecInput
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
		Expect(input.CreateTarget).ToNot(BeNil(), "Invalid argument. input.CreateTarget can't be nil when calling %s spec", specName)
		Expect(os.MkdirAll(input.ArtifactFolder, 0o750)).To(Succeed(), "Invalid argument. input.ArtifactFolder can't be created for %s spec", specName)
		namespace, cancelWatches = framework.SetupSpecNamespace(ctx, specName, input.BootstrapClusterProxy, input.ArtifactFolder, nil)
		clusterResources = new(clusterctl.ApplyClusterTemplateAndWaitResult)
	})

	It("Should move a cluster with a CAPDMP MachinePool and back without rolling a machine", func() {
		By("Creating a workload cluster: control plane x1, CAPDMP MachinePool x1")
		clusterctl.ApplyClusterTemplateAndWait(ctx, clusterctl.ApplyClusterTemplateAndWaitInput{
			ClusterProxy: input.BootstrapClusterProxy,
			ConfigCluster: clusterctl.ConfigClusterInput{
				LogFolder:                filepath.Join(input.ArtifactFolder, "clusters", input.BootstrapClusterProxy.GetName()),
				ClusterctlConfigPath:     input.ClusterctlConfigPath,
				KubeconfigPath:           input.BootstrapClusterProxy.GetKubeconfigPath(),
				InfrastructureProvider:   capdmpProvider,
				Flavor:                   "machinepool",
				Namespace:                namespace.Name,
				ClusterName:              fmt.Sprintf("%s-%s", specName, util.RandomString(6)),
				KubernetesVersion:        input.E2EConfig.MustGetVariable(KubernetesVersion),
				ControlPlaneMachineCount: ptr.To[int64](1),
				WorkerMachineCount:       ptr.To[int64](1),
			},
			WaitForClusterIntervals:      input.E2EConfig.GetIntervals(specName, "wait-cluster"),
			WaitForControlPlaneIntervals: input.E2EConfig.GetIntervals(specName, "wait-control-plane"),
			WaitForMachinePools:          input.E2EConfig.GetIntervals(specName, "wait-machine-pool-nodes"),
		}, clusterResources)
		cluster := clusterResources.Cluster
		before, err := machinesOf(ctx, input.BootstrapClusterProxy.GetClient(), cluster)
		Expect(err).NotTo(HaveOccurred())
		Expect(before.machines).To(HaveLen(2), "one control-plane machine and one pool machine")
		Expect(before.instances).To(HaveLen(1))

		By("Creating the management cluster to move to")
		target, deleteTarget := input.CreateTarget(ctx, input.E2EConfig.ManagementClusterName+"-move")
		DeferCleanup(deleteTarget)

		By("Moving the cluster to the other management cluster")
		clusterctl.Move(ctx, clusterctl.MoveInput{
			LogFolder:            filepath.Join(input.ArtifactFolder, "clusters", target.GetName()),
			ClusterctlConfigPath: input.ClusterctlConfigPath,
			FromKubeconfigPath:   input.BootstrapClusterProxy.GetKubeconfigPath(),
			ToKubeconfigPath:     target.GetKubeconfigPath(),
			Namespace:            namespace.Name,
		})
		moved := framework.DiscoveryAndWaitForCluster(ctx, framework.DiscoveryAndWaitForClusterInput{
			Getter: target.GetClient(), Namespace: namespace.Name, Name: cluster.Name,
		}, input.E2EConfig.GetIntervals(specName, "wait-cluster")...)
		// Status is not moved: the target's controllers write it again once the cluster is unpaused.
		Eventually(func() (clusterMachines, error) { return machinesOf(ctx, target.GetClient(), moved) },
			input.E2EConfig.GetIntervals(specName, "wait-machine-pool-nodes")...).Should(Equal(before), "the move rolled no machine and no pool instance")

		By("Scaling the pool to 2 on the other management cluster: its CAPDMP adopted the pool")
		framework.ScaleMachinePoolAndWait(ctx, framework.ScaleMachinePoolAndWaitInput{
			ClusterProxy: target,
			Cluster:      moved,
			Replicas:     2,
			MachinePools: framework.GetMachinePoolsByCluster(ctx, framework.GetMachinePoolsByClusterInput{
				Lister: target.GetClient(), ClusterName: moved.Name, Namespace: moved.Namespace,
			}),
			WaitForMachinePoolToScale: input.E2EConfig.GetIntervals(specName, "wait-machine-pool-nodes"),
		})
		scaled, err := machinesOf(ctx, target.GetClient(), moved)
		Expect(err).NotTo(HaveOccurred())
		Expect(scaled.instances).To(HaveLen(2))
		Expect(scaled.instances).To(ContainElements(before.instances), "scaling up kept the instance made before the move")

		By("Moving the cluster back")
		clusterctl.Move(ctx, clusterctl.MoveInput{
			LogFolder:            filepath.Join(input.ArtifactFolder, "clusters", input.BootstrapClusterProxy.GetName()),
			ClusterctlConfigPath: input.ClusterctlConfigPath,
			FromKubeconfigPath:   target.GetKubeconfigPath(),
			ToKubeconfigPath:     input.BootstrapClusterProxy.GetKubeconfigPath(),
			Namespace:            namespace.Name,
		})
		clusterResources.Cluster = framework.DiscoveryAndWaitForCluster(ctx, framework.DiscoveryAndWaitForClusterInput{
			Getter: input.BootstrapClusterProxy.GetClient(), Namespace: namespace.Name, Name: cluster.Name,
		}, input.E2EConfig.GetIntervals(specName, "wait-cluster")...)
		Eventually(func() (clusterMachines, error) {
			return machinesOf(ctx, input.BootstrapClusterProxy.GetClient(), clusterResources.Cluster)
		},
			input.E2EConfig.GetIntervals(specName, "wait-machine-pool-nodes")...).Should(Equal(scaled), "the move back rolled no machine and no pool instance")

		framework.VerifyMachinesReady(ctx, framework.VerifyMachinesReadyInput{
			Lister: input.BootstrapClusterProxy.GetClient(), Name: cluster.Name, Namespace: namespace.Name,
		})
		By("PASSED!")
	})

	AfterEach(func() {
		framework.DumpSpecResourcesAndCleanup(ctx, specName, input.BootstrapClusterProxy, input.ClusterctlConfigPath, input.ArtifactFolder,
			namespace, cancelWatches, clusterResources.Cluster, input.E2EConfig.GetIntervals, input.SkipCleanup)
	})
}

// clusterMachines names a cluster's Machines and its DockerMachinePoolMachines, sorted: a
// rollout changes them, a move must not.
type clusterMachines struct {
	machines  []string
	instances []string
}

func machinesOf(ctx context.Context, c client.Client, cluster *clusterv1.Cluster) (clusterMachines, error) {
	var m clusterMachines
	ofCluster := []client.ListOption{client.InNamespace(cluster.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}}
	machines := &clusterv1.MachineList{}
	if err := c.List(ctx, machines, ofCluster...); err != nil {
		return m, err
	}
	for _, machine := range machines.Items {
		m.machines = append(m.machines, machine.Name)
	}
	// Each container of a pool has its DockerMachinePoolMachine, named as the container.
	poolMachines := &infrav1.DockerMachinePoolMachineList{}
	if err := c.List(ctx, poolMachines, ofCluster...); err != nil {
		return m, err
	}
	for _, pm := range poolMachines.Items {
		m.instances = append(m.instances, pm.Name)
	}
	slices.Sort(m.machines)
	slices.Sort(m.instances)
	return m, nil
}
