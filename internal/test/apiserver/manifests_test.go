package apiserver

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestCRDs(t *testing.T) {
	g := NewWithT(t)
	crds, err := CRDs()
	g.Expect(err).ToNot(HaveOccurred())
	labels := map[string]string{}
	for _, crd := range crds {
		labels[crd.Name] = crd.Labels[ContractLabel]
	}
	g.Expect(labels).To(HaveKeyWithValue("clusters.cluster.x-k8s.io", "v1beta2"))
	g.Expect(labels).To(HaveKeyWithValue("machinepools.cluster.x-k8s.io", "v1beta2"))
	g.Expect(labels).To(HaveKeyWithValue("kubeadmconfigs.bootstrap.cluster.x-k8s.io", "v1beta2"))
	g.Expect(labels).To(HaveKeyWithValue("kubeadmcontrolplanes.controlplane.cluster.x-k8s.io", "v1beta2"))
	g.Expect(labels).To(HaveKeyWithValue("dockerclusters.infrastructure.cluster.x-k8s.io", "v1beta2"))
	g.Expect(labels).To(HaveKeyWithValue("dockermachinepools.infrastructure.capdmp.dev", "v1alpha1"))
	for name, label := range labels {
		g.Expect(label).ToNot(BeEmpty(), name)
	}
}

func TestWebhookConfigurations(t *testing.T) {
	g := NewWithT(t)
	own, err := capdmpWebhooks()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(own.mutating).To(HaveLen(1))
	g.Expect(own.validating).To(HaveLen(1))
	g.Expect(own.mutating[0].Name).To(Equal("capdmp-mutating-webhook-configuration"), "named as config/default's namePrefix does")

	own.serveAt("127.0.0.1:9443", []byte("ca"))
	for _, c := range own.validating {
		for _, w := range c.Webhooks {
			g.Expect(w.ClientConfig.Service).To(BeNil())
			g.Expect(w.ClientConfig.URL).To(HaveValue(HavePrefix("https://127.0.0.1:9443/validate-infrastructure-capdmp-dev-v1alpha1-")))
			g.Expect(w.ClientConfig.CABundle).To(Equal([]byte("ca")))
		}
	}

	upstream, err := clusterAPIWebhooks()
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, c := range upstream.validating {
		names = append(names, c.Name)
	}
	g.Expect(names).To(ConsistOf("capi-validating-webhook-configuration", "capi-kubeadm-bootstrap-validating-webhook-configuration",
		"capi-kubeadm-control-plane-validating-webhook-configuration", "capd-validating-webhook-configuration"))

	var bad webhookConfigurations
	g.Expect(bad.add([]byte("kind: ConfigMap\n"), "x-")).To(MatchError(ContainSubstring("unexpected kind")))
}
