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
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/flags"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/internal/test/testenv"
)

// TestCacheHoldsOnlySecretsOfClusters: the manager's cache, as it watches Secrets' metadata for
// refreshed bootstrap data, holds the Secrets labelled with a Cluster's name and no other.
func TestCacheHoldsOnlySecretsOfClusters(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := testenv.StartManagement(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "bootstrap-data", Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "someone-elses"}},
	} {
		g.Expect(env.Client.Create(ctx, s)).To(Succeed())
	}

	opts, err := cacheOptions("")
	g.Expect(err).NotTo(HaveOccurred())
	opts.Scheme = newScheme()
	cache, err := ctrlcache.New(env.Config, opts)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = cache.Start(ctx) }()
	g.Expect(cache.WaitForCacheSync(ctx)).To(BeTrue())

	secrets := &metav1.PartialObjectMetadataList{}
	secrets.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	g.Eventually(func(g Gomega) {
		g.Expect(cache.List(ctx, secrets, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
		var names []string
		for _, s := range secrets.Items {
			names = append(names, s.Name)
		}
		g.Expect(names).To(ConsistOf("bootstrap-data"))
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())

	opts, err = cacheOptions("tenant-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(opts.DefaultNamespaces).To(HaveKey("tenant-a"))
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
