package controllers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/cluster-api/util/test/builder"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/internal/nodeimage"
	"github.com/capdmp/capdmp/pkg/skew"
)

const (
	testNamespace = "default"
	testCluster   = "c1"
	testPool      = "workers"
)

// world is the objects around one DockerMachinePool in a unit test.
type world struct {
	controlPlaneVersions []string // status.versions of the control plane; empty: not initialized
	machinePoolVersion   string
	customImage          string
	replicas             int32
	dataSecret           bool
	gate                 infrav1.DockerMachinePoolVersionGateStatus
}

func testScheme(g Gomega) *runtime.Scheme {
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(bootstrapv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(infrav1.AddToScheme(scheme)).To(Succeed())
	return scheme
}

const cloudConfig = `## template: jinja
#cloud-config
write_files:
- path: /run/kubeadm/kubeadm-join-config.yaml
  owner: root:root
  permissions: '0640'
  content: |
    apiVersion: kubeadm.k8s.io/v1beta4
    kind: JoinConfiguration
    discovery:
      bootstrapToken:
        apiServerEndpoint: 127.0.0.1:6443
        token: abcdef.0123456789abcdef
        unsafeSkipCAVerification: true
    nodeRegistration:
      name: '{{ ds.meta_data.local_hostname }}'
runcmd:
- kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml
`

func (w world) objects() []client.Object {
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testCluster, UID: "cluster-uid"},
		Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: builder.ControlPlaneGroupVersion.Group, Kind: builder.GenericControlPlaneKind, Name: "cp",
		}},
	}
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(builder.ControlPlaneGroupVersion.WithKind(builder.GenericControlPlaneKind))
	cp.SetNamespace(testNamespace)
	cp.SetName("cp")
	cp.SetLabels(map[string]string{clusterv1.ClusterNameLabel: testCluster})
	if len(w.controlPlaneVersions) > 0 {
		var versions []any
		for _, v := range w.controlPlaneVersions {
			versions = append(versions, map[string]any{"version": v, "replicas": int64(1)})
		}
		_ = unstructured.SetNestedSlice(cp.Object, versions, "status", "versions")
		_ = unstructured.SetNestedField(cp.Object, true, "status", "initialization", "controlPlaneInitialized")
	}

	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "mp", UID: "mp-uid",
			Labels: map[string]string{clusterv1.ClusterNameLabel: testCluster}},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: testCluster,
			Replicas:    ptr.To(w.replicas),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: testCluster,
				Version:     w.machinePoolVersion,
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: "mp-config",
				}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "DockerMachinePool", Name: testPool,
				},
			}},
		},
	}
	config := &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "mp-config"}}
	objs := []client.Object{cluster, cp, mp, builder.GenericControlPlaneCRD.DeepCopy(), config}
	if w.dataSecret {
		// As CABPK writes it.
		config.Status.DataSecretName = "mp-data"
		mp.Spec.Template.Spec.Bootstrap.DataSecretName = ptr.To("mp-data")
		objs = append(objs, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "mp-data", Labels: map[string]string{clusterv1.ClusterNameLabel: testCluster}},
			Type:       clusterv1.ClusterSecretType,
			Data:       map[string][]byte{"value": []byte(cloudConfig), "format": []byte("cloud-config")},
		})
	}
	pool := &infrav1.DockerMachinePool{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNamespace, Name: testPool, UID: "pool-uid",
			Labels:          map[string]string{clusterv1.ClusterNameLabel: testCluster},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachinePool", Name: "mp", UID: "mp-uid"}},
			Finalizers:      []string{infrav1.MachinePoolFinalizer},
		},
		Spec:   infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: w.customImage}},
		Status: infrav1.DockerMachinePoolStatus{VersionGate: w.gate, Conditions: []metav1.Condition{notPaused()}},
	}
	return append(objs, pool)
}

// notPaused is the Paused condition of an object already reconciled once, so that a test's
// reconcile does the work instead of only recording the condition.
func notPaused() metav1.Condition {
	return metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason, LastTransitionTime: metav1.Now()}
}

func image(g Gomega, version string) string {
	img, err := nodeimage.ImageForVersion(version, "")
	g.Expect(err).ToNot(HaveOccurred())
	return img
}

// nodeContainer is a container of the pool as the controller would have made it.
func nodeContainer(g Gomega, name, version string, created time.Time) container.Container {
	label, err := skew.VersionLabelValue(version)
	g.Expect(err).ToNot(HaveOccurred())
	return container.Container{
		Name: name, Image: image(g, version), Running: true, CreatedAt: created,
		Labels: map[string]string{
			infrav1.PoolUIDLabel: "pool-uid", infrav1.PoolNameLabel: testPool, infrav1.ClusterNameLabel: testCluster,
			infrav1.KubernetesVersionLabel: label,
		},
	}
}

// fakeClusterCache serves one workload cluster's client.
type fakeClusterCache struct {
	clustercache.ClusterCache
	workload client.Client
}

func (f fakeClusterCache) GetClient(context.Context, client.ObjectKey) (client.Client, error) {
	return f.workload, nil
}

// newTestReconciler returns a reconciler on a fake management cluster and the fake workload
// cluster it reaches, which holds the bootstrap token of the test data.
func newTestReconciler(g Gomega, objs []client.Object, rt container.Runtime) (*DockerMachinePoolReconciler, client.Client) {
	c := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(objs...).
		WithStatusSubresource(&infrav1.DockerMachinePool{}, &infrav1.DockerMachinePoolMachine{}, &clusterv1.Machine{}).
		WithInterceptorFuncs(interceptor.Funcs{List: refuseSecretLists}).Build()
	workload := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-abcdef"},
	}).Build()
	return &DockerMachinePoolReconciler{Client: c, APIReader: c, Runtime: rt, Network: "kind",
		ClusterCache: fakeClusterCache{workload: workload}}, workload
}

// refuseSecretLists refuses to list Secrets, as the API server refuses the manager, whose role
// may only get them by name (config/rbac/role.yaml).
func refuseSecretLists(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
	gvk, err := apiutil.GVKForObject(list, c.Scheme())
	if err != nil {
		return err
	}
	if gvk.Group == "" && gvk.Kind == "SecretList" {
		return apierrors.NewForbidden(corev1.Resource("secrets"), "", errors.New("the manager may not list Secrets"))
	}
	return c.List(ctx, list, opts...)
}

func reconcilePool(g Gomega, r *DockerMachinePoolReconciler) *infrav1.DockerMachinePool {
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: testPool}})
	g.Expect(err).ToNot(HaveOccurred())
	pool := &infrav1.DockerMachinePool{}
	g.Expect(r.Client.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: testPool}, pool)).To(Succeed())
	return pool
}

func versionsOf(cs []container.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Labels[infrav1.KubernetesVersionLabel])
	}
	return out
}

func TestDockerMachinePoolGate(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name              string
		world             world
		existing          []string // versions of containers already in the pool, oldest first
		missingImage      bool
		wantVersions      []string
		wantGate          metav1.ConditionStatus
		wantGateReason    string
		wantGateMessage   string // a substring of the gate's message
		wantCreatedReason string
		wantPoolLabel     string
	}{
		{
			name:          "control plane at the target: creates all replicas of the target",
			world:         world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 3, dataSecret: true},
			wantVersions:  []string{"v1.31.0", "v1.31.0", "v1.31.0"},
			wantGate:      metav1.ConditionTrue,
			wantPoolLabel: "v1.31.0",
		},
		{
			name:              "control plane older: creates nothing of the new version",
			world:             world{controlPlaneVersions: []string{"v1.30.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true},
			wantGate:          metav1.ConditionFalse,
			wantGateReason:    string(skew.ControlPlaneOlder),
			wantCreatedReason: infrav1.WaitingForVersionGateReason,
			wantPoolLabel:     "v1.31.0",
		},
		{
			name:              "HA control plane mid-upgrade: the oldest apiserver bounds the pool",
			world:             world{controlPlaneVersions: []string{"v1.31.0", "v1.30.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true},
			wantGate:          metav1.ConditionFalse,
			wantGateReason:    string(skew.ControlPlaneOlder),
			wantCreatedReason: infrav1.WaitingForVersionGateReason,
		},
		{
			name: "waiting: scale-up and replacements at the last admitted version",
			world: world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.32.0", replicas: 3, dataSecret: true,
				// The data was re-rendered since the pause began.
				gate: infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.31.0", AdmittedImage: "kindest/node:v1.31.0",
					WaitingReason: string(skew.ControlPlaneOlder), WaitingSince: &metav1.Time{Time: now.Add(-time.Hour)}, BootstrapDataHashAtPause: "older"}},
			existing:       []string{"v1.31.0"},
			wantVersions:   []string{"v1.31.0", "v1.31.0", "v1.31.0"},
			wantGate:       metav1.ConditionFalse,
			wantGateReason: string(skew.ControlPlaneOlder),
		},
		{
			// An autoscaler raising a pool from zero while the gate waits: no container says what
			// was admitted, status does.
			name: "waiting, no container: scale-up from zero at the last admitted version",
			world: world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.32.0", replicas: 2, dataSecret: true,
				gate: infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.31.0", AdmittedImage: "kindest/node:v1.31.0",
					WaitingReason: string(skew.ControlPlaneOlder), WaitingSince: &metav1.Time{Time: now.Add(-time.Hour)}, BootstrapDataHashAtPause: "older"}},
			wantVersions:   []string{"v1.31.0", "v1.31.0"},
			wantGate:       metav1.ConditionFalse,
			wantGateReason: string(skew.ControlPlaneOlder),
		},
		{
			name: "waiting: no replacement whose kubeadm cannot read the data (v1beta4 for 1.30)",
			world: world{controlPlaneVersions: []string{"v1.30.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true,
				gate: infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.30.0", AdmittedImage: "kindest/node:v1.30.0",
					WaitingReason: string(skew.ControlPlaneOlder), WaitingSince: &metav1.Time{Time: now.Add(-time.Hour)}, BootstrapDataHashAtPause: "older"}},
			existing:          []string{"v1.30.0"},
			wantVersions:      []string{"v1.30.0"},
			wantGate:          metav1.ConditionFalse,
			wantGateReason:    string(skew.ControlPlaneOlder),
			wantCreatedReason: unreadableJoinConfigurationReason,
		},
		{
			name:              "custom image ahead of the MachinePool: one object is stale",
			world:             world{controlPlaneVersions: []string{"v1.32.0"}, machinePoolVersion: "v1.31.0", customImage: "kindest/node:v1.32.0", replicas: 1, dataSecret: true},
			wantGate:          metav1.ConditionFalse,
			wantGateReason:    string(skew.VersionMismatch),
			wantCreatedReason: infrav1.WaitingForVersionGateReason,
			wantPoolLabel:     "v1.32.0",
		},
		{
			// Cluster API leaves the MachinePool's version optional; the image's tag says it.
			name:          "custom image, MachinePool without a version: the image's version is the target",
			world:         world{controlPlaneVersions: []string{"v1.31.0"}, customImage: "kindest/node:v1.31.0", replicas: 2, dataSecret: true},
			wantVersions:  []string{"v1.31.0", "v1.31.0"},
			wantGate:      metav1.ConditionTrue,
			wantPoolLabel: "v1.31.0",
		},
		{
			name:              "custom image newer than the control plane, MachinePool without a version: the gate still holds",
			world:             world{controlPlaneVersions: []string{"v1.30.0"}, customImage: "kindest/node:v1.31.0", replicas: 1, dataSecret: true},
			wantGate:          metav1.ConditionFalse,
			wantGateReason:    string(skew.ControlPlaneOlder),
			wantCreatedReason: infrav1.WaitingForVersionGateReason,
			wantPoolLabel:     "v1.31.0",
		},
		{
			name:              "neither a MachinePool version nor a custom image: says which fields to set",
			world:             world{controlPlaneVersions: []string{"v1.31.0"}, replicas: 1, dataSecret: true},
			wantGate:          metav1.ConditionFalse,
			wantGateReason:    string(skew.InvalidVersion),
			wantGateMessage:   "set the MachinePool's spec.template.spec.version or the DockerMachinePool's spec.template.customImage",
			wantCreatedReason: infrav1.WaitingForVersionGateReason,
		},
		{
			name:              "control plane not initialized",
			world:             world{machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true},
			wantGate:          metav1.ConditionFalse,
			wantGateReason:    string(skew.ControlPlaneUnknown),
			wantCreatedReason: infrav1.WaitingForVersionGateReason,
		},
		{
			name:              "more than three minors behind the control plane",
			world:             world{controlPlaneVersions: []string{"v1.35.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true},
			wantGate:          metav1.ConditionFalse,
			wantGateReason:    string(skew.TooOld),
			wantCreatedReason: infrav1.WaitingForVersionGateReason,
		},
		{
			name:              "image missing on the engine: never pulled, reported by name",
			world:             world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true},
			missingImage:      true,
			wantGate:          metav1.ConditionTrue,
			wantCreatedReason: infrav1.ImageNotFoundReason,
		},
		{
			name:              "no bootstrap data yet",
			world:             world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1},
			wantGate:          metav1.ConditionTrue,
			wantCreatedReason: infrav1.WaitingForBootstrapDataReason,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rt := fakeruntime.NewWithNodeImages()
			if !tt.missingImage {
				for _, v := range []string{"v1.30.0", "v1.31.0", "v1.32.0"} {
					rt.AddNodeImage(image(g, v))
				}
			}
			for i, v := range tt.existing {
				rt.Add(nodeContainer(g, "existing-"+itoa(i), v, now.Add(time.Duration(i)*time.Second)))
			}
			r, _ := newTestReconciler(g, tt.world.objects(), rt)

			pool := reconcilePool(g, r)

			got := versionsOf(rt.Containers())
			g.Expect(got).To(ConsistOf(stringsToAny(tt.wantVersions)...), "%+v", pool.Status.Conditions)
			gate := conditions.Get(pool, infrav1.VersionSkewCondition)
			g.Expect(gate).ToNot(BeNil())
			g.Expect(gate.Status).To(Equal(tt.wantGate), gate.Message)
			if tt.wantGateReason != "" {
				g.Expect(gate.Reason).To(Equal(tt.wantGateReason))
				g.Expect(pool.Status.VersionGate.WaitingReason).To(Equal(tt.wantGateReason))
				g.Expect(pool.Status.VersionGate.WaitingSince).ToNot(BeNil())
			}
			if tt.wantGateMessage != "" {
				g.Expect(gate.Message).To(ContainSubstring(tt.wantGateMessage))
			}
			if tt.wantCreatedReason != "" {
				created := conditions.Get(pool, infrav1.MachinesCreatedCondition)
				g.Expect(created).ToNot(BeNil())
				g.Expect(created.Reason).To(Equal(tt.wantCreatedReason), created.Message)
			}
			if tt.wantPoolLabel != "" {
				g.Expect(pool.Labels).To(HaveKeyWithValue(infrav1.KubernetesVersionLabel, tt.wantPoolLabel))
			}
			// Every container has its machine, labelled for MachinePool Machines.
			machines := &infrav1.DockerMachinePoolMachineList{}
			g.Expect(r.Client.List(context.Background(), machines)).To(Succeed())
			g.Expect(machines.Items).To(HaveLen(len(rt.Containers())))
			for _, m := range machines.Items {
				g.Expect(m.Labels).To(HaveKeyWithValue(clusterv1.MachinePoolNameLabel, format.MustFormatValue("mp")))
				g.Expect(m.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, testCluster))
				g.Expect(m.Labels).To(HaveKey(infrav1.KubernetesVersionLabel))
			}
			g.Expect(pool.Status.InfrastructureMachineKind).To(Equal("DockerMachinePoolMachine"))
			g.Expect(pool.Status.Replicas).To(Equal(ptr.To(int32(len(rt.Containers())))))
		})
	}
}

func stringsToAny(in []string) []any {
	out := make([]any, 0, len(in))
	for _, s := range in {
		out = append(out, s)
	}
	return out
}

// TestDockerMachinePoolPauseBookkeeping: each pause starts fresh, a pause the gate ended with
// nothing to create is forgotten, and no bootstrap token is revoked unless a container waits for
// fresh data.
func TestDockerMachinePoolPauseBookkeeping(t *testing.T) {
	now := time.Now()
	longAgo := &metav1.Time{Time: now.Add(-time.Hour)}
	tests := []struct {
		name     string
		world    world
		existing []string // versions of the pool's containers
		// staleHash puts the current data's hash in the pause (the data predates it).
		staleHash       bool
		wantPaused      bool
		wantFreshPause  bool // WaitingSince is this reconcile's, with the data's hash now
		wantTokenKept   bool
		wantRefreshCall bool
		// newest, when set, changes the newest existing container and its machine.
		newest func(c *container.Container, m *infrav1.DockerMachinePoolMachine)
	}{
		{
			name: "a pool at 0 replicas whose gate re-opened forgets the pause",
			world: world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 0, dataSecret: true,
				gate: infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.30.0", AdmittedImage: "kindest/node:v1.30.0",
					WaitingReason: string(skew.ControlPlaneOlder), WaitingSince: longAgo}},
			staleHash:     true,
			wantTokenKept: true,
		},
		{
			name: "a pause with nothing to create revokes no token",
			world: world{controlPlaneVersions: []string{"v1.30.0"}, machinePoolVersion: "v1.31.0", replicas: 0, dataSecret: true,
				gate: infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.30.0", AdmittedImage: "kindest/node:v1.30.0",
					WaitingReason: string(skew.ControlPlaneOlder), WaitingSince: longAgo}},
			staleHash:     true,
			wantPaused:    true,
			wantTokenKept: true,
		},
		{
			name: "a pause after the gate admitted starts fresh, whatever an earlier pause left",
			world: world{controlPlaneVersions: []string{"v1.30.0"}, machinePoolVersion: "v1.31.0", replicas: 0, dataSecret: true,
				gate: infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.30.0", AdmittedImage: "kindest/node:v1.30.0",
					WaitingSince: longAgo, BootstrapDataHashAtPause: "left-by-an-earlier-pause"}},
			wantPaused:     true,
			wantFreshPause: true,
			wantTokenKept:  true,
		},
		{
			name: "a rollout waiting on the gate gets fresh data at once",
			world: world{controlPlaneVersions: []string{"v1.30.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true,
				gate: infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.30.0", AdmittedImage: "kindest/node:v1.30.0",
					WaitingReason: string(skew.ControlPlaneOlder), WaitingSince: longAgo}},
			existing:        []string{"v1.30.0"},
			staleHash:       true,
			wantPaused:      true,
			wantRefreshCall: true,
		},
		{
			name:          "a container booting with the current token holds the refresh",
			world:         pausedRollout(now),
			existing:      []string{"v1.30.0", "v1.30.0"},
			staleHash:     true,
			wantPaused:    true,
			wantTokenKept: true,
			newest:        notBootstrapped(now, true),
		},
		{
			name:            "a container that died before its bootstrap does not hold the refresh",
			world:           pausedRollout(now),
			existing:        []string{"v1.30.0", "v1.30.0"},
			staleHash:       true,
			wantPaused:      true,
			wantRefreshCall: true,
			newest:          notBootstrapped(now, false),
		},
		{
			name:            "a container not bootstrapped within twice the bootstrap timeout does not hold the refresh",
			world:           pausedRollout(now),
			existing:        []string{"v1.30.0", "v1.30.0"},
			staleHash:       true,
			wantPaused:      true,
			wantRefreshCall: true,
			newest:          notBootstrapped(now.Add(-2*infrav1.DefaultBootstrapTimeout-time.Second), true),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			rt := fakeruntime.NewWithNodeImages()
			for _, v := range []string{"v1.30.0", "v1.31.0"} {
				rt.AddNodeImage(image(g, v))
			}
			objs := tt.world.objects()
			for i, v := range tt.existing {
				c := nodeContainer(g, "existing-"+itoa(i), v, now.Add(time.Duration(i-len(tt.existing))*time.Minute))
				m := joinedMachine(c)
				if tt.newest != nil && i == len(tt.existing)-1 {
					tt.newest(&c, m)
				}
				rt.Add(c)
				objs = append(objs, m)
			}
			r, workload := newTestReconciler(g, objs, rt)
			start := time.Now()
			data, err := bootstrap.Read(ctx, r.APIReader, testNamespace, "mp-data")
			g.Expect(err).ToNot(HaveOccurred())
			if tt.staleHash {
				pauseWithCurrentData(g, r)
			}

			pool := reconcilePool(g, r)

			gate := pool.Status.VersionGate
			g.Expect(gate.WaitingSince != nil).To(Equal(tt.wantPaused), "%+v", gate)
			if !tt.wantPaused {
				g.Expect(gate.BootstrapDataHashAtPause).To(BeEmpty())
			}
			if tt.wantFreshPause {
				g.Expect(gate.WaitingSince.Time).To(BeTemporally(">=", start.Truncate(time.Second)))
				g.Expect(gate.BootstrapDataHashAtPause).To(Equal(data.Hash))
			}
			err = workload.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-abcdef"}, &corev1.Secret{})
			g.Expect(err == nil).To(Equal(tt.wantTokenKept), "the workload cluster's bootstrap token kept: %v", err)
			config := &bootstrapv1.KubeadmConfig{}
			g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: "mp-config"}, config)).To(Succeed())
			_, refreshed := config.Annotations[BootstrapRefreshRequestedAnnotation]
			g.Expect(refreshed).To(Equal(tt.wantRefreshCall))
		})
	}
}

// pauseWithCurrentData records in the pool's pause the hash of the data there is now: the data
// predates the pause, as when the pause began before the provider re-rendered it.
func pauseWithCurrentData(g Gomega, r *DockerMachinePoolReconciler) {
	ctx := context.Background()
	data, err := bootstrap.Read(ctx, r.APIReader, testNamespace, "mp-data")
	g.Expect(err).ToNot(HaveOccurred())
	pool := &infrav1.DockerMachinePool{}
	g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: testPool}, pool)).To(Succeed())
	pool.Status.VersionGate.BootstrapDataHashAtPause = data.Hash
	g.Expect(r.Client.Status().Update(ctx, pool)).To(Succeed())
}

// pausedRollout is a pool of two replicas whose rollout to v1.31.0 waits on a control plane at
// v1.30.0, in a pause that began an hour before now.
func pausedRollout(now time.Time) world {
	return world{controlPlaneVersions: []string{"v1.30.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true,
		gate: infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.30.0", AdmittedImage: "kindest/node:v1.30.0",
			WaitingReason: string(skew.ControlPlaneOlder), WaitingSince: &metav1.Time{Time: now.Add(-time.Hour)}}}
}

// notBootstrapped makes a container created at created, running or not, whose machine waits for
// its node to boot.
func notBootstrapped(created time.Time, running bool) func(*container.Container, *infrav1.DockerMachinePoolMachine) {
	return func(c *container.Container, m *infrav1.DockerMachinePoolMachine) {
		c.CreatedAt, c.Running = created, running
		m.Status = infrav1.DockerMachinePoolMachineStatus{Conditions: []metav1.Condition{
			metaCondition(infrav1.ContainerProvisionedCondition, false, infrav1.WaitingForNodeBootReason, "Waiting for the node's systemd and container runtime to start"),
		}}
		m.Status.Conditions[0].LastTransitionTime = metav1.Now()
	}
}

// TestDockerMachinePoolRefreshTarget: a pause's refresh revokes only the token of the pool's own
// KubeadmConfig's data; data it cannot refresh is said so once, in a condition, and the pool
// goes on creating the containers the gate admits instead of retrying an error forever.
func TestDockerMachinePoolRefreshTarget(t *testing.T) {
	withData := func(value string) func([]client.Object) []client.Object {
		return func(objs []client.Object) []client.Object {
			for _, o := range objs {
				if s, ok := o.(*corev1.Secret); ok && s.Name == "mp-data" {
					s.Data["value"] = []byte(value)
				}
			}
			return objs
		}
	}
	// withDataOf adds another data Secret with the given content, and what bootstraps from it:
	// consumer is "MachinePool", "Machine" or "KubeadmConfig" (one that rendered it and whose owner
	// does not name it yet) of the Cluster, "other Cluster's MachinePool", or "" for none. The
	// pool finds data Secrets through what bootstraps from them: it may not list Secrets.
	withDataOf := func(consumer, value string) func([]client.Object) []client.Object {
		return func(objs []client.Object) []client.Object {
			const name = "other-data"
			for _, o := range objs {
				if s, ok := o.(*corev1.Secret); ok && s.Name == "mp-data" {
					other := s.DeepCopy()
					other.Name = name
					other.Data["value"] = []byte(value)
					objs = append(objs, other)
				}
			}
			meta := metav1.ObjectMeta{Namespace: testNamespace, Name: "other", Labels: map[string]string{clusterv1.ClusterNameLabel: testCluster}}
			switch consumer {
			case "MachinePool", "other Cluster's MachinePool":
				clusterName := testCluster
				if consumer != "MachinePool" {
					clusterName = "other-cluster"
					meta.Labels[clusterv1.ClusterNameLabel] = clusterName
				}
				objs = append(objs, &clusterv1.MachinePool{ObjectMeta: meta, Spec: clusterv1.MachinePoolSpec{ClusterName: clusterName,
					Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{ClusterName: clusterName,
						Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(name)}}}}})
			case "Machine":
				objs = append(objs, &clusterv1.Machine{ObjectMeta: meta, Spec: clusterv1.MachineSpec{ClusterName: testCluster,
					Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(name)}}})
			case "KubeadmConfig":
				objs = append(objs, &bootstrapv1.KubeadmConfig{ObjectMeta: meta, Status: bootstrapv1.KubeadmConfigStatus{DataSecretName: name}})
			}
			return objs
		}
	}
	fileDiscovery := strings.Replace(cloudConfig, `      bootstrapToken:
        apiServerEndpoint: 127.0.0.1:6443
        token: abcdef.0123456789abcdef
        unsafeSkipCAVerification: true`, `      file:
        kubeConfigPath: /etc/kubernetes/discovery.conf`, 1)
	tests := []struct {
		name string
		// controlPlane is the control plane's version: v1.30.0 keeps the gate closed for the
		// MachinePool's v1.31.0, v1.31.0 admits it.
		controlPlane string
		// machinePool is the MachinePool's version, v1.31.0 unless set; replicas 1 unless set.
		machinePool        string
		replicas           int32
		mutate             func([]client.Object) []client.Object
		wantReason         string
		wantTokenKept      bool
		wantCreatedVersion string
		wantNothingCreated bool
	}{
		{name: "the pool's own KubeadmConfig with a token: refreshed", controlPlane: "v1.30.0",
			wantReason: infrav1.BootstrapDataRefreshingReason},
		{name: "data that discovers the cluster without a token: said, and creation goes on", controlPlane: "v1.31.0",
			mutate: withData(fileDiscovery), wantReason: infrav1.BootstrapDataNotRefreshableReason, wantTokenKept: true, wantCreatedVersion: "v1.31.0"},
		{name: "data with no kubeadm JoinConfiguration: said, and creation goes on", controlPlane: "v1.31.0",
			mutate: withData("#cloud-config\nruncmd:\n- /opt/join.sh\n"), wantReason: infrav1.BootstrapDataNotRefreshableReason, wantTokenKept: true, wantCreatedVersion: "v1.31.0"},
		{name: "another bootstrap provider: said, and creation goes on", controlPlane: "v1.31.0",
			mutate: func(objs []client.Object) []client.Object {
				for _, o := range objs {
					if mp, ok := o.(*clusterv1.MachinePool); ok {
						mp.Spec.Template.Spec.Bootstrap.ConfigRef.Kind = "TalosConfig"
					}
				}
				return objs
			},
			wantReason: infrav1.BootstrapDataNotRefreshableReason, wantTokenKept: true, wantCreatedVersion: "v1.31.0"},
		{name: "another bootstrap provider's data, which the new containers' kubeadm cannot read: creation holds",
			controlPlane: "v1.30.0", machinePool: "v1.30.0", replicas: 2,
			mutate: func(objs []client.Object) []client.Object {
				for _, o := range objs {
					if mp, ok := o.(*clusterv1.MachinePool); ok {
						mp.Spec.Template.Spec.Bootstrap.ConfigRef.Kind = "TalosConfig"
					}
				}
				return objs
			},
			wantReason: unreadableJoinConfigurationReason, wantTokenKept: true, wantNothingCreated: true},
		{name: "the MachinePool names a Secret its KubeadmConfig did not write: no token revoked", controlPlane: "v1.30.0",
			mutate: func(objs []client.Object) []client.Object {
				for _, o := range objs {
					if c, ok := o.(*bootstrapv1.KubeadmConfig); ok {
						c.Status.DataSecretName = "mp-config-data"
					}
				}
				return objs
			},
			wantReason: infrav1.BootstrapDataNotRefreshableReason, wantTokenKept: true},
		{name: "another MachinePool of the Cluster joins with the same token: not revoked", controlPlane: "v1.30.0",
			mutate:     withDataOf("MachinePool", cloudConfig),
			wantReason: infrav1.BootstrapDataNotRefreshableReason, wantTokenKept: true},
		{name: "a Machine of the Cluster joins with the same token: not revoked", controlPlane: "v1.30.0",
			mutate:     withDataOf("Machine", cloudConfig),
			wantReason: infrav1.BootstrapDataNotRefreshableReason, wantTokenKept: true},
		{name: "a KubeadmConfig of the Cluster rendered data with the same token its owner does not name yet: not revoked", controlPlane: "v1.30.0",
			mutate:     withDataOf("KubeadmConfig", cloudConfig),
			wantReason: infrav1.BootstrapDataNotRefreshableReason, wantTokenKept: true},
		{name: "another Cluster's MachinePool with a token of the same ID, in its own cluster: revoked", controlPlane: "v1.30.0",
			mutate:     withDataOf("other Cluster's MachinePool", cloudConfig),
			wantReason: infrav1.BootstrapDataRefreshingReason},
		{name: "a Secret with the same token that nothing bootstraps from: not data, revoked", controlPlane: "v1.30.0",
			mutate:     withDataOf("", cloudConfig),
			wantReason: infrav1.BootstrapDataRefreshingReason},
		{name: "another data Secret of the Cluster cannot be read: it may hold the token, not revoked", controlPlane: "v1.30.0",
			mutate:     withDataOf("MachinePool", "#cloud-config\nwrite_files: [unclosed\n"),
			wantReason: infrav1.BootstrapDataNotRefreshableReason, wantTokenKept: true},
		{name: "another data Secret names the token in a JoinConfiguration that does not parse: not revoked", controlPlane: "v1.30.0",
			mutate:     withDataOf("Machine", strings.Replace(cloudConfig, "      bootstrapToken:\n", "      bootstrapToken: [\n", 1)),
			wantReason: infrav1.BootstrapDataNotRefreshableReason, wantTokenKept: true},
		{name: "another data Secret of the Cluster with another token: revoked", controlPlane: "v1.30.0",
			mutate:     withDataOf("MachinePool", strings.Replace(cloudConfig, "abcdef.0123456789abcdef", "ghijkl.0123456789abcdef", 1)),
			wantReason: infrav1.BootstrapDataRefreshingReason},
		{name: "a data Secret named and gone: nothing shares the token, revoked", controlPlane: "v1.30.0",
			mutate: func(objs []client.Object) []client.Object {
				objs = withDataOf("Machine", cloudConfig)(objs)
				return slices.DeleteFunc(objs, func(o client.Object) bool { return o.GetName() == "other-data" })
			},
			wantReason: infrav1.BootstrapDataRefreshingReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			machinePool, replicas := "v1.31.0", int32(1)
			if tt.machinePool != "" {
				machinePool, replicas = tt.machinePool, tt.replicas
			}
			w := world{controlPlaneVersions: []string{tt.controlPlane}, machinePoolVersion: machinePool, replicas: replicas, dataSecret: true,
				gate: infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.30.0", AdmittedImage: "kindest/node:v1.30.0",
					WaitingReason: string(skew.ControlPlaneOlder), WaitingSince: &metav1.Time{Time: time.Now().Add(-time.Hour)}}}
			objs := w.objects()
			if tt.mutate != nil {
				objs = tt.mutate(objs)
			}
			rt := fakeruntime.NewWithNodeImages()
			for _, v := range []string{"v1.30.0", "v1.31.0"} {
				rt.AddNodeImage(image(g, v))
			}
			existing := nodeContainer(g, "existing-0", "v1.30.0", time.Now())
			rt.Add(existing)
			objs = append(objs, joinedMachine(existing))
			r, workload := newTestReconciler(g, objs, rt)
			pauseWithCurrentData(g, r)

			pool := reconcilePool(g, r)

			fresh := conditions.Get(pool, infrav1.BootstrapDataFreshCondition)
			g.Expect(fresh).ToNot(BeNil())
			g.Expect(fresh.Reason).To(Equal(tt.wantReason), fresh.Message)
			err := workload.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-abcdef"}, &corev1.Secret{})
			g.Expect(err == nil).To(Equal(tt.wantTokenKept), "the workload cluster's bootstrap token kept: %v", err)
			if tt.wantCreatedVersion != "" {
				g.Expect(versionsOf(rt.Containers())).To(ContainElement(tt.wantCreatedVersion), "%+v", pool.Status.Conditions)
				g.Expect(pool.Status.VersionGate.WaitingSince).To(BeNil(), "the pause the gate ended is over")
			}
			if tt.wantNothingCreated {
				g.Expect(rt.Containers()).To(HaveLen(1), "%+v", pool.Status.Conditions)
			}
		})
	}
}

// joinedMachine is the DockerMachinePoolMachine of a container that joined: its token is no
// longer in use.
func joinedMachine(c container.Container) *infrav1.DockerMachinePoolMachine {
	return &infrav1.DockerMachinePoolMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: c.Name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: testCluster, clusterv1.MachinePoolNameLabel: "mp",
				infrav1.KubernetesVersionLabel: c.Labels[infrav1.KubernetesVersionLabel]},
			OwnerReferences: []metav1.OwnerReference{poolOwnerRef("pool-uid")}},
		Status: infrav1.DockerMachinePoolMachineStatus{Initialization: infrav1.DockerMachinePoolMachineInitializationStatus{Provisioned: ptr.To(true)}},
	}
}

// TestMachinesCarryThePoolsWatchLabel: a manager run with --watch-filter reconciles only objects
// with the watch label, so the machines a pool makes carry its value, and none when it has none.
func TestMachinesCarryThePoolsWatchLabel(t *testing.T) {
	for _, watchLabel := range []string{"", "team-a"} {
		t.Run("watch label "+watchLabel, func(t *testing.T) {
			g := NewWithT(t)
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true}
			objs := w.objects()
			if watchLabel != "" {
				pool := objs[len(objs)-1].(*infrav1.DockerMachinePool)
				pool.Labels[clusterv1.WatchLabel] = watchLabel
			}
			r, _ := newTestReconciler(g, objs, rt)
			r.WatchFilterValue = watchLabel
			reconcilePool(g, r)

			machines := &infrav1.DockerMachinePoolMachineList{}
			g.Expect(r.Client.List(context.Background(), machines)).To(Succeed())
			g.Expect(machines.Items).To(HaveLen(2))
			for _, m := range machines.Items {
				if watchLabel == "" {
					g.Expect(m.Labels).NotTo(HaveKey(clusterv1.WatchLabel))
					continue
				}
				g.Expect(m.Labels).To(HaveKeyWithValue(clusterv1.WatchLabel, watchLabel))
			}
		})
	}
}

// TestMachinePoolNotYetLabelled: a pool whose MachinePool Cluster API has not labelled with its
// Cluster yet is reconciled from the MachinePool's spec.clusterName, without an error.
func TestMachinePoolNotYetLabelled(t *testing.T) {
	g := NewWithT(t)
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
	w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}
	objs := w.objects()
	for _, o := range objs {
		if mp, ok := o.(*clusterv1.MachinePool); ok {
			delete(mp.Labels, clusterv1.ClusterNameLabel)
		}
	}
	r, _ := newTestReconciler(g, objs, rt)
	reconcilePool(g, r)
	g.Expect(rt.Containers()).To(HaveLen(1))
}

// TestUnstartedContainersAreReplaced: a container the engine made and never started (the manager
// stopped between creating and starting it) is removed, through its machine when it has one, and
// the pool creates another; one that ran and stopped is left to its restart policy and to health
// checks.
func TestUnstartedContainersAreReplaced(t *testing.T) {
	tests := []struct {
		name         string
		neverStarted bool
		withMachine  bool
		// wantContainerRemoved: the pool removes the container itself (no machine); with a machine
		// the machine is deleted and its controller removes the container.
		wantContainerRemoved bool
		wantMachineDeleted   bool
		wantContainers       int
	}{
		{name: "never started, no machine yet", neverStarted: true, wantContainerRemoved: true, wantContainers: 2},
		// Its replacement is made at once; its machine's controller removes it.
		{name: "never started, with its machine", neverStarted: true, withMachine: true, wantMachineDeleted: true, wantContainers: 3},
		{name: "ran and stopped", withMachine: true, wantContainers: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
			ready := nodeContainer(g, "workers-ready", "v1.31.0", rt.Now().Add(-time.Hour))
			rt.Add(ready)
			stuck := nodeContainer(g, "workers-stuck", "v1.31.0", rt.Now().Add(-time.Minute))
			stuck.Running, stuck.NeverStarted = false, tt.neverStarted
			rt.Add(stuck)

			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true}
			objs := append(w.objects(), joinedMachine(ready))
			if tt.withMachine {
				m := poolMachine(stuck.Name)
				m.Labels[clusterv1.MachinePoolNameLabel] = "mp"
				objs = append(objs, m)
			}
			r, _ := newTestReconciler(g, objs, rt)
			reconcilePool(g, r)

			names := map[string]bool{}
			for _, c := range rt.Containers() {
				names[c.Name] = true
			}
			g.Expect(names).To(HaveLen(tt.wantContainers))
			g.Expect(names).To(HaveKey(ready.Name))
			g.Expect(names[stuck.Name]).To(Equal(!tt.wantContainerRemoved), "the container never started is removed: %v", names)

			m := &infrav1.DockerMachinePoolMachine{}
			err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: stuck.Name}, m)
			switch {
			case tt.wantMachineDeleted:
				g.Expect(err).ToNot(HaveOccurred())
				g.Expect(m.DeletionTimestamp.IsZero()).To(BeFalse(), "its machine is being deleted")
			case tt.wantContainerRemoved:
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no machine is made for a container being removed: %v", err)
			default:
				g.Expect(err).ToNot(HaveOccurred())
				g.Expect(m.DeletionTimestamp.IsZero()).To(BeTrue(), "a container that ran is not removed")
			}
		})
	}
}

// TestFullPoolIsReadyWhileDataRefreshes: a pool with all its replicas ready is Ready while its
// data is refreshed for a rollout that waits on the gate; BootstrapDataFresh says so alone.
func TestFullPoolIsReadyWhileDataRefreshes(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.30.0"), image(g, "v1.31.0"))
	w := pausedRollout(now)
	w.replicas = 1
	objs := w.objects()
	c := nodeContainer(g, "workers-old", "v1.30.0", now.Add(-time.Hour))
	rt.Add(c)
	objs = append(objs, joinedMachine(c))
	r, _ := newTestReconciler(g, objs, rt)
	pauseWithCurrentData(g, r)

	pool := reconcilePool(g, r)
	g.Expect(conditions.GetReason(pool, infrav1.BootstrapDataFreshCondition)).To(Equal(infrav1.BootstrapDataRefreshingReason))
	g.Expect(conditions.IsTrue(pool, infrav1.ReplicasReadyCondition)).To(BeTrue())
	g.Expect(conditions.IsTrue(pool, infrav1.ReadyCondition)).To(BeTrue(), "%+v", conditions.Get(pool, infrav1.ReadyCondition))
}
