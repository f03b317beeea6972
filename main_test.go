package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/flags"
	"sigs.k8s.io/cluster-api/util/test/builder"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/internal/test/testenv"
)

// TestCacheOptions: the manager's cache watches the namespace of --namespace, all when empty,
// selects nothing of Secrets, which it does not hold, and holds objects without their
// managedFields.
func TestCacheOptions(t *testing.T) {
	g := NewWithT(t)
	g.Expect(cacheOptions("").DefaultNamespaces).To(BeEmpty())
	g.Expect(cacheOptions("tenant-a").DefaultNamespaces).To(HaveKey("tenant-a"))
	g.Expect(cacheOptions("").ByObject).ToNot(HaveKey(BeAssignableToTypeOf(&corev1.Secret{})))

	machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "capi"}}}}
	cached, err := cacheOptions("").DefaultTransform(machine)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(cached.(*clusterv1.Machine).ManagedFields).To(BeEmpty())
	g.Expect(cached.(*clusterv1.Machine).Name).To(Equal("m"))
}

// forbiddenRecorder records the requests the API server refuses (403) on a client's transport.
type forbiddenRecorder struct {
	mu      sync.Mutex
	refused []string
}

func (f *forbiddenRecorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusForbidden {
			f.mu.Lock()
			f.refused = append(f.refused, req.Method+" "+req.URL.RequestURI())
			f.mu.Unlock()
		}
		return resp, err
	})
}

func (f *forbiddenRecorder) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.refused)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestManagerRunsWithItsRole runs the manager with the credentials of its ServiceAccount bound to
// the ClusterRole config/rbac/role.yaml ships and to nothing else, as in a management cluster: it
// creates a pool's container and deletes the pool again, and the API server refuses none of its
// requests (informers included: a watch the role does not allow would never sync). The role lets
// it get a Secret by name and never list or watch Secrets, in any namespace.
func TestManagerRunsWithItsRole(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := testenv.StartManagement(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	_, err = envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{builder.GenericControlPlaneCRD.DeepCopy()}})
	g.Expect(err).NotTo(HaveOccurred())
	managerConfig, err := env.ManagerConfig(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	refused := &forbiddenRecorder{}
	managerConfig.Wrap(refused.wrap)

	t.Run("the role reads Secrets by name only", func(t *testing.T) {
		user := "system:serviceaccount:capdmp-system:capdmp-manager"
		tests := []struct {
			verb, namespace string
			want            bool
		}{
			{verb: "get", namespace: "default", want: true},
			{verb: "list", namespace: "default"},
			{verb: "list"},
			{verb: "watch", namespace: "default"},
			{verb: "watch"},
			{verb: "update", namespace: "default"},
		}
		for _, tt := range tests {
			g := NewWithT(t)
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:capdmp-system"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tt.verb, Resource: "secrets", Namespace: tt.namespace},
			}}
			g.Expect(env.Client.Create(ctx, review)).To(Succeed())
			g.Expect(review.Status.Allowed).To(Equal(tt.want), "%s secrets in %q", tt.verb, tt.namespace)
		}
	})

	const ns, version = metav1.NamespaceDefault, "v1.31.0"
	for _, o := range poolWorld(ns, version) {
		status := o.DeepCopyObject().(client.Object)
		g.Expect(env.Client.Create(ctx, o)).To(Succeed(), "%T %s", o, o.GetName())
		if u, ok := status.(*unstructured.Unstructured); ok && u.Object["status"] != nil {
			u.SetResourceVersion(o.GetResourceVersion())
			g.Expect(env.Client.Status().Update(ctx, u)).To(Succeed())
		}
		if c, ok := status.(*bootstrapv1.KubeadmConfig); ok {
			c.SetResourceVersion(o.GetResourceVersion())
			g.Expect(env.Client.Status().Update(ctx, c)).To(Succeed())
		}
	}

	machinePool := &clusterv1.MachinePool{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mp"}, machinePool)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: "pool", Labels: map[string]string{clusterv1.ClusterNameLabel: "cluster"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachinePool", Name: machinePool.Name, UID: machinePool.UID}},
	}})).To(Succeed())

	rt := fakeruntime.NewWithNodeImages("kindest/node:" + version)
	o := &options{}
	o.addFlags(pflag.NewFlagSet("manager", pflag.ContinueOnError))
	o.managerOptions.DiagnosticsAddress, o.healthProbeBindAddr, o.enableWebhooks, o.skipNameValidation = "0", "0", false, true
	mgrCtx, stop := context.WithCancel(ctx)
	mgr, err := newManager(mgrCtx, o, managerConfig, rt)
	g.Expect(err).NotTo(HaveOccurred())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	pool := &infrav1.DockerMachinePool{}
	key := client.ObjectKey{Namespace: ns, Name: "pool"}
	g.Eventually(func(g Gomega) {
		g.Expect(rt.Containers()).To(HaveLen(1))
		machines := &infrav1.DockerMachinePoolMachineList{}
		g.Expect(env.Client.List(ctx, machines, client.InNamespace(ns))).To(Succeed())
		g.Expect(machines.Items).To(HaveLen(1))
		g.Expect(env.Client.Get(ctx, key, pool)).To(Succeed())
		g.Expect(pool.Finalizers).To(ContainElement(infrav1.MachinePoolFinalizer))
		g.Expect(pool.Status.Replicas).To(HaveValue(BeEquivalentTo(1)), "the status is patched")
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Expect(refused.all()).To(BeEmpty(), "requests the manager's role does not allow")

	g.Expect(env.Client.Delete(ctx, pool)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(rt.Containers()).To(BeEmpty())
		err := env.Client.Get(ctx, key, pool)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the pool is gone: %v", err)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Expect(refused.all()).To(BeEmpty(), "requests the manager's role does not allow")
}

// TestLeaderElectionWithItsRole: leader election as the manager runs it with --leader-elect
// (controller-runtime's, on a Lease) acquires, renews and releases its Lease with the credentials
// of a user bound to the Role config/rbac/leader_election_role.yaml ships and to nothing else, and
// the API server refuses none of its requests: the verbs test/manifests holds the Role to suffice.
func TestLeaderElectionWithItsRole(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	assets, err := testenv.BinaryAssetsDirectory(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())

	const ns, user, leaseName = "capdmp-system", "capdmp-leader", "capdmp-leader-election-test"
	g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	role := &rbacv1.Role{}
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "leader_election_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(yaml.UnmarshalStrict(raw, role)).To(Succeed())
	role.Namespace = ns
	g.Expect(admin.Create(ctx, role)).To(Succeed())
	g.Expect(admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leader-election"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})).To(Succeed())
	leader, err := env.ControlPlane.AddUser(envtest.User{Name: user}, cfg)
	g.Expect(err).NotTo(HaveOccurred())
	leaderConfig := leader.Config()
	refused := &forbiddenRecorder{}
	leaderConfig.Wrap(refused.wrap)

	// main.go's lock; durations short enough to see renewals within the test.
	mgr, err := ctrl.NewManager(leaderConfig, ctrl.Options{
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                true,
		LeaderElectionID:              leaseName,
		LeaderElectionNamespace:       ns,
		LeaderElectionResourceLock:    resourcelock.LeasesResourceLock,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(2 * time.Second),
		RenewDeadline:                 ptr.To(time.Second),
		RetryPeriod:                   ptr.To(200 * time.Millisecond),
	})
	g.Expect(err).NotTo(HaveOccurred())
	mgrCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()

	g.Eventually(mgr.Elected(), 30*time.Second).Should(BeClosed(), "the leader is elected")
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: ns, Name: leaseName}
	g.Expect(admin.Get(ctx, key, lease)).To(Succeed())
	acquired := lease.Spec.RenewTime.DeepCopy()
	g.Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, key, lease)).To(Succeed())
		g.Expect(lease.Spec.RenewTime.After(acquired.Time)).To(BeTrue())
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed(), "the leader renews its Lease")

	stop()
	g.Expect(<-done).To(Succeed())
	g.Expect(admin.Get(ctx, key, lease)).To(Succeed())
	g.Expect(ptr.Deref(lease.Spec.HolderIdentity, "")).To(BeEmpty(), "the leader released its Lease")
	g.Expect(refused.all()).To(BeEmpty(), "requests the leader election Role does not allow")
}

// poolWorld is a Cluster whose control plane runs version, a MachinePool of one replica at
// version with a KubeadmConfig and the data Secret CABPK would write, and the DockerMachinePool
// the MachinePool owns.
func poolWorld(ns, version string) []client.Object {
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster"},
		Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: builder.ControlPlaneGroupVersion.Group, Kind: builder.GenericControlPlaneKind, Name: "cp",
		}}}
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(builder.ControlPlaneGroupVersion.WithKind(builder.GenericControlPlaneKind))
	cp.SetNamespace(ns)
	cp.SetName("cp")
	cp.SetLabels(map[string]string{clusterv1.ClusterNameLabel: cluster.Name})
	_ = unstructured.SetNestedSlice(cp.Object, []any{map[string]any{"version": version, "replicas": int64(1)}}, "status", "versions")
	_ = unstructured.SetNestedField(cp.Object, true, "status", "initialization", "controlPlaneInitialized")
	machinePool := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mp", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name}},
		Spec: clusterv1.MachinePoolSpec{ClusterName: cluster.Name, Replicas: ptr.To[int32](1),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: cluster.Name, Version: version,
				Bootstrap: clusterv1.Bootstrap{
					ConfigRef:      clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: "mp-config"},
					DataSecretName: ptr.To("mp-data"),
				},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "DockerMachinePool", Name: "pool"},
			}}},
	}
	config := &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mp-config", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name}},
		Status: bootstrapv1.KubeadmConfigStatus{DataSecretName: "mp-data"}}
	data := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mp-data", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name}},
		Type:       clusterv1.ClusterSecretType,
		Data: map[string][]byte{"format": []byte("cloud-config"), "value": []byte("#cloud-config\nruncmd:\n- kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml\n" +
			"write_files:\n- path: /run/kubeadm/kubeadm-join-config.yaml\n  content: |\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: JoinConfiguration\n" +
			"    discovery:\n      bootstrapToken:\n        apiServerEndpoint: 127.0.0.1:6443\n        token: abcdef.0123456789abcdef\n        unsafeSkipCAVerification: true\n")},
	}
	return []client.Object{cluster, cp, machinePool, config, data}
}

// TestVersionFlag builds the manager with the -ldflags hack/version.sh prints, as make build does,
// and checks that --version prints what they set.
func TestVersionFlag(t *testing.T) {
	g := NewWithT(t)
	root := testenv.RepoRoot()
	script := exec.Command("hack/version.sh")
	script.Dir = root
	script.Env = append(os.Environ(), "GIT_VERSION=v0.1.2", "SOURCE_DATE_EPOCH=0")
	ldflags, err := script.Output()
	g.Expect(err).NotTo(HaveOccurred(), "hack/version.sh")
	binary := filepath.Join(t.TempDir(), "manager")
	build := exec.Command("go", "build", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", binary, ".")
	build.Dir = root
	out, err := build.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "building the manager: %s", out)
	commit, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	g.Expect(err).NotTo(HaveOccurred())

	out, err = exec.Command(binary, "--version").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	printed := strings.TrimSpace(string(out))
	tests := []struct {
		name string
		want string
	}{
		{name: "version first", want: "v0.1.2 ("},
		{name: "git commit", want: "git commit: " + strings.TrimSpace(string(commit))},
		{name: "build date", want: "built: 1970-01-01T00:00:00Z"},
		{name: "Go version", want: runtime.Version()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(printed).To(ContainSubstring(tt.want))
		})
	}
	g.Expect(strings.Count(printed, "\n")).To(BeZero(), "one line, and nothing else: the manager does not start")
}

// TestReadinessWaitsForTheWebhookServer: the manager's readiness probe checks its webhook server
// when it serves webhooks (a Pod must not be ready before it can answer admission requests), and
// only that the process answers when it does not.
func TestReadinessWaitsForTheWebhookServer(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := testenv.StartManagement(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	tests := []struct {
		name           string
		enableWebhooks bool
		wantCheck      string
	}{
		{name: "webhooks", enableWebhooks: true, wantCheck: "[+]webhook ok"},
		{name: "no webhooks", enableWebhooks: false, wantCheck: "[+]ping ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			// A serving certificate and a free port for the webhook server.
			webhook := &envtest.WebhookInstallOptions{}
			g.Expect(webhook.PrepWithoutInstalling()).To(Succeed())
			t.Cleanup(func() { _ = os.RemoveAll(webhook.LocalServingCertDir) })
			healthAddr := freeLoopbackAddr(g)
			mgrCtx, stop := context.WithCancel(ctx)
			mgr, err := newManager(mgrCtx, &options{
				managerOptions: flags.ManagerOptions{DiagnosticsAddress: "0"}, healthProbeBindAddr: healthAddr,
				enableWebhooks: tt.enableWebhooks, webhookPort: webhook.LocalServingPort, webhookCertDir: webhook.LocalServingCertDir,
				syncPeriod: 10 * time.Minute, containerSyncPeriod: time.Minute, dockerNetwork: "kind",
				poolConcurrency: 1, machineConcurrency: 1, createConcurrency: 1, skipNameValidation: true,
			}, env.Config, fakeruntime.NewWithNodeImages())
			g.Expect(err).NotTo(HaveOccurred())
			done := make(chan error, 1)
			go func() { done <- mgr.Start(mgrCtx) }()
			t.Cleanup(func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("manager: %v", err)
				}
			})

			g.Eventually(func(g Gomega) {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+healthAddr+"/readyz?verbose", http.NoBody)
				g.Expect(err).NotTo(HaveOccurred())
				resp, err := http.DefaultClient.Do(req)
				g.Expect(err).NotTo(HaveOccurred())
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "%s", body)
				g.Expect(string(body)).To(ContainSubstring(tt.wantCheck))
			}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		})
	}
}

// freeLoopbackAddr is a loopback address with a port nothing listens on.
func freeLoopbackAddr(g Gomega) string {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().String()
}

// TestDiagnosticsEndpoint: by default the manager serves its metrics over HTTPS to clients the
// API server authenticates and authorizes, as Cluster API's managers do: a ServiceAccount bound to
// the shipped ClusterRole config/rbac/metrics_reader_role.yaml reads /metrics, and nothing else
// there; a request without a token or from another ServiceAccount is refused.
func TestDiagnosticsEndpoint(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := testenv.StartManagement(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	reader := &rbacv1.ClusterRole{}
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "metrics_reader_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(yaml.UnmarshalStrict(raw, reader)).To(Succeed())
	g.Expect(env.Client.Create(ctx, reader)).To(Succeed())
	tokens := map[string]string{}
	clientset, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	for _, name := range []string{"scraper", "stranger"} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}}
		g.Expect(env.Client.Create(ctx, sa)).To(Succeed())
		token, err := clientset.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		tokens[name] = token.Status.Token
	}
	g.Expect(env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: metav1.NamespaceDefault, Name: "scraper"}},
	})).To(Succeed())

	// The manager's defaults, but the address: a free loopback port.
	o := &options{}
	o.addFlags(pflag.NewFlagSet("manager", pflag.ContinueOnError))
	addr := freeLoopbackAddr(g)
	o.managerOptions.DiagnosticsAddress = addr
	o.healthProbeBindAddr, o.enableWebhooks, o.skipNameValidation = "0", false, true
	mgrCtx, stop := context.WithCancel(ctx)
	mgr, err := newManager(mgrCtx, o, env.Config, fakeruntime.NewWithNodeImages())
	g.Expect(err).NotTo(HaveOccurred())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	// The endpoint's certificate is self-signed, as in Cluster API's (its book: curl -k).
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed test endpoint
	get := func(g Gomega, path, token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, http.NoBody)
		g.Expect(err).NotTo(HaveOccurred())
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := insecure.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return resp.StatusCode, string(body)
	}
	g.Eventually(func(g Gomega) {
		code, body := get(g, "/metrics", tokens["scraper"])
		g.Expect(code).To(Equal(http.StatusOK), "%s", body)
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	tests := []struct {
		name     string
		path     string
		token    string
		wantCode int
		wantBody string
	}{
		{name: "bound ServiceAccount reads the metrics", path: "/metrics", token: tokens["scraper"], wantCode: http.StatusOK, wantBody: "controller_runtime_"},
		{name: "no token", path: "/metrics", wantCode: http.StatusUnauthorized},
		{name: "ServiceAccount without the role", path: "/metrics", token: tokens["stranger"], wantCode: http.StatusForbidden},
		{name: "the reader role does not reach pprof", path: "/debug/pprof/", token: tokens["scraper"], wantCode: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			code, body := get(g, tt.path, tt.token)
			g.Expect(code).To(Equal(tt.wantCode), "%s", body)
			g.Expect(body).To(ContainSubstring(tt.wantBody))
		})
	}
}
