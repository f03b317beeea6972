package managementplane

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
