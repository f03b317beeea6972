package realworld

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capdv1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
)

func TestRenderCluster(t *testing.T) {
	base := ClusterSpec{Name: "c1", ControlPlaneVersion: "v1.36.3", ControlPlaneReplicas: 1, PoolVersion: "v1.35.4", PoolReplicas: 2}
	withKnobs := base
	withKnobs.SkipAddons = true
	withKnobs.KubeadmTimeout = 10 * time.Minute
	withKnobs.ControlPlaneBootstrapTimeout = 15 * time.Minute

	tests := []struct {
		name                 string
		spec                 ClusterSpec
		wantBootstrapTimeout *metav1.Duration
		wantKubeadmSeconds   *int32
		wantSkippedAddons    bool
	}{
		{name: "the template as it is", spec: base},
		{
			name:                 "the suite's knobs",
			spec:                 withKnobs,
			wantBootstrapTimeout: &metav1.Duration{Duration: 15 * time.Minute},
			wantKubeadmSeconds:   ptr.To[int32](600),
			wantSkippedAddons:    true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := renderCluster(context.Background(), tt.spec)
			g.Expect(err).NotTo(HaveOccurred())

			dmt := &capdv1.DockerMachineTemplate{} //nolint:staticcheck // the kind the template uses
			g.Expect(fromObjects(objs, "DockerMachineTemplate", dmt)).To(Succeed())
			g.Expect(dmt.Spec.Template.Spec.BootstrapTimeout).To(Equal(tt.wantBootstrapTimeout))

			kcp := &controlplanev1.KubeadmControlPlane{}
			g.Expect(fromObjects(objs, "KubeadmControlPlane", kcp)).To(Succeed())
			g.Expect(kcp.Spec.Version).To(Equal(tt.spec.ControlPlaneVersion))
			g.Expect(kcp.Spec.KubeadmConfigSpec.JoinConfiguration.Timeouts.EtcdAPICallSeconds).To(Equal(tt.wantKubeadmSeconds))
			g.Expect(kcp.Spec.KubeadmConfigSpec.InitConfiguration.Timeouts.ControlPlaneComponentHealthCheckSeconds).To(Equal(tt.wantKubeadmSeconds))
			var wantSkipPhases []string
			if tt.wantSkippedAddons {
				wantSkipPhases = []string{"addon/coredns", "addon/kube-proxy"}
			}
			g.Expect(kcp.Spec.KubeadmConfigSpec.InitConfiguration.SkipPhases).To(Equal(wantSkipPhases))
			_, skipsCoreDNS := kcp.Annotations[controlplanev1.SkipCoreDNSAnnotation]
			g.Expect(skipsCoreDNS).To(Equal(tt.wantSkippedAddons))

			mp := &clusterv1.MachinePool{}
			g.Expect(fromObjects(objs, "MachinePool", mp)).To(Succeed())
			g.Expect(mp.Spec.Template.Spec.Version).To(Equal(tt.spec.PoolVersion))
			g.Expect(mp.Spec.Replicas).To(Equal(ptr.To(int32(tt.spec.PoolReplicas))))

			dc := &capdv1.DockerCluster{} //nolint:staticcheck // the kind the template uses
			g.Expect(fromObjects(objs, "DockerCluster", dc)).To(Succeed())
			g.Expect(dc.Spec.ControlPlaneEndpoint.Port).To(BeEquivalentTo(6443), "CAPD's webhook default")
		})
	}
}

// fromObjects converts the one object of kind in objs into into.
func fromObjects(objs []unstructured.Unstructured, kind string, into runtime.Object) error {
	var found []unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		return fmt.Errorf("want one %s, found %d", kind, len(found))
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(found[0].Object, into)
}
