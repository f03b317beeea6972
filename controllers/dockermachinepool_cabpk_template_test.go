package controllers

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	kcpsetup "sigs.k8s.io/cluster-api/controlplane/kubeadm/setup"
	"sigs.k8s.io/cluster-api/util/index"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/test/testenv"
)

const (
	cabpkNamespace = "cabpk-template"
	cabpkCluster   = "templated"
	// templatedFile is rendered by CABPK from a contentFormat Template: it prints the control
	// plane's version.
	templatedFile = "/etc/capdmp/control-plane.yaml"
	// pinnedFile is a raw file naming a Kubernetes version by hand.
	pinnedFile = "/etc/capdmp/kube-proxy.yaml"
)

// TestCABPKControlPlaneUpgradeKeepsTheConfiguration: Cluster API's own KubeadmConfig reconciler
// renders a MachinePool's join data with a contentFormat Template file that prints
// {{ .controlPlane.version }}, which CABPK reads from the control plane's spec.version. A control
// plane upgrade followed by a re-render (the refresh a version-skew pause asks for: the workload's
// bootstrap token Secret deleted and the KubeadmConfig touched) writes the new version into that
// file; the configuration the pool records, and the one its machines label containers with, stay
// the same, so the upgrade rolls nothing. The MachinePool's own upgrade in the same kubeadm API
// rolls nothing for its configuration either. A real edit rendered the same way (a raw file
// edited to name the new version by hand) still changes the configuration.
func TestCABPKControlPlaneUpgradeKeepsTheConfiguration(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{Workload: true})
	g.Expect(err).ToNot(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	mgmt, workload := env.Management.Client, env.Workload.Client
	startCABPK(t, env)

	createTemplatedWorkers(g, env, "v1.35.0")
	mpKey := client.ObjectKey{Namespace: cabpkNamespace, Name: "workers"}
	r := &DockerMachinePoolReconciler{Client: mgmt, APIReader: mgmt}
	pool := &infrav1.DockerMachinePool{}
	g.Expect(mgmt.Get(ctx, mpKey, pool)).To(Succeed())
	// record runs the pool's bootstrap configuration phase, as a reconcile does, and returns the
	// configuration it records and the data it read.
	record := func(g Gomega) (string, *bootstrap.Data) {
		mp := &clusterv1.MachinePool{}
		g.Expect(mgmt.Get(ctx, mpKey, mp)).To(Succeed())
		s := &poolScope{pool: pool, machinePool: mp}
		_, err := r.reconcileBootstrapConfiguration(ctx, s)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(s.data).ToNot(BeNil(), "the pool read the data")
		// The machine controller labels a container it bootstraps with the Configuration of the
		// data it reads: the same.
		machineRead, err := bootstrap.Read(ctx, mgmt, cabpkNamespace, ptr.Deref(mp.Spec.Template.Spec.Bootstrap.DataSecretName, ""))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(machineRead.Configuration(ctx)).To(Equal(pool.Status.BootstrapData.Configuration))
		return pool.Status.BootstrapData.Configuration, s.data
	}

	var rendered *bootstrap.Data
	start := time.Now()
	g.Eventually(func(g Gomega) {
		mp := &clusterv1.MachinePool{}
		g.Expect(mgmt.Get(ctx, mpKey, mp)).To(Succeed())
		g.Expect(mp.Spec.Template.Spec.Bootstrap.DataSecretName).ToNot(BeNil(), "the MachinePool has CABPK's data")
		_, rendered = record(g)
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	t.Logf("CABPK rendered the data %s after the objects were created", time.Since(start).Round(time.Millisecond))
	g.Expect(string(rendered.Value)).To(ContainSubstring("controlPlaneVersion: v1.35.0"), "CABPK rendered the template")
	configuration, _ := record(g)
	g.Expect(configuration).ToNot(BeEmpty())

	// The control plane is upgraded: CABPK renders its spec.version into the template.
	update(g, mgmt, client.ObjectKey{Namespace: cabpkNamespace, Name: "cp"}, &controlplanev1.KubeadmControlPlane{},
		func(kcp *controlplanev1.KubeadmControlPlane) { kcp.Spec.Version = "v1.36.2" })
	rendered = rerender(g, mgmt, workload, rendered, "controlPlaneVersion: v1.36.2")
	upgraded, _ := record(g)
	g.Expect(upgraded).To(Equal(configuration), "the control plane's version is not the configuration")

	// Then the MachinePool: the kubeadm API stays v1beta4, the worker's data names no version.
	update(g, mgmt, mpKey, &clusterv1.MachinePool{},
		func(mp *clusterv1.MachinePool) { mp.Spec.Template.Spec.Version = "v1.36.2" })
	rendered = rerender(g, mgmt, workload, rendered, "controlPlaneVersion: v1.36.2")
	api, err := bootstrap.JoinConfigurationAPIVersion(rendered)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(api).To(Equal("kubeadm.k8s.io/v1beta4"))
	upgraded, _ = record(g)
	g.Expect(upgraded).To(Equal(configuration), "the MachinePool's version in the same kubeadm API is not the configuration")

	// A user pins the new version in a raw file by hand: that is an edit.
	update(g, mgmt, mpKey, &bootstrapv1.KubeadmConfig{}, func(c *bootstrapv1.KubeadmConfig) {
		for i := range c.Spec.Files {
			if c.Spec.Files[i].Path == pinnedFile {
				c.Spec.Files[i].Content = "image: registry.k8s.io/kube-proxy:v1.36.2\n"
			}
		}
	})
	rerender(g, mgmt, workload, rendered, "kube-proxy:v1.36.2")
	edited, _ := record(g)
	g.Expect(edited).ToNot(Equal(configuration), "an edited file is a configuration change")
}

// startCABPK runs Cluster API's Cluster, Machine, MachinePool, MachineHealthCheck and
// KubeadmConfig reconcilers against the management API server until the test ends; their log is
// printed when the test fails.
func startCABPK(t *testing.T, env *testenv.Environment) {
	t.Helper()
	g := NewWithT(t)
	var logMu sync.Mutex
	var logs bytes.Buffer
	logger := funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintln(&logs, time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{Verbosity: 2})
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), logger))
	mgr, err := ctrl.NewManager(env.Management.Config, ctrl.Options{
		Scheme:  env.Management.Scheme,
		Logger:  logger,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Client:  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}, Unstructured: true}},
	})
	g.Expect(err).ToNot(HaveOccurred())
	opts := controller.Options{MaxConcurrentReconciles: 5, SkipNameValidation: ptr.To(true)}
	secrets, err := kcpsetup.CreateSecretCachingClient(mgr)
	g.Expect(err).ToNot(HaveOccurred())
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secrets,
		Client:       clustercache.ClientOptions{UserAgent: "capdmp-cabpk-template-test"},
	}, opts)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(index.AddDefaultIndexes(ctx, mgr)).To(Succeed())
	// A TTL longer than the test: only the test's refreshes re-render the data.
	g.Expect(testenv.SetupCoreReconcilers(ctx, mgr, cc, secrets, opts, 15*time.Minute)).To(Succeed())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mgr.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		// The ClusterCache's caches run on a context of their own, which stopping the manager
		// does not end: their watches would hold the workload API server's shutdown for its
		// whole grace period.
		if s, ok := cc.(interface{ Shutdown() }); ok {
			s.Shutdown()
		}
		if t.Failed() {
			logMu.Lock()
			defer logMu.Unlock()
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			t.Logf("Cluster API's log (last 200 lines):\n%s", strings.Join(lines[max(0, len(lines)-200):], "\n"))
		}
	})
}

// createTemplatedWorkers creates a Cluster whose KubeadmControlPlane is initialized at version
// (its status written as KCP would), and a MachinePool of that version whose KubeadmConfig has a
// contentFormat Template file printing the control plane version and a raw file naming a
// version by hand.
func createTemplatedWorkers(g Gomega, env *testenv.Environment, version string) {
	ctx := context.Background()
	mgmt := env.Management.Client
	g.Expect(mgmt.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cabpkNamespace}})).To(Succeed())
	// No infrastructure cluster: the Cluster controller reports the infrastructure provisioned.
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: cabpkNamespace, Name: cabpkCluster},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork:       clusterv1.ClusterNetwork{Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"10.244.0.0/16"}}},
			ControlPlaneEndpoint: env.Workload.Endpoint,
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: "cp",
			},
		},
	}
	g.Expect(mgmt.Create(ctx, cluster)).To(Succeed())
	g.Expect(env.Workload.CreateClusterSecrets(ctx, mgmt, cluster)).To(Succeed())

	kcp := &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: cabpkNamespace, Name: "cp", Labels: map[string]string{clusterv1.ClusterNameLabel: cabpkCluster}},
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Version:  version,
			Replicas: ptr.To[int32](1),
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachineTemplate", Name: "unused"},
			}},
		},
	}
	g.Expect(mgmt.Create(ctx, kcp)).To(Succeed())
	kcp.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	g.Expect(mgmt.Status().Update(ctx, kcp)).To(Succeed())

	config := &bootstrapv1.KubeadmConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: cabpkNamespace, Name: "workers"},
		Spec: bootstrapv1.KubeadmConfigSpec{
			JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
				Name: "{{ ds.meta_data.local_hostname }}",
			}},
			Files: []bootstrapv1.File{
				{Path: templatedFile, Content: "controlPlaneVersion: {{ .controlPlane.version }}\n", ContentFormat: bootstrapv1.FileContentFormatTemplate},
				{Path: pinnedFile, Content: "image: registry.k8s.io/kube-proxy:" + version + "\n"},
			},
		},
	}
	g.Expect(mgmt.Create(ctx, config)).To(Succeed())
	pool := &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: cabpkNamespace, Name: "workers"}}
	g.Expect(mgmt.Create(ctx, pool)).To(Succeed())
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: cabpkNamespace, Name: "workers"},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: cabpkCluster,
			// One replica and no Node: CABPK refreshes the token rather than rotating it.
			Replicas: ptr.To[int32](1),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: cabpkCluster,
				Version:     version,
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: config.Name,
				}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "DockerMachinePool", Name: pool.Name,
				},
			}},
		},
	}
	g.Expect(mgmt.Create(ctx, mp)).To(Succeed())
}

// rerender has CABPK render the data again as requestBootstrapRefresh does: it deletes the
// workload's bootstrap token Secret the data joins with and touches the KubeadmConfig. It returns
// the new data once it contains want.
func rerender(g Gomega, mgmt, workload client.Client, current *bootstrap.Data, want string) *bootstrap.Data {
	ctx := context.Background()
	id, err := bootstrap.BootstrapTokenID(current)
	g.Expect(err).ToNot(HaveOccurred())
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id}}
	g.Expect(workload.Delete(ctx, token)).To(Succeed())
	configKey := client.ObjectKey{Namespace: cabpkNamespace, Name: "workers"}
	update(g, mgmt, configKey, &bootstrapv1.KubeadmConfig{}, func(c *bootstrapv1.KubeadmConfig) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[BootstrapRefreshRequestedAnnotation] = time.Now().UTC().Format(time.RFC3339Nano)
	})
	var data *bootstrap.Data
	g.Eventually(func(g Gomega) {
		config := &bootstrapv1.KubeadmConfig{}
		g.Expect(mgmt.Get(ctx, configKey, config)).To(Succeed())
		g.Expect(config.Status.DataSecretName).ToNot(BeEmpty())
		data, err = bootstrap.Read(ctx, mgmt, cabpkNamespace, config.Status.DataSecretName)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(data.Hash).ToNot(Equal(current.Hash), "CABPK rendered the data again")
		g.Expect(string(data.Value)).To(ContainSubstring(want))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	return data
}

// update applies mutate to the object at key, retrying on conflicts with the controllers.
func update[T client.Object](g Gomega, c client.Client, key client.ObjectKey, obj T, mutate func(T)) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), key, obj); err != nil {
			return err
		}
		mutate(obj)
		return c.Update(context.Background(), obj)
	})).To(Succeed())
}
