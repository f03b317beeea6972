//go:build kind

package kind

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestDefaultStorageClassProvisions: the node image has no local-path-provisioner, so kind installs
// its fallback StorageClass "standard" (kubernetes.io/host-path); make kind-management enables
// kube-controller-manager's host-path provisioner, which binds a claim of that class.
func TestDefaultStorageClassProvisions(t *testing.T) {
	g := NewWithT(t)
	m := connect(t)
	ctx := t.Context()

	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kind-storage-", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}
	g.Expect(m.client.Create(ctx, claim)).To(Succeed())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = m.client.Delete(ctx, claim)
	})
	g.Eventually(func(g Gomega) {
		g.Expect(m.client.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
		g.Expect(claim.Status.Phase).To(Equal(corev1.ClaimBound))
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	g.Expect(claim.Spec.StorageClassName).To(HaveValue(Equal("standard")))
	t.Logf("claim %s bound to %s of StorageClass standard", claim.Name, claim.Spec.VolumeName)
}
