package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
