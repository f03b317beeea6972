package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// withData replaces the value of the MachinePool's bootstrap data Secret among objs.
func withData(objs []client.Object, value string) []client.Object {
	for _, o := range objs {
		if s, ok := o.(*corev1.Secret); ok && s.Name == "mp-data" {
			s.Data["value"] = []byte(value)
		}
	}
	return objs
}

// cloudConfigMaxPods is the test data with the kubelet flag max-pods, as CABPK renders a
// KubeadmConfig's kubeletExtraArgs in kubeadm's v1beta4.
func cloudConfigMaxPods(value string) string {
	return strings.Replace(cloudConfig, "      name: '{{ ds.meta_data.local_hostname }}'\n",
		"      name: '{{ ds.meta_data.local_hostname }}'\n      kubeletExtraArgs:\n      - name: max-pods\n        value: \""+value+"\"\n", 1)
}

// TestDockerMachinePoolCapacity: the pool reports, for an autoscaler that scales it from zero,
// the capacity and system its Nodes will report: the engine's machine's CPUs, memory,
// architecture and operating system, and the kubelet's max-pods from the bootstrap data. It
// reports them at zero replicas as at any other count, and never a figure it cannot know.
func TestDockerMachinePoolCapacity(t *testing.T) {
	arm := container.Host{CPUs: 8, MemoryBytes: 16 << 30, Architecture: "aarch64", OSType: "linux"}
	tests := []struct {
		name         string
		host         *container.Host // fakeruntime.DefaultHost when nil
		replicas     int32
		noData       bool
		data         string // the bootstrap data; the test's cloudConfig when empty
		wantCapacity corev1.ResourceList
		wantNodeInfo infrav1.DockerMachinePoolNodeInfo
	}{
		{
			name:         "zero replicas: the engine's machine and the kubelet's default max-pods",
			wantCapacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
			wantNodeInfo: infrav1.DockerMachinePoolNodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
		},
		{
			name: "two replicas: the same", replicas: 2,
			wantCapacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
			wantNodeInfo: infrav1.DockerMachinePoolNodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
		},
		{
			name: "an arm64 machine (uname's aarch64)", host: &arm,
			wantCapacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")},
			wantNodeInfo: infrav1.DockerMachinePoolNodeInfo{Architecture: infrav1.ArchitectureArm64, OperatingSystem: "linux"},
		},
		{
			name: "an architecture the API does not list is not reported", host: &container.Host{CPUs: 2, MemoryBytes: 4 << 30, Architecture: "riscv64", OSType: "linux"},
			wantCapacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110")},
			wantNodeInfo: infrav1.DockerMachinePoolNodeInfo{OperatingSystem: "linux"},
		},
		{
			name: "figures the engine does not give are not reported", host: &container.Host{Architecture: "x86_64"},
			wantCapacity: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
			wantNodeInfo: infrav1.DockerMachinePoolNodeInfo{Architecture: infrav1.ArchitectureAmd64},
		},
		{
			name: "max-pods set in the bootstrap data", data: cloudConfigMaxPods("50"),
			wantCapacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("50")},
			wantNodeInfo: infrav1.DockerMachinePoolNodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
		},
		{
			name: "max-pods that cannot be read: pods not reported", data: cloudConfigMaxPods("lots"),
			wantCapacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")},
			wantNodeInfo: infrav1.DockerMachinePoolNodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
		},
		{
			name: "data that is not kubeadm's join: pods not reported", data: "#cloud-config\nruncmd:\n- /opt/join.sh\n",
			wantCapacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")},
			wantNodeInfo: infrav1.DockerMachinePoolNodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
		},
		{
			name: "no bootstrap data yet: pods not reported", noData: true,
			wantCapacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")},
			wantNodeInfo: infrav1.DockerMachinePoolNodeInfo{Architecture: infrav1.ArchitectureAmd64, OperatingSystem: "linux"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
			if tt.host != nil {
				rt.SetHost(*tt.host)
			}
			objs := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: tt.replicas, dataSecret: !tt.noData}.objects()
			if tt.data != "" {
				objs = withData(objs, tt.data)
			}
			r, _ := newTestReconciler(g, objs, rt)
			pool := reconcilePool(g, r)

			g.Expect(rt.Containers()).To(HaveLen(int(tt.replicas)))
			g.Expect(pool.Status.Capacity).To(HaveLen(len(tt.wantCapacity)), "%v", pool.Status.Capacity)
			for name, want := range tt.wantCapacity {
				got, ok := pool.Status.Capacity[name]
				g.Expect(ok).To(BeTrue(), "%s reported", name)
				g.Expect(got.Cmp(want)).To(BeZero(), "%s: %s, want %s", name, got.String(), want.String())
			}
			g.Expect(pool.Status.Capacity).ToNot(HaveKey(corev1.ResourceEphemeralStorage), "the engine does not say how large its volumes' filesystem is")
			g.Expect(pool.Status.NodeInfo).To(Equal(tt.wantNodeInfo))
		})
	}
}

// TestDockerMachinePoolCapacityAcrossReconciles: the engine's machine is read once per
// DefaultHostPeriod for every pool the reconciler serves, and followed after it; pods follow the
// bootstrap data, and stay as recorded while the data cannot be read; a pool scaled to zero keeps
// its capacity; a pool without containers is looked at again within the period.
func TestDockerMachinePoolCapacityAcrossReconciles(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
	objs := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true}.objects()
	r, _ := newTestReconciler(g, withData(objs, cloudConfigMaxPods("50")), rt)
	now := time.Now()
	r.now = func() time.Time { return now }
	key := client.ObjectKey{Namespace: testNamespace, Name: testPool}
	pods := func(p *infrav1.DockerMachinePool) string {
		q := p.Status.Capacity[corev1.ResourcePods]
		return q.String()
	}
	cpus := func(p *infrav1.DockerMachinePool) string {
		q := p.Status.Capacity[corev1.ResourceCPU]
		return q.String()
	}

	pool := reconcilePool(g, r)
	g.Expect(rt.Containers()).To(HaveLen(2))
	g.Expect(cpus(pool)).To(Equal("4"))
	g.Expect(pods(pool)).To(Equal("50"))
	g.Expect(rt.Calls()["Host"]).To(BeEquivalentTo(1))

	// Scaled to zero: the machine is not read again within the period, the capacity stays.
	mp := &clusterv1.MachinePool{}
	g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: "mp"}, mp)).To(Succeed())
	mp.Spec.Replicas = ptr.To[int32](0)
	g.Expect(r.Client.Update(ctx, mp)).To(Succeed())
	rt.SetHost(container.Host{CPUs: 16, MemoryBytes: 64 << 30, Architecture: "x86_64", OSType: "linux"})
	pool = reconcilePool(g, r)
	g.Expect(cpus(pool)).To(Equal("4"), "read within the period")
	g.Expect(rt.Calls()["Host"]).To(BeEquivalentTo(1))
	for _, c := range rt.Containers() {
		g.Expect(rt.Delete(ctx, c.Name)).To(Succeed()) // what the machines' controller does
	}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(res.RequeueAfter).To(Equal(DefaultHostPeriod), "a pool at zero is looked at again to follow the engine's machine")

	// After the period the new machine is read.
	now = now.Add(DefaultHostPeriod)
	pool = reconcilePool(g, r)
	g.Expect(rt.Containers()).To(BeEmpty())
	g.Expect(cpus(pool)).To(Equal("16"), "the resized machine")
	g.Expect(pods(pool)).To(Equal("50"))
	g.Expect(rt.Calls()["Host"]).To(BeEquivalentTo(2))

	// The data goes (CABPK re-creates it): the recorded pods stand meanwhile.
	secret := &corev1.Secret{}
	g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: "mp-data"}, secret)).To(Succeed())
	g.Expect(r.Client.Delete(ctx, secret)).To(Succeed())
	pool = reconcilePool(g, r)
	g.Expect(pods(pool)).To(Equal("50"))

	// A failed read of the machine fails the reconcile, after the scale phases ran.
	now = now.Add(DefaultHostPeriod)
	rt.SetError("Host", errors.New("permission denied"))
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	g.Expect(err).To(MatchError(ContainSubstring("failed to read the engine's machine")))
	g.Expect(r.Client.Get(ctx, key, pool)).To(Succeed())
	g.Expect(cpus(pool)).To(Equal("16"), "the last capacity stands")
}
