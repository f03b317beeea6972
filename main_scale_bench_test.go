package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	kcpsetup "sigs.k8s.io/cluster-api/controlplane/kubeadm/setup"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/index"
	"sigs.k8s.io/cluster-api/util/test/builder"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/internal/nodeimage"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/pkg/skew"
)

// The scale driver (issue 37, item 3): CAPDMP's manager, wired by newManager from the shipped
// flag defaults, and Cluster API's core reconcilers (Cluster, Machine, MachinePool,
// MachineHealthCheck, KubeadmConfig) in a manager of their own, as two deployments would run them,
// both in this process against envtest's management and workload API servers. The containers are
// the fake runtime's; a container's bootstrap registers its Node in the workload API server, as a
// kubelet would, and succeeds at once. One pool scales from 0 to N, then rolls out to the next
// Kubernetes minor. The figures come from the wire and the process:
//   - writes: every POST, PUT, PATCH and DELETE each manager sends to the management API server
//     (objects, their status, Events), counted with their request bodies' bytes on the manager's
//     HTTP transport (rest.Config.WrapTransport): newManager builds its client itself, and the
//     transport sees every write, Events and the ClusterCache's included, as sent;
//   - reconciles: controller-runtime's controller_runtime_reconcile_total, per controller;
//   - CPU: getrusage(RUSAGE_SELF), user+sys, of this process over the phase: both managers and
//     the driver (the fake runtime, the Nodes it registers, the polls); the API servers and etcd
//     run as child processes and are reported apart (/proc/<pid>/stat);
//   - the DockerMachinePool and MachinePool as the API server serves them (JSON bytes).
//
// It fails when the pool does not get where it is timed going (N ready instances, then N of the
// new version and none of the old), never on time.

// coreReconciliationTimeout bounds a reconcile of Cluster API's core here. Its MachinePool
// reconcile applies every Machine of the pool that changed, one request after the other: at 5,000
// on two cores it does not finish within Cluster API's default of one minute, fails, and starts
// over without ever writing the MachinePool's status, so the pool never gets there.
const coreReconciliationTimeout = 30 * time.Minute

const (
	scaleNamespace  = "scale"
	scaleCluster    = "scale"
	scaleVersion    = "v1.31.0"
	rolloutVersion  = "v1.32.0"
	scaleMaxSurge   = "10%"
	scaleQuietFor   = 3 * time.Second
	scalePollPeriod = time.Second
)

// BenchmarkPoolScale scales one pool from 0 to N and, for the sizes in
// CAPDMP_SCALE_ROLLOUT_SIZES, rolls it out to the next minor. CAPDMP_SCALE_SIZES lists the sizes
// (comma-separated, default 1000). Run it with -benchtime 1x: each size starts its own API
// servers.
func BenchmarkPoolScale(b *testing.B) {
	// The figures are the output; the managers' logs would drown them. CAPDMP_SCALE_LOG names a
	// file for them instead.
	logger := logr.Discard()
	if path := os.Getenv("CAPDMP_SCALE_LOG"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatalf("CAPDMP_SCALE_LOG: %v", err)
		}
		b.Cleanup(func() { _ = f.Close() })
		logger = textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(f), textlogger.Verbosity(2)))
	}
	ctrl.SetLogger(logger)
	sizes := sizesFromEnv(b, "CAPDMP_SCALE_SIZES", "1000")
	rollouts := sizesFromEnv(b, "CAPDMP_SCALE_ROLLOUT_SIZES", "1000")
	for _, n := range sizes {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			var r scaleRun
			for b.Loop() {
				r = runScale(b, n, slices.Contains(rollouts, n))
			}
			r.report(b, n)
		})
	}
}

func sizesFromEnv(b *testing.B, name, def string) []int {
	b.Helper()
	value := os.Getenv(name)
	if value == "" {
		value = def
	}
	var sizes []int
	for field := range strings.SplitSeq(value, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: %q is not a pool size", name, value, field)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// scaleRun is what one size measured.
type scaleRun struct {
	scaleUp, rollout   *phaseFigures
	noChange           noChangeFigures
	poolBytes, mpBytes int
}

// phaseFigures is what one phase (the scale-up, the rollout) cost.
type phaseFigures struct {
	wall           time.Duration
	capdmp, capi   tallySnapshot
	reconciles     map[string]float64
	cpu, apiServer time.Duration
}

func (r scaleRun) report(b *testing.B, n int) {
	b.Helper()
	per := func(v float64) float64 { return v / float64(n) }
	up := r.scaleUp
	b.ReportMetric(per(float64(up.capdmp.objectWrites())), "capdmp-writes/instance")
	b.ReportMetric(per(float64(up.capdmp.events())), "capdmp-events/instance")
	b.ReportMetric(per(float64(up.capdmp.writeBytes())), "capdmp-write-bytes/instance")
	b.ReportMetric(per(float64(up.capi.objectWrites())), "capi-writes/instance")
	b.ReportMetric(per(float64(up.cpu.Milliseconds())), "cpu-ms/instance")
	b.ReportMetric(up.wall.Seconds(), "scale-up-s")
	b.ReportMetric(float64(r.poolBytes), "pool-bytes")
	b.ReportMetric(float64(r.mpBytes), "machinepool-bytes")
	b.ReportMetric(per(float64(r.noChange.mean.Nanoseconds())), "no-change-ns/instance")
	b.ReportMetric(per(float64(r.noChange.cpu.Nanoseconds())), "no-change-cpu-ns/instance")
	if r.rollout != nil {
		ro := r.rollout
		b.ReportMetric(per(float64(ro.capdmp.objectWrites())), "rollout-capdmp-writes/instance")
		b.ReportMetric(per(float64(ro.capdmp.writeBytes())), "rollout-capdmp-write-bytes/instance")
		b.ReportMetric(per(ro.reconciles["dockermachinepool"]), "rollout-pool-reconciles/instance")
		b.ReportMetric(per(float64(ro.cpu.Milliseconds())), "rollout-cpu-ms/instance")
		b.ReportMetric(ro.wall.Seconds(), "rollout-s")
	}
}

// logSteady logs the scale-up's figures and the steady pool's, as soon as they are measured: the
// teardown of a pool of thousands may fail after them.
func (r scaleRun) logSteady(b *testing.B, n int) {
	b.Helper()
	per := func(v float64) float64 { return v / float64(n) }
	b.Logf("scale-up 0 -> %d: %s", n, r.scaleUp.describe(n))
	nc := r.noChange
	b.Logf("no-change reconcile of %d in the manager: %s (%.1f us/instance), process CPU %s a touch (%.1f us/instance), %.1f API requests and %d writes per reconcile",
		n, nc.mean.Round(time.Microsecond), per(float64(nc.mean.Nanoseconds()))/1e3, nc.cpu.Round(time.Microsecond), per(float64(nc.cpu.Nanoseconds()))/1e3, nc.requests, nc.writes)
	b.Logf("objects at %d ready: DockerMachinePool %d bytes, MachinePool %d bytes (JSON, as served)", n, r.poolBytes, r.mpBytes)
}

func (p *phaseFigures) describe(n int) string {
	per := func(v float64) float64 { return v / float64(n) }
	var s strings.Builder
	fmt.Fprintf(&s, "%s wall; process CPU %s (%.2f ms/instance; both managers and the driver), API servers and etcd %s",
		p.wall.Round(time.Millisecond), p.cpu.Round(time.Millisecond), per(float64(p.cpu.Milliseconds())), p.apiServer.Round(time.Millisecond))
	for _, side := range []struct {
		name  string
		tally tallySnapshot
	}{{"CAPDMP", p.capdmp}, {"Cluster API", p.capi}} {
		fmt.Fprintf(&s, "\n  %s: %.2f writes/instance (%d), %.0f bytes/instance (%d), %.2f Events/instance, %d refused (4xx/5xx), %.2f reads/instance",
			side.name, per(float64(side.tally.objectWrites())), side.tally.objectWrites(), per(float64(side.tally.writeBytes())), side.tally.writeBytes(),
			per(float64(side.tally.events())), side.tally.failed(), per(float64(side.tally.reads)))
		for _, key := range slices.Sorted(maps.Keys(side.tally.writes)) {
			c := side.tally.writes[key]
			fmt.Fprintf(&s, "\n    %-55s %7d  %6.2f/instance  %9d bytes  %7.0f bytes/instance  %d refused", key, c.n, per(float64(c.n)), c.bytes, per(float64(c.bytes)), c.failed)
		}
	}
	s.WriteString("\n  reconciles:")
	for _, name := range slices.Sorted(maps.Keys(p.reconciles)) {
		fmt.Fprintf(&s, " %s %.0f (%.2f/instance);", name, p.reconciles[name], per(p.reconciles[name]))
	}
	return s.String()
}

func runScale(b *testing.B, n int, rollout bool) scaleRun {
	b.Helper()
	g := NewWithT(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, stopEnv := startEnvtest(ctx, b, g)
	defer stopEnv()
	mgmt := env.Management.Client

	nodes := &fakeNodes{workload: env.Workload.Client}
	engine := fakeruntime.NewWithNodeImages(nodeImage(g, scaleVersion), nodeImage(g, rolloutVersion))
	engine.ExecHandler = nodes.exec
	createScalePool(ctx, g, env)

	capdmp, capi := &apiTally{}, &apiTally{}
	stopCAPI := startClusterAPI(ctx, g, env, capi)
	defer stopCAPI()
	stopCAPDMP := startCAPDMP(ctx, g, env, engine, capdmp)
	defer stopCAPDMP()

	// The empty pool settles: the finalizer, its status, the MachinePool's.
	g.Eventually(func(g Gomega) {
		pool := &infrav1.DockerMachinePool{}
		g.Expect(mgmt.Get(ctx, client.ObjectKey{Namespace: scaleNamespace, Name: "pool"}, pool)).To(Succeed())
		g.Expect(ptr.Deref(pool.Status.Initialization.Provisioned, false)).To(BeTrue(), "the empty pool is provisioned")
	}, 2*time.Minute, scalePollPeriod).Should(Succeed())
	waitQuiet(ctx, g)

	var run scaleRun
	phase := startPhase(g, capdmp, capi)
	setReplicas(ctx, g, mgmt, n)
	waitScaledUp(ctx, g, env, engine, nodes, n)
	run.scaleUp = phase.end()

	run.noChange = measureNoChange(ctx, g, mgmt, capdmp)
	run.poolBytes = servedSize(ctx, g, env.Management.Config, "/apis/"+infrav1.GroupVersion.String()+"/namespaces/"+scaleNamespace+"/dockermachinepools/pool")
	run.mpBytes = servedSize(ctx, g, env.Management.Config, "/apis/"+clusterv1.GroupVersion.String()+"/namespaces/"+scaleNamespace+"/machinepools/mp")

	run.logSteady(b, n)

	if rollout {
		phase := startPhase(g, capdmp, capi)
		startRollout(ctx, g, mgmt)
		waitRolledOut(ctx, g, env, engine, nodes, n)
		run.rollout = phase.end()
		b.Logf("rollout of %d to %s (maxSurge %s): %s", n, rolloutVersion, scaleMaxSurge, run.rollout.describe(n))
	}
	disconnectWorkloadOf(ctx, g, mgmt, scaleNamespace, scaleCluster, scaleTimeout(n))
	return run
}

func nodeImage(g Gomega, version string) string {
	image, err := nodeimage.ImageForVersion(version, "")
	g.Expect(err).ToNot(HaveOccurred())
	return image
}

// createScalePool creates a Cluster whose generic control plane is initialized at scaleVersion,
// bootstrap data, and a MachinePool of 0 replicas with its DockerMachinePool (maxSurge
// scaleMaxSurge, so that a rollout takes ten waves at every size).
func createScalePool(ctx context.Context, g Gomega, env *testenv.Environment) {
	mgmt := env.Management.Client
	crds, err := client.New(env.Management.Config, client.Options{Scheme: withAPIExtensions(g)})
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(crds.Create(ctx, builder.GenericControlPlaneCRD.DeepCopy())).To(Succeed())
	g.Expect(mgmt.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNamespace}})).To(Succeed())

	// No infrastructure cluster: Cluster API's Cluster controller reports it provisioned.
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: scaleNamespace, Name: scaleCluster},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneEndpoint: env.Workload.Endpoint,
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: builder.ControlPlaneGroupVersion.Group, Kind: builder.GenericControlPlaneKind, Name: "cp",
			},
		},
	}
	g.Expect(mgmt.Create(ctx, cluster)).To(Succeed())
	g.Expect(env.Workload.CreateClusterSecrets(ctx, mgmt, cluster)).To(Succeed())

	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(builder.ControlPlaneGroupVersion.WithKind(builder.GenericControlPlaneKind))
	cp.SetNamespace(scaleNamespace)
	cp.SetName("cp")
	cp.SetLabels(map[string]string{clusterv1.ClusterNameLabel: scaleCluster})
	g.Eventually(func() error { return mgmt.Create(ctx, cp) }, 10*time.Second, 100*time.Millisecond).Should(Succeed(), "the control plane's CRD is served")
	setControlPlaneVersion(ctx, g, mgmt, scaleVersion)

	data := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: scaleNamespace, Name: "mp-data", Labels: map[string]string{clusterv1.ClusterNameLabel: scaleCluster}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte("#cloud-config\nruncmd:\n- kubeadm join\n"), "format": []byte("cloud-config")},
	}
	g.Expect(mgmt.Create(ctx, data)).To(Succeed())
	pool := &infrav1.DockerMachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: scaleNamespace, Name: "pool", Labels: map[string]string{clusterv1.ClusterNameLabel: scaleCluster}},
		Spec: infrav1.DockerMachinePoolSpec{Strategy: infrav1.DockerMachinePoolStrategy{RollingUpdate: infrav1.DockerMachinePoolRollingUpdate{
			MaxSurge: ptr.To(intstr.FromString(scaleMaxSurge)),
		}}},
	}
	g.Expect(mgmt.Create(ctx, pool)).To(Succeed())
	// The bootstrap data is named directly: no KubeadmConfig, so CABPK renders nothing and
	// the data, and the configuration the pool records, stay the same.
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: scaleNamespace, Name: "mp", Labels: map[string]string{clusterv1.ClusterNameLabel: scaleCluster}},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: scaleCluster,
			Replicas:    ptr.To[int32](0),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName:       scaleCluster,
				Version:           scaleVersion,
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "DockerMachinePool", Name: pool.Name},
			}},
		},
	}
	g.Expect(mgmt.Create(ctx, mp)).To(Succeed())
}

// setControlPlaneVersion reports the control plane initialized and running version, as a
// control plane provider would.
func setControlPlaneVersion(ctx context.Context, g Gomega, mgmt client.Client, version string) {
	g.Eventually(func() error {
		cp := &unstructured.Unstructured{}
		cp.SetGroupVersionKind(builder.ControlPlaneGroupVersion.WithKind(builder.GenericControlPlaneKind))
		if err := mgmt.Get(ctx, client.ObjectKey{Namespace: scaleNamespace, Name: "cp"}, cp); err != nil {
			return err
		}
		if err := unstructured.SetNestedSlice(cp.Object, []any{map[string]any{"version": version, "replicas": int64(1)}}, "status", "versions"); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(cp.Object, true, "status", "initialization", "controlPlaneInitialized"); err != nil {
			return err
		}
		return mgmt.Status().Update(ctx, cp)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed(), "the control plane reports %s", version)
}

func setReplicas(ctx context.Context, g Gomega, mgmt client.Client, n int) {
	mp := &clusterv1.MachinePool{}
	g.Expect(mgmt.Get(ctx, client.ObjectKey{Namespace: scaleNamespace, Name: "mp"}, mp)).To(Succeed())
	patch := client.MergeFrom(mp.DeepCopy())
	mp.Spec.Replicas = ptr.To(int32(n))
	g.Expect(mgmt.Patch(ctx, mp, patch)).To(Succeed())
}

// startRollout moves the control plane to rolloutVersion, then the MachinePool.
func startRollout(ctx context.Context, g Gomega, mgmt client.Client) {
	setControlPlaneVersion(ctx, g, mgmt, rolloutVersion)
	mp := &clusterv1.MachinePool{}
	g.Expect(mgmt.Get(ctx, client.ObjectKey{Namespace: scaleNamespace, Name: "mp"}, mp)).To(Succeed())
	patch := client.MergeFrom(mp.DeepCopy())
	mp.Spec.Template.Spec.Version = rolloutVersion
	g.Expect(mgmt.Patch(ctx, mp, patch)).To(Succeed())
}

// startClusterAPI runs Cluster API's core reconcilers in a manager of their own, as
// test/scenarios/stubnodes does, with their writes counted by tally.
func startClusterAPI(ctx context.Context, g Gomega, env *testenv.Environment, tally *apiTally) func() {
	ctx, cancel := context.WithCancel(ctx)
	cfg := rest.CopyConfig(env.Management.Config)
	cfg.Wrap(tally.wrap)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  env.Management.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Client: client.Options{Cache: &client.CacheOptions{
			DisableFor:   []client.Object{&corev1.Secret{}},
			Unstructured: true,
		}},
	})
	g.Expect(err).ToNot(HaveOccurred())
	opts := controller.Options{MaxConcurrentReconciles: 10, SkipNameValidation: ptr.To(true), ReconciliationTimeout: coreReconciliationTimeout}
	secrets, err := kcpsetup.CreateSecretCachingClient(mgr)
	g.Expect(err).ToNot(HaveOccurred())
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secrets,
		Cache:        clustercache.CacheOptions{Indexes: []clustercache.CacheOptionsIndex{clustercache.NodeProviderIDIndex}},
		Client:       clustercache.ClientOptions{UserAgent: "capdmp-scale-clusterapi"},
	}, opts)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(index.AddDefaultIndexes(ctx, mgr)).To(Succeed())
	g.Expect(testenv.SetupCoreReconcilers(ctx, mgr, cc, secrets, opts, 15*time.Minute)).To(Succeed())
	return startManagerUntil(ctx, cancel, mgr, cc)
}

// startCAPDMP runs CAPDMP's manager as main.go wires it, from the shipped flag defaults, on the
// fake runtime, with its writes counted by tally.
func startCAPDMP(ctx context.Context, g Gomega, env *testenv.Environment, engine container.Runtime, tally *apiTally) func() {
	ctx, cancel := context.WithCancel(ctx)
	o := &options{}
	fs := pflag.NewFlagSet("capdmp", pflag.ContinueOnError)
	o.addFlags(fs)
	g.Expect(fs.Parse([]string{"--diagnostics-address=0", "--health-probe-bind-address=0", "--enable-webhooks=false", "--namespace=" + scaleNamespace})).To(Succeed())
	o.skipNameValidation = true
	cfg := rest.CopyConfig(env.Management.Config)
	cfg.QPS, cfg.Burst = o.restConfigQPS, o.restConfigBurst
	cfg.Wrap(tally.wrap)
	mgr, err := newManager(ctx, o, cfg, engine)
	g.Expect(err).ToNot(HaveOccurred(), "wiring the manager")
	return startManagerUntil(ctx, cancel, mgr, nil)
}

func startManagerUntil(ctx context.Context, cancel context.CancelFunc, mgr ctrl.Manager, cc clustercache.ClusterCache) func() {
	var stopped sync.WaitGroup
	var startErr error
	stopped.Go(func() { startErr = mgr.Start(ctx) })
	return func() {
		cancel()
		stopped.Wait()
		if s, ok := cc.(interface{ Shutdown() }); ok {
			s.Shutdown()
		}
		if startErr != nil {
			fmt.Fprintln(os.Stderr, "manager stopped:", startErr)
		}
	}
}

// fakeNodes plays the nodes' part: a bootstrap that starts registers the container's Node in the
// workload API server, Ready and running the kubelet of the container's version label, as kubeadm
// join and the kubelet would, and is done at once.
type fakeNodes struct {
	workload client.Client
	mu       sync.Mutex
	started  map[string]bool
	err      error
}

const (
	// Exit codes of bootstrap.StatusCommand (internal/bootstrap).
	statusSucceeded  = 0
	statusNotStarted = 80
)

func (f *fakeNodes) exec(c container.Container, cmd []string, _ []byte) (container.ExecResult, error) {
	script := strings.Join(cmd, " ")
	switch {
	case slices.Equal(cmd, bootstrap.StatusCommand().Argv):
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.started[c.Name] {
			return container.ExecResult{ExitCode: statusSucceeded}, nil
		}
		return container.ExecResult{ExitCode: statusNotStarted}, nil
	case strings.Contains(script, "setsid"):
		if err := f.register(c); err != nil {
			f.mu.Lock()
			if f.err == nil {
				f.err = err
			}
			f.mu.Unlock()
			return container.ExecResult{ExitCode: 1, Stderr: []byte(err.Error())}, nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.started == nil {
			f.started = map[string]bool{}
		}
		f.started[c.Name] = true
	}
	// The await of a bootstrap that ended, and anything else: done.
	return container.ExecResult{}, nil
}

func (f *fakeNodes) register(c container.Container) error {
	ctx := context.Background()
	version, err := skew.VersionFromLabelValue(c.Labels[infrav1.KubernetesVersionLabel])
	if err != nil {
		return fmt.Errorf("container %s: %w", c.Name, err)
	}
	// As a kubelet without a cloud provider registers: no providerID; CAPDMP sets it.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.Name}}
	if err := f.workload.Create(ctx, node); err != nil {
		return fmt.Errorf("registering Node %s: %w", c.Name, err)
	}
	node.Status.NodeInfo.KubeletVersion = version
	// Ready, and the pressures Cluster API's NodeHealthy waits for reported false.
	now := metav1.Now()
	for _, condition := range []struct {
		kind   corev1.NodeConditionType
		status corev1.ConditionStatus
	}{
		{corev1.NodeReady, corev1.ConditionTrue},
		{corev1.NodeMemoryPressure, corev1.ConditionFalse},
		{corev1.NodeDiskPressure, corev1.ConditionFalse},
		{corev1.NodePIDPressure, corev1.ConditionFalse},
	} {
		node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{
			Type: condition.kind, Status: condition.status, LastHeartbeatTime: now, LastTransitionTime: now,
		})
	}
	if err := f.workload.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("reporting Node %s Ready: %w", c.Name, err)
	}
	return nil
}

func (f *fakeNodes) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// waitScaledUp waits until the pool has n ready instances in CAPDMP's and Cluster API's eyes and
// CAPDMP's controllers are quiet, then checks every instance: a Ready DockerMachinePoolMachine
// and a Machine with its Node.
func waitScaledUp(ctx context.Context, g Gomega, env *testenv.Environment, engine *fakeruntime.Runtime, nodes *fakeNodes, n int) {
	mgmt := env.Management.Client
	g.Eventually(func(g Gomega) {
		g.Expect(nodes.failure()).ToNot(HaveOccurred())
		expectPoolReady(ctx, g, mgmt, n)
	}, scaleTimeout(n), scalePollPeriod).Should(Succeed(), "the pool reaches %d ready instances", n)
	waitQuiet(ctx, g)
	expectInstances(ctx, g, mgmt, engine, n, scaleVersion)
}

// waitRolledOut waits until the engine runs n containers, all of version, the pool and the
// MachinePool report n ready and CAPDMP's controllers are quiet, then checks every instance.
func waitRolledOut(ctx context.Context, g Gomega, env *testenv.Environment, engine *fakeruntime.Runtime, nodes *fakeNodes, n int) {
	mgmt := env.Management.Client
	label, err := skew.VersionLabelValue(rolloutVersion)
	g.Expect(err).ToNot(HaveOccurred())
	g.Eventually(func(g Gomega) {
		g.Expect(nodes.failure()).ToNot(HaveOccurred())
		containers := engine.Containers()
		old := 0
		for _, c := range containers {
			if c.Labels[infrav1.KubernetesVersionLabel] != label {
				old++
			}
		}
		g.Expect(old).To(BeZero(), "containers of %s left", scaleVersion)
		g.Expect(containers).To(HaveLen(n))
		expectPoolReady(ctx, g, mgmt, n)
	}, scaleTimeout(n), scalePollPeriod).Should(Succeed(), "the pool of %d rolls out to %s", n, rolloutVersion)
	waitQuiet(ctx, g)
	expectInstances(ctx, g, mgmt, engine, n, rolloutVersion)
}

// scaleTimeout is how long a phase may take before the driver says the pool did not get there: a
// bound on a hung system, not a goal.
func scaleTimeout(n int) time.Duration {
	return 5*time.Minute + time.Duration(n)*300*time.Millisecond
}

func expectPoolReady(ctx context.Context, g Gomega, mgmt client.Client, n int) {
	pool := &infrav1.DockerMachinePool{}
	g.Expect(mgmt.Get(ctx, client.ObjectKey{Namespace: scaleNamespace, Name: "pool"}, pool)).To(Succeed())
	g.Expect(ptr.Deref(pool.Status.ReadyReplicas, 0)).To(BeEquivalentTo(n), "DockerMachinePool status.readyReplicas")
	g.Expect(pool.Spec.ProviderIDList).To(HaveLen(n), "DockerMachinePool spec.providerIDList")
	mp := &clusterv1.MachinePool{}
	g.Expect(mgmt.Get(ctx, client.ObjectKey{Namespace: scaleNamespace, Name: "mp"}, mp)).To(Succeed())
	g.Expect(ptr.Deref(mp.Status.ReadyReplicas, 0)).To(BeEquivalentTo(n), "MachinePool status.readyReplicas")
	g.Expect(mp.Status.NodeRefs).To(HaveLen(n), "MachinePool status.nodeRefs")
}

func expectInstances(ctx context.Context, g Gomega, mgmt client.Client, engine *fakeruntime.Runtime, n int, version string) {
	label, err := skew.VersionLabelValue(version)
	g.Expect(err).ToNot(HaveOccurred())
	containers := map[string]bool{}
	for _, c := range engine.Containers() {
		g.Expect(c.Running).To(BeTrue(), "container %s runs", c.Name)
		g.Expect(c.Labels).To(HaveKeyWithValue(infrav1.KubernetesVersionLabel, label), "container %s", c.Name)
		containers[c.Name] = true
	}
	g.Expect(containers).To(HaveLen(n), "containers")
	machines := &infrav1.DockerMachinePoolMachineList{}
	g.Expect(mgmt.List(ctx, machines, client.InNamespace(scaleNamespace))).To(Succeed())
	g.Expect(machines.Items).To(HaveLen(n), "DockerMachinePoolMachines")
	for i := range machines.Items {
		m := &machines.Items[i]
		g.Expect(containers).To(HaveKey(m.Name), "DockerMachinePoolMachine %s has a container", m.Name)
		g.Expect(conditions.IsTrue(m, infrav1.ReadyCondition)).To(BeTrue(), "DockerMachinePoolMachine %s is Ready", m.Name)
	}
	owners := &clusterv1.MachineList{}
	g.Expect(mgmt.List(ctx, owners, client.InNamespace(scaleNamespace))).To(Succeed())
	g.Expect(owners.Items).To(HaveLen(n), "Machines")
	for _, m := range owners.Items {
		g.Expect(containers).To(HaveKey(m.Spec.InfrastructureRef.Name), "Machine %s has a container", m.Name)
		g.Expect(m.Status.NodeRef.Name).ToNot(BeEmpty(), "Machine %s has its Node", m.Name)
	}
}

// waitQuiet waits until CAPDMP's controllers and Cluster API's MachinePool and Machine
// controllers have reconciled nothing for scaleQuietFor, so that a phase's figures hold all its
// writes.
func waitQuiet(ctx context.Context, g Gomega) {
	quietSet := []string{"dockermachinepool", "dockermachinepoolmachine", "machinepool", "machine"}
	sum := func() float64 {
		var total float64
		counts := reconcileCounts(g)
		for _, name := range quietSet {
			total += counts[name]
		}
		return total
	}
	last, since := sum(), time.Now()
	g.Eventually(func() time.Duration {
		if now := sum(); now != last {
			last, since = now, time.Now()
		}
		return time.Since(since)
	}, 5*time.Minute, 200*time.Millisecond).WithContext(ctx).Should(BeNumerically(">=", scaleQuietFor), "the controllers stop reconciling")
}

// noChangeFigures are what a pool's reconcile that changes nothing costs in the manager.
type noChangeFigures struct {
	// mean is the mean reconcile time of the pool's controller (controller-runtime's histogram).
	mean time.Duration
	// cpu is the process's CPU time per touch: the pool's reconcile, the touched machine's, Cluster
	// API's reconcile of its Machine and the driver's patch; a bound on the pool's own.
	cpu time.Duration
	// requests and writes are the API requests and writes per reconcile.
	requests float64
	writes   int64
}

// measureNoChange has CAPDMP's manager reconcile the steady pool a few times and returns what such
// a reconcile costs. Each time an annotation is touched on one of the pool's
// DockerMachinePoolMachines: the pool is reconciled through its owner reference, and nothing the
// pool acts on changes. (A touch of the DockerMachinePool would have Cluster API's MachinePool
// controller reconcile the MachinePool of N at the same moment, on the same two cores.) The reads
// go to the manager's informer cache, as in production. It fails when such a reconcile writes.
func measureNoChange(ctx context.Context, g Gomega, mgmt client.Client, tally *apiTally) noChangeFigures {
	const touches = 10
	machines := &infrav1.DockerMachinePoolMachineList{}
	g.Expect(mgmt.List(ctx, machines, client.InNamespace(scaleNamespace), client.Limit(1))).To(Succeed())
	g.Expect(machines.Items).ToNot(BeEmpty())
	touched := &machines.Items[0]
	defer profileCPU(g, "no-change")()
	before := tally.snapshot()
	sum0, count0 := reconcileTime(g, "dockermachinepool")
	cpu0 := processCPU()
	for i := range touches {
		_, count := reconcileTime(g, "dockermachinepool")
		patch := client.MergeFrom(touched.DeepCopy())
		if touched.Annotations == nil {
			touched.Annotations = map[string]string{}
		}
		touched.Annotations["bench.capdmp.dev/touch"] = strconv.Itoa(i)
		g.Expect(mgmt.Patch(ctx, touched, patch)).To(Succeed())
		g.Eventually(func() uint64 {
			_, now := reconcileTime(g, "dockermachinepool")
			return now
		}, time.Minute, 10*time.Millisecond).Should(BeNumerically(">", count), "the pool is reconciled")
	}
	waitQuiet(ctx, g)
	cpu := processCPU() - cpu0
	sum1, count1 := reconcileTime(g, "dockermachinepool")
	after := tally.snapshot().minus(before)
	reconciles := count1 - count0
	g.Expect(after.objectWrites()+after.events()).To(BeZero(), "a no-change reconcile writes nothing: %v", after.writes)
	return noChangeFigures{
		mean:     time.Duration((sum1 - sum0) / float64(reconciles) * float64(time.Second)),
		cpu:      cpu / touches,
		requests: float64(after.reads) / float64(reconciles),
		writes:   after.objectWrites(),
	}
}

// profileCPU writes a CPU profile of the process, named for what it profiles, into
// CAPDMP_SCALE_PROFILE_DIR until the returned function runs; nothing when that is unset.
func profileCPU(g Gomega, name string) func() {
	dir := os.Getenv("CAPDMP_SCALE_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(pprof.StartCPUProfile(f)).To(Succeed())
	return func() {
		pprof.StopCPUProfile()
		g.Expect(f.Close()).To(Succeed())
	}
}

// reconcileCounts is controller_runtime_reconcile_total per controller (all results).
func reconcileCounts(g Gomega) map[string]float64 {
	families, err := ctrlmetrics.Registry.Gather()
	g.Expect(err).ToNot(HaveOccurred())
	counts := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" {
					counts[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return counts
}

// reconcileTime is the sum (seconds) and count of controller_runtime_reconcile_time_seconds of
// one controller.
func reconcileTime(g Gomega, name string) (float64, uint64) {
	families, err := ctrlmetrics.Registry.Gather()
	g.Expect(err).ToNot(HaveOccurred())
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_time_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == name {
					return m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0, 0
}

// servedSize is the length of the JSON the API server serves for path.
func servedSize(ctx context.Context, g Gomega, cfg *rest.Config, path string) int {
	httpClient, err := rest.HTTPClientFor(cfg)
	g.Expect(err).ToNot(HaveOccurred())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, http.NoBody)
	g.Expect(err).ToNot(HaveOccurred())
	req.Header.Set("Accept", "application/json")
	resp, err := httpClient.Do(req)
	g.Expect(err).ToNot(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "GET %s: %s", path, body)
	return len(body)
}

// disconnectWorkloadOf deletes the Cluster and waits, up to timeout (the Cluster goes after its
// pool's Machines), until neither manager's ClusterCache holds a connection to its workload
// cluster (see disconnectWorkload).
func disconnectWorkloadOf(ctx context.Context, g Gomega, mgmt client.Client, namespace, name string, timeout time.Duration) {
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	g.Expect(client.IgnoreNotFound(mgmt.Delete(ctx, cluster))).To(Succeed())
	g.Eventually(func(g Gomega) {
		families, err := ctrlmetrics.Registry.Gather()
		g.Expect(err).ToNot(HaveOccurred())
		for _, f := range families {
			if f.GetName() == "capi_cluster_cache_connection_up" {
				for _, m := range f.GetMetric() {
					g.Expect(m.GetGauge().GetValue()).To(BeZero(), "a ClusterCache is connected")
				}
			}
		}
	}, timeout, 200*time.Millisecond).Should(Succeed())
}

// phase measures one phase from startPhase to end.
type phase struct {
	g                Gomega
	capdmp, capi     *apiTally
	capdmp0, capi0   tallySnapshot
	reconciles0      map[string]float64
	start            time.Time
	cpu0, apiServer0 time.Duration
}

func startPhase(g Gomega, capdmp, capi *apiTally) *phase {
	return &phase{
		g: g, capdmp: capdmp, capi: capi, capdmp0: capdmp.snapshot(), capi0: capi.snapshot(),
		reconciles0: reconcileCounts(g), start: time.Now(), cpu0: processCPU(), apiServer0: childrenCPU(),
	}
}

func (p *phase) end() *phaseFigures {
	f := &phaseFigures{
		wall: time.Since(p.start), cpu: processCPU() - p.cpu0, apiServer: childrenCPU() - p.apiServer0,
		capdmp: p.capdmp.snapshot().minus(p.capdmp0), capi: p.capi.snapshot().minus(p.capi0),
		reconciles: map[string]float64{},
	}
	for name, v := range reconcileCounts(p.g) {
		if d := v - p.reconciles0[name]; d > 0 {
			f.reconciles[name] = d
		}
	}
	return f
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprintf("getrusage: %v", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childrenCPU is the user and system CPU time of this process's running children (envtest's
// kube-apiservers and etcds), from /proc/<pid>/stat in clock ticks of 1/100 s (USER_HZ).
func childrenCPU() time.Duration {
	self := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// The command may contain spaces; the fields after it are space-separated.
		_, rest, ok := strings.Cut(string(data), ") ")
		fields := strings.Fields(rest)
		if !ok || len(fields) < 13 || fields[1] != self {
			continue
		}
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		ticks += utime + stime
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// apiTally counts the requests a manager sends to the management API server: writes by verb and
// resource with their request bodies' bytes, and reads.
type apiTally struct {
	mu     sync.Mutex
	writes map[string]requestCount
	reads  int64
}

type requestCount struct {
	n, bytes, failed int64
}

// tallySnapshot is a copy of an apiTally's counts.
type tallySnapshot struct {
	writes map[string]requestCount
	reads  int64
}

func (t *apiTally) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		t.record(req, resp, err)
		return resp, err
	})
}

func (t *apiTally) record(req *http.Request, resp *http.Response, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		t.reads++
		return
	}
	if t.writes == nil {
		t.writes = map[string]requestCount{}
	}
	key := req.Method + " " + resourceOf(req.URL.Path)
	c := t.writes[key]
	c.n++
	c.bytes += max(req.ContentLength, 0)
	if err != nil || resp.StatusCode >= 400 {
		c.failed++
	}
	t.writes[key] = c
}

// resourceOf names the resource (and subresource) of an API path:
// /apis/<group>/<version>/namespaces/<ns>/<resource>/<name>/<subresource> gives
// "<resource>/<subresource>", as does /api/v1/....
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) > 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return path
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) >= 3 {
		return parts[0] + "/" + parts[2]
	}
	return parts[0]
}

func (t *apiTally) snapshot() tallySnapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tallySnapshot{writes: maps.Clone(t.writes), reads: t.reads}
}

func (s tallySnapshot) minus(before tallySnapshot) tallySnapshot {
	out := tallySnapshot{writes: map[string]requestCount{}, reads: s.reads - before.reads}
	for key, c := range s.writes {
		b := before.writes[key]
		if d := (requestCount{n: c.n - b.n, bytes: c.bytes - b.bytes, failed: c.failed - b.failed}); d.n > 0 {
			out.writes[key] = d
		}
	}
	return out
}

func isEvent(key string) bool {
	_, resource, _ := strings.Cut(key, " ")
	return resource == "events"
}

// sum adds up value over the writes whose key include accepts.
func (s tallySnapshot) sum(include func(key string) bool, value func(requestCount) int64) int64 {
	var n int64
	for key, c := range s.writes {
		if include(key) {
			n += value(c)
		}
	}
	return n
}

func notEvent(key string) bool       { return !isEvent(key) }
func anyWrite(string) bool           { return true }
func requests(c requestCount) int64  { return c.n }
func bodyBytes(c requestCount) int64 { return c.bytes }

// objectWrites counts the writes of objects and their subresources, Events left out.
func (s tallySnapshot) objectWrites() int64 { return s.sum(notEvent, requests) }

func (s tallySnapshot) events() int64 { return s.sum(isEvent, requests) }

// writeBytes is the request bodies' bytes of the object writes, Events left out.
func (s tallySnapshot) writeBytes() int64 { return s.sum(notEvent, bodyBytes) }

func (s tallySnapshot) failed() int64 {
	return s.sum(anyWrite, func(c requestCount) int64 { return c.failed })
}
