package main

import (
	"context"
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
