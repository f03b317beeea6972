package conformance

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// scriptedPool plays a provider: each sample its instances move one step along the script, and
// the control plane's status follows its own script.
type scriptedPool struct {
	mu        sync.Mutex
	c         client.Client
	step      int
	instances [][]string
	cpStatus  [][]string
	available []string
}

func (p *scriptedPool) InstanceVersions(ctx context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := min(p.step, len(p.instances)-1)
	p.step++
	// The control plane moves on after this sample, as if reconciled in between.
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "c1-cp"}, kcp); err != nil {
		return nil, err
	}
	kcp.Status.Versions = nil
	for _, v := range p.cpStatus[min(p.step, len(p.cpStatus)-1)] {
		kcp.Status.Versions = append(kcp.Status.Versions, clusterv1.StatusVersion{Version: v, Replicas: 1})
	}
	if err := p.c.Status().Update(ctx, kcp); err != nil {
		return nil, err
	}
	return p.instances[i], nil
}

func (p *scriptedPool) MakeVersionAvailable(_ context.Context, version string) error {
	p.available = append(p.available, version)
	return nil
}

func TestUpgradeBothAtOnce(t *testing.T) {
	const from, to = "v1.36.3", "v1.37.2"
	cpAlong := [][]string{{from}, {from}, {from, to}, {to}, {to}, {to}}
	tests := []struct {
		name           string
		instances      [][]string
		wantViolations []string
		wantErr        string
	}{
		{
			name:      "a gated pool waits for the control plane",
			instances: [][]string{{from, from}, {from, from}, {from, from}, {from, from}, {from, to}, {to, to}},
		},
		{
			name:      "an ungated pool creates new kubelets at once",
			instances: [][]string{{from, to}, {to, to}, {to, to}, {to, to}},
			// One instance in the first sample, two in each of the next two, until the control
			// plane reports only v1.37.2.
			wantViolations: []string{
				"instance's kubelet v1.37.2 newer than kube-apiserver v1.36.3",
				"instance's kubelet v1.37.2 newer than kube-apiserver v1.36.3",
				"instance's kubelet v1.37.2 newer than kube-apiserver v1.36.3",
				"instance's kubelet v1.37.2 newer than kube-apiserver v1.36.3",
				"instance's kubelet v1.37.2 newer than kube-apiserver v1.36.3",
			},
		},
		{
			name:           "a version that cannot be read counts",
			instances:      [][]string{{"latest"}, {from, from}, {from, from}, {from, from}, {to, to}},
			wantViolations: []string{`"latest" is not a Kubernetes version`},
		},
		{
			name:      "a pool that never gets there",
			instances: [][]string{{from, from}},
			wantErr:   "did not complete",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			scheme := runtime.NewScheme()
			g.Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
			g.Expect(controlplanev1.AddToScheme(scheme)).To(Succeed())
			g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
			cluster := &clusterv1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"},
				Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: "c1-cp"}},
			}
			kcp := &controlplanev1.KubeadmControlPlane{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1-cp"},
				Spec:       controlplanev1.KubeadmControlPlaneSpec{Version: from},
				Status:     controlplanev1.KubeadmControlPlaneStatus{Versions: []clusterv1.StatusVersion{{Version: from, Replicas: 1}}},
			}
			mp := &clusterv1.MachinePool{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers"},
				Spec:       clusterv1.MachinePoolSpec{ClusterName: "c1", Replicas: ptr.To[int32](2), Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{Version: from}}},
				Status:     clusterv1.MachinePoolStatus{ReadyReplicas: ptr.To[int32](2)},
			}
			// The control plane's CRD says which version serves the contract, as kustomize labels it.
			crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{
				Name: "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io", Labels: map[string]string{clusterv1.GroupVersion.String(): "v1beta2"}}}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(crd, cluster, kcp, mp).WithStatusSubresource(kcp, mp).Build()
			pool := &scriptedPool{c: c, instances: tt.instances, cpStatus: cpAlong}

			report, err := UpgradeBothAtOnce(context.Background(), Input{
				Client: c, MachinePool: client.ObjectKeyFromObject(mp), Pool: pool, To: to, PoolFirst: true,
				Interval: time.Millisecond, Timeout: 200 * time.Millisecond,
			})
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}
			var details []string
			for _, v := range report.Violations {
				details = append(details, v.Detail)
			}
			g.Expect(details).To(HaveLen(len(tt.wantViolations)), "%v", details)
			for i, want := range tt.wantViolations {
				g.Expect(details[i]).To(ContainSubstring(want))
			}
			g.Expect(pool.available).To(Equal([]string{to}))
			g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(mp), mp)).To(Succeed())
			g.Expect(mp.Spec.Template.Spec.Version).To(Equal(to))
			g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(kcp), kcp)).To(Succeed())
			g.Expect(kcp.Spec.Version).To(Equal(to))
		})
	}
}
