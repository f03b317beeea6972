package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// TestStart starts both API servers and checks what CABPK and the stub kubeadm rely on.
func TestStart(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Now()
	env, err := Start(ctx, Options{Workload: true})
	g.Expect(err).ToNot(HaveOccurred())
	t.Logf("TIMING both API servers started in %s (management %s, workload %s)", time.Since(start).Round(time.Millisecond),
		env.Management.StartDuration.Round(time.Millisecond), env.Workload.StartDuration.Round(time.Millisecond))
	defer func() {
		stop := time.Now()
		g.Expect(env.Stop()).To(Succeed())
		t.Logf("TIMING both API servers stopped in %s", time.Since(stop).Round(time.Millisecond))
	}()
	m, w := env.Management, env.Workload

	// The management API server serves our kinds and Cluster API's.
	g.Expect(m.Client.List(ctx, &infrav1.DockerMachinePoolList{})).To(Succeed())
	g.Expect(m.Client.List(ctx, &clusterv1.MachinePoolList{})).To(Succeed())

	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "c1"},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork:       clusterv1.ClusterNetwork{Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"10.244.0.0/16"}}},
			ControlPlaneEndpoint: w.Endpoint,
		},
	}
	g.Expect(m.Client.Create(ctx, cluster)).To(Succeed())
	g.Expect(w.CreateClusterSecrets(ctx, m.Client, cluster)).To(Succeed())
	ca := &corev1.Secret{}
	g.Expect(m.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, secret.ClusterCA)}, ca)).To(Succeed())
	g.Expect(ca.Data[secret.TLSCrtDataName]).To(Equal(w.CAData))
	g.Expect(ca.Data[secret.TLSKeyDataName]).ToNot(BeEmpty())
	kubeconfig := &corev1.Secret{}
	g.Expect(m.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, secret.Kubeconfig)}, kubeconfig)).To(Succeed())
	g.Expect(kubeconfig.OwnerReferences).To(ContainElement(HaveField("UID", cluster.UID)))

	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(w.CAData)).To(BeTrue())
	httpClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	get := func(path, token string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.Server()+path, http.NoBody)
		g.Expect(err).ToNot(HaveOccurred())
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpClient.Do(req)
		g.Expect(err).ToNot(HaveOccurred())
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	// kubeadm discovery reads cluster-info anonymously.
	g.Expect(get("/api/v1/namespaces/kube-public/configmaps/cluster-info", "")).To(Equal(http.StatusOK))

	valid, err := w.CreateBootstrapToken(ctx, time.Now().Add(time.Hour))
	g.Expect(err).ToNot(HaveOccurred())
	expired, err := w.CreateBootstrapToken(ctx, time.Now().Add(-time.Minute))
	g.Expect(err).ToNot(HaveOccurred())
	g.Eventually(func() int { return get("/api", valid) }, 5*time.Second, 100*time.Millisecond).Should(Equal(http.StatusOK))
	g.Expect(get("/api", valid[:7]+"0000000000000000")).To(Equal(http.StatusUnauthorized))
	g.Expect(get("/api", expired)).To(Equal(http.StatusUnauthorized))
	// The bootstrappers group may read Nodes (and register them).
	g.Expect(get("/api/v1/nodes/none", valid)).To(Equal(http.StatusNotFound))
}
