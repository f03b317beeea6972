package conformance

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/capdmp/capdmp/internal/clusterops"
)

const from, to = "v1.36.3", "v1.37.2"

// fakeProvider plays a control plane provider and a pool provider on a fake client: each call
// of Instances is a reconcile of both. The control plane replaces its machine in two steps; the
// pool makes its instances at the MachinePool's version, at once or, gated, once the control
// plane runs it.
type fakeProvider struct {
	mu      sync.Mutex
	c       client.Client
	gated   bool
	version func(mpVersion string) string // the version the pool makes instances of
	stuck   bool                          // the pool never rolls
	blind   bool                          // the control plane never reports a version
}

func (p *fakeProvider) Client() client.Client { return p.c }

func (p *fakeProvider) MachinePool() client.ObjectKey {
	return client.ObjectKey{Namespace: "ns", Name: "workers"}
}

func (p *fakeProvider) MakeVersionAvailable(context.Context, string) error { return nil }

func (p *fakeProvider) Instances(ctx context.Context) ([]Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "c1-cp"}, kcp); err != nil {
		return nil, err
	}
	mp := &clusterv1.MachinePool{}
	if err := p.c.Get(ctx, p.MachinePool(), mp); err != nil {
		return nil, err
	}
	var versions []string
	for _, v := range kcp.Status.Versions {
		versions = append(versions, v.Version)
	}
	// The pool reconciles against what the control plane reported before this call.
	version := mp.Spec.Template.Spec.Version
	if p.version != nil {
		version = p.version(version)
	}
	if p.stuck || (p.gated && !slices.Equal(versions, []string{version})) {
		version = mp.Status.NodeRefs[0].Name
	}
	mp.Status.NodeRefs = []corev1.ObjectReference{{Name: version}, {Name: version}}
	if err := p.c.Status().Update(ctx, mp); err != nil {
		return nil, err
	}
	if !p.blind && !slices.Equal(versions, []string{kcp.Spec.Version}) {
		next := []clusterv1.StatusVersion{{Version: versions[0], Replicas: 1}, {Version: kcp.Spec.Version, Replicas: 1}}
		if len(versions) == 2 {
			next = []clusterv1.StatusVersion{{Version: kcp.Spec.Version, Replicas: 1}}
		}
		kcp.Status.Versions = next
		if err := p.c.Status().Update(ctx, kcp); err != nil {
			return nil, err
		}
	}
	return []Instance{{Name: "a", Version: version}, {Name: "b", Version: version}}, nil
}

type gatedProvider struct{ *fakeProvider }

func (p gatedProvider) Gate(context.Context) (string, string, error) { return "", "", nil }

func newFakeProvider(t *testing.T) *fakeProvider {
	t.Helper()
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
		Status: controlplanev1.KubeadmControlPlaneStatus{
			Versions:       []clusterv1.StatusVersion{{Version: from, Replicas: 1}},
			Initialization: controlplanev1.KubeadmControlPlaneInitializationStatus{ControlPlaneInitialized: ptr.To(true)},
		},
	}
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers"},
		Spec:       clusterv1.MachinePoolSpec{ClusterName: "c1", Replicas: ptr.To[int32](2), Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{Version: from}}},
		// The fake pool keeps the version of its instances in its NodeRefs' names.
		Status: clusterv1.MachinePoolStatus{ReadyReplicas: ptr.To[int32](2), NodeRefs: []corev1.ObjectReference{{Name: from}, {Name: from}}},
	}
	// The control plane's CRD says which version serves the contract, as kustomize labels it.
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{
		Name: "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io", Labels: map[string]string{clusterv1.GroupVersion.String(): "v1beta2"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(crd, cluster, kcp, mp).WithStatusSubresource(kcp, mp).Build()
	return &fakeProvider{c: c}
}

func TestScenarioRun(t *testing.T) {
	clusterops.PollInterval = 5 * time.Millisecond
	t.Cleanup(func() { clusterops.PollInterval = time.Second })
	options := Options{
		Versions: []string{"v1.35.4", from, to}, Interval: time.Millisecond,
		Budgets: Budgets{ClusterReady: time.Second, ControlPlaneUpgrade: time.Second, PoolUpgrade: 200 * time.Millisecond, Gate: time.Second},
	}
	tests := []struct {
		name           string
		provider       func(*fakeProvider)
		wantViolations string
		wantErr        string
		// neverReady: the cluster is never ready, and the scenario's steps never run.
		neverReady bool
	}{
		{name: "a gated pool waits for the control plane", provider: func(p *fakeProvider) { p.gated = true }},
		{name: "an ungated pool makes new kubelets at once", wantViolations: "instance's kubelet v1.37.2 newer than kube-apiserver v1.36.3"},
		{name: "a version that cannot be read counts", provider: func(p *fakeProvider) {
			p.version = func(v string) string {
				if v == to {
					return "latest"
				}
				return v
			}
		}, wantViolations: `"latest" is not a Kubernetes version`, wantErr: "pool at v1.37.2"},
		{name: "a pool that never gets there", provider: func(p *fakeProvider) { p.stuck = true }, wantErr: "pool at v1.37.2: after 200ms"},
		{name: "a monitor that saw no control plane version fails the run", provider: func(p *fakeProvider) {
			p.blind = true
			p.c = blindControlPlane{p.c}
		}, wantErr: "judged none", neverReady: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p := newFakeProvider(t)
			if tt.provider != nil {
				tt.provider(p)
			}
			s, ok := Lookup("both-at-once/machinepool-first")
			g.Expect(ok).To(BeTrue())
			report, err := s.Run(context.Background(), p, options)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(report.Scenario).To(Equal("both-at-once/machinepool-first"))
			var details []string
			for _, v := range report.Violations {
				details = append(details, v.Detail)
			}
			if tt.wantViolations == "" {
				g.Expect(details).To(BeEmpty())
			} else {
				g.Expect(details).NotTo(BeEmpty())
				g.Expect(details).To(HaveEach(ContainSubstring(tt.wantViolations)))
			}
			mp := &clusterv1.MachinePool{}
			g.Expect(p.c.Get(context.Background(), p.MachinePool(), mp)).To(Succeed())
			if !tt.neverReady {
				g.Expect(mp.Spec.Template.Spec.Version).To(Equal(to))
			}
		})
	}
}

// TestControlPlaneWriterWritesTheVersion: a Cluster that writes its control plane's version
// itself is asked to, for each version the scenario applies, instead of the kit writing
// spec.version alone.
func TestControlPlaneWriterWritesTheVersion(t *testing.T) {
	g := NewWithT(t)
	clusterops.PollInterval = 5 * time.Millisecond
	t.Cleanup(func() { clusterops.PollInterval = time.Second })
	p := newFakeProvider(t)
	p.gated = true
	w := &controlPlaneWriter{fakeProvider: p}
	s, ok := Lookup("both-at-once/machinepool-first")
	g.Expect(ok).To(BeTrue())
	_, err := s.Run(context.Background(), w, Options{
		Versions: []string{from, to}, Interval: time.Millisecond,
		Budgets: Budgets{ClusterReady: time.Second, ControlPlaneUpgrade: time.Second, PoolUpgrade: time.Second, Gate: time.Second},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w.written).To(Equal([]string{to}))
}

// controlPlaneWriter records the versions it writes to the control plane.
type controlPlaneWriter struct {
	*fakeProvider
	written []string
}

func (w *controlPlaneWriter) SetControlPlaneVersion(ctx context.Context, version string) error {
	w.written = append(w.written, version)
	return clusterops.SetControlPlaneVersion(ctx, w, version)
}

// blindControlPlane hides the control plane's status.versions, as a provider that does not
// report them would.
type blindControlPlane struct{ client.Client }

func (b blindControlPlane) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := b.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if u, ok := obj.(interface{ UnstructuredContent() map[string]any }); ok && strings.HasSuffix(key.Name, "-cp") {
		delete(u.UnstructuredContent(), "status")
	}
	return nil
}

func TestRunnableOn(t *testing.T) {
	g := NewWithT(t)
	p := newFakeProvider(t)
	s, ok := Lookup("pool-alone/ahead-and-back")
	g.Expect(ok).To(BeTrue())
	runnable, missing := s.RunnableOn(p)
	g.Expect(runnable).To(BeFalse())
	g.Expect(missing).To(Equal([]string{"Gated"}))
	runnable, _ = s.RunnableOn(gatedProvider{p})
	g.Expect(runnable).To(BeTrue())
	_, err := s.Run(context.Background(), p, Options{Versions: []string{from, to}})
	g.Expect(err).To(MatchError(ContainSubstring("needs [Gated]")))
}

func TestScenarioNames(t *testing.T) {
	g := NewWithT(t)
	seen := map[string]bool{}
	scenarios := Scenarios()
	g.Expect(scenarios).NotTo(BeEmpty())
	for _, s := range scenarios {
		g.Expect(s.Name).To(MatchRegexp(`^(both-at-once|paused|pool-alone)/[a-z0-9-]+$`))
		g.Expect(seen).NotTo(HaveKey(s.Name), "names are unique")
		seen[s.Name] = true
		g.Expect(s.Doc).NotTo(BeEmpty())
		g.Expect(s.Shape.Versions).To(BeNumerically(">=", 2))
		_, err := s.From([]string{from})
		g.Expect(err).To(MatchError(ContainSubstring("needs")))
		// go test -run and ginkgo --focus match unanchored: a name inside another would select both.
		group, name, _ := strings.Cut(s.Name, "/")
		for _, other := range scenarios {
			if other.Name == s.Name {
				continue
			}
			otherGroup, otherName, _ := strings.Cut(other.Name, "/")
			g.Expect(other.Name).NotTo(ContainSubstring(s.Name))
			g.Expect(otherName).NotTo(ContainSubstring(name), "case %s is part of case %s", name, otherName)
			if otherGroup != group {
				g.Expect(otherGroup).NotTo(ContainSubstring(group))
			}
		}
	}
}

func TestScenariosAreCopies(t *testing.T) {
	g := NewWithT(t)
	mine := Scenarios()
	i := slices.IndexFunc(mine, func(s Scenario) bool { return len(s.Needs) > 0 })
	g.Expect(i).To(BeNumerically(">=", 0))
	name := mine[i].Name
	mine[i].Shape.PoolReplicas = 99
	mine[i].Needs[0] = "changed"
	mine[i].Name = "changed"
	again, ok := Lookup(name)
	g.Expect(ok).To(BeTrue())
	g.Expect(again.Shape.PoolReplicas).NotTo(Equal(int32(99)))
	g.Expect(again.Needs).NotTo(ContainElement("changed"))
	g.Expect(Scenarios()[i].Name).To(Equal(name))
	again.Needs[0] = "changed"
	g.Expect(Scenarios()[i].Needs).NotTo(ContainElement("changed"))
}
