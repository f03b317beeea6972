package controllers

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/internal/metrics"
	"github.com/capdmp/capdmp/pkg/skew"
)

// TestVersionGateUnreadableVersionLabel is what the gate sees of containers whose Kubernetes
// version label is missing or does not parse (issue 15, item 9): they count as running no version,
// so they admit nothing and close nothing, and they are reported instead of silently dropped.
func TestVersionGateUnreadableVersionLabel(t *testing.T) {
	tests := []struct {
		name string
		// controlPlane is the control plane's version; the target is always v1.31.0.
		controlPlane string
		// labels are the version labels of the pool's containers; nil means no label at all.
		labels []*string
		// lastAdmitted is status.versionGate.admittedVersion.
		lastAdmitted string
		// kubelets are the kubeletVersions the containers' machines recorded from their Nodes,
		// by index; "" for none.
		kubelets []string

		wantVerdict  skew.Verdict
		wantReason   skew.Reason
		wantAdmitted []string
		// wantReported are the containers named in the condition message and the log.
		wantReported []string
		// wantLogged is whether unreadable labels are logged even when the message does not change.
		wantLogged bool
	}{
		{
			name:         "readable labels are running versions",
			controlPlane: "v1.30.0",
			labels:       []*string{ptr.To("v1.30.0"), ptr.To("v1.29.3")},
			wantVerdict:  skew.Wait,
			wantReason:   skew.ControlPlaneOlder,
			wantAdmitted: []string{"v1.29.3", "v1.30.0"},
		},
		{
			name:         "build metadata is read back from the label form",
			controlPlane: "v1.30.0",
			labels:       []*string{ptr.To("v1.30.0_k3s1")},
			wantVerdict:  skew.Wait,
			wantReason:   skew.ControlPlaneOlder,
			wantAdmitted: []string{"v1.30.0+k3s1"},
		},
		{
			name:         "a label that does not parse counts as no version, not as invalid input",
			controlPlane: "v1.30.0",
			labels:       []*string{ptr.To("v1.30.0"), ptr.To("banana")},
			wantVerdict:  skew.Wait,
			wantReason:   skew.ControlPlaneOlder,
			wantAdmitted: []string{"v1.30.0"},
			wantReported: []string{"c-1"},
			wantLogged:   true,
		},
		{
			name:         "a missing label counts as no version",
			controlPlane: "v1.30.0",
			labels:       []*string{nil},
			lastAdmitted: "v1.30.0",
			wantVerdict:  skew.Wait,
			wantReason:   skew.ControlPlaneOlder,
			wantAdmitted: []string{"v1.30.0"},
			wantReported: []string{"c-0"},
			wantLogged:   true,
		},
		{
			name:         "a label with \"+\" cannot have been written by the controller",
			controlPlane: "v1.30.0",
			labels:       []*string{ptr.To("v1.30.0+k3s1")},
			wantVerdict:  skew.Wait,
			wantReason:   skew.ControlPlaneOlder,
			wantReported: []string{"c-0"},
			wantLogged:   true,
		},
		{
			name:         "a Node whose kubelet is not the image's label counts with the kubelet's version",
			controlPlane: "v1.30.0",
			labels:       []*string{ptr.To("v1.30.0"), ptr.To("v1.30.0")},
			kubelets:     []string{"", "v1.29.3"},
			wantVerdict:  skew.Wait,
			wantReason:   skew.ControlPlaneOlder,
			wantAdmitted: []string{"v1.29.3", "v1.30.0"},
		},
		{
			name:         "admitted target: logged, the condition is not about the running versions",
			controlPlane: "v1.31.0",
			labels:       []*string{ptr.To("v1.31.0"), ptr.To("1.31")},
			wantVerdict:  skew.Proceed,
			wantReason:   skew.Admitted,
			wantAdmitted: []string{"v1.31.0"},
			wantLogged:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()

			objs := world{controlPlaneVersions: []string{tt.controlPlane}, machinePoolVersion: "v1.31.0"}.objects()
			r, _ := newTestReconciler(g, objs, fakeruntime.NewWithNodeImages())
			s := &poolScope{
				cluster:       &clusterv1.Cluster{},
				machinePool:   &clusterv1.MachinePool{},
				pool:          &infrav1.DockerMachinePool{},
				targetVersion: "v1.31.0",
				targetImage:   image(g, "v1.31.0"),
			}
			g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: testCluster}, s.cluster)).To(Succeed())
			g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: "mp"}, s.machinePool)).To(Succeed())
			g.Expect(r.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: testPool}, s.pool)).To(Succeed())
			s.pool.Status.VersionGate.AdmittedVersion = tt.lastAdmitted
			for i, label := range tt.labels {
				c := nodeContainer(g, "c-"+itoa(i), "v1.30.0", time.Now())
				delete(c.Labels, infrav1.KubernetesVersionLabel)
				if label != nil {
					c.Labels[infrav1.KubernetesVersionLabel] = *label
				}
				inst := &instance{container: c}
				if i < len(tt.kubelets) && tt.kubelets[i] != "" {
					inst.machine = &infrav1.DockerMachinePoolMachine{Status: infrav1.DockerMachinePoolMachineStatus{NodeKubeletVersion: tt.kubelets[i]}}
				}
				s.instances = append(s.instances, inst)
			}
			logs := &logRecorder{}
			ctx = ctrl.LoggerInto(ctx, logs.logger())

			_, err := r.reconcileVersionGate(ctx, s)
			g.Expect(err).ToNot(HaveOccurred())

			g.Expect(s.decision).ToNot(BeNil())
			g.Expect(s.decision.Verdict).To(Equal(tt.wantVerdict), s.decision.Message)
			g.Expect(s.decision.Reason).To(Equal(tt.wantReason), s.decision.Message)
			g.Expect(s.decision.AdmittedVersions).To(Equal(tt.wantAdmitted))

			gate := conditions.Get(s.pool, infrav1.VersionSkewCondition)
			g.Expect(gate).ToNot(BeNil())
			g.Expect(gate.Reason).To(Equal(string(tt.wantReason)))
			if len(tt.wantReported) == 0 {
				g.Expect(gate.Message).ToNot(ContainSubstring(infrav1.KubernetesVersionLabel))
			}
			for _, name := range tt.wantReported {
				g.Expect(gate.Message).To(ContainSubstring(name))
				g.Expect(gate.Message).To(ContainSubstring("not counted as running any version"))
			}

			var unreadable []string
			for _, line := range logs.all() {
				if strings.Contains(line, "version label") {
					unreadable = append(unreadable, line)
				}
			}
			if !tt.wantLogged {
				g.Expect(unreadable).To(BeEmpty())
				return
			}
			g.Expect(unreadable).ToNot(BeEmpty())
			for _, name := range tt.wantReported {
				g.Expect(unreadable).To(ContainElement(ContainSubstring(`"container"="` + name + `"`)))
			}
		})
	}
}

// staleCache serves one DockerMachinePool as an earlier reconcile left it, as a cache that has
// not seen the latest patch does; writes and other reads go to the client.
type staleCache struct {
	client.Client
	pool *infrav1.DockerMachinePool
}

func (c staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if pool, ok := obj.(*infrav1.DockerMachinePool); ok && key == client.ObjectKeyFromObject(c.pool) {
		c.pool.DeepCopyInto(pool)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// TestVersionGateStaleCacheKeepsThePause: a pool read from a cache that has not seen the patch
// that began its pause does not begin it again: the pause keeps its start and the data it found
// then, and the data the refresh renewed since is not refreshed again (no second revocation).
func TestVersionGateStaleCacheKeepsThePause(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Now()
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.30.0"), image(g, "v1.31.0"))
	w := pausedRollout(now)
	w.replicas = 1
	// Before the pause: the gate admitted v1.30.0 and waits for nothing.
	w.gate = infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.30.0", AdmittedImage: "kindest/node:v1.30.0"}
	objs := w.objects()
	objs[len(objs)-1].SetAnnotations(map[string]string{infrav1.PoolUIDAnnotation: "pool-uid"})
	c := nodeContainer(g, "workers-old", "v1.30.0", now.Add(-time.Hour))
	rt.Add(c)
	objs = append(objs, joinedMachine(c))
	r, workload := newTestReconciler(g, objs, rt)
	key := client.ObjectKey{Namespace: testNamespace, Name: testPool}
	beforePause := &infrav1.DockerMachinePool{}
	g.Expect(r.Client.Get(ctx, key, beforePause)).To(Succeed())

	// The pause began an hour ago, with data the refresh has renewed since; the cache has not
	// seen that patch.
	paused := beforePause.DeepCopy()
	paused.Status.VersionGate.WaitingReason = string(skew.ControlPlaneOlder)
	paused.Status.VersionGate.WaitingSince = &metav1.Time{Time: now.Add(-time.Hour)}
	paused.Status.VersionGate.BootstrapDataHashAtPause = "data-at-the-pause"
	g.Expect(r.Client.Status().Update(ctx, paused)).To(Succeed())
	r.Client = staleCache{Client: r.Client, pool: beforePause}

	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	// The stale copy's conditions cannot be patched over the newer object: the reconcile is
	// retried, as with a real cache. What it did before the patch is what counts.
	if err != nil {
		g.Expect(err.Error()).To(ContainSubstring("failed to patch status conditions"), "only the patch of the stale copy may fail")
	}

	g.Expect(workload.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-abcdef"}, &corev1.Secret{})).To(Succeed(),
		"the renewed token is not revoked again")
	pool := &infrav1.DockerMachinePool{}
	g.Expect(r.APIReader.Get(ctx, key, pool)).To(Succeed())
	gate := pool.Status.VersionGate
	g.Expect(gate.WaitingSince).ToNot(BeNil())
	g.Expect(gate.WaitingSince.Time).To(BeTemporally("~", now.Add(-time.Hour), time.Second), "the pause keeps its start")
	g.Expect(gate.BootstrapDataHashAtPause).To(Equal("data-at-the-pause"))
}

// TestKubeletsOutOfSkewPolicy: kubelets the gate admitted that the control plane left behind
// (more than three minors ahead) or moved below (a downgrade) are named in a condition, an
// event and a metric; none are while the control plane reports no version.
func TestKubeletsOutOfSkewPolicy(t *testing.T) {
	tests := []struct {
		name         string
		controlPlane []string // empty: not initialized
		running      []string // versions of the pool's containers
		wantStatus   metav1.ConditionStatus
		wantReason   string
		wantNamed    []string // in the message
		wantOut      float64
	}{
		{name: "within the policy", controlPlane: []string{"v1.34.0"}, running: []string{"v1.31.0", "v1.34.0"},
			wantStatus: metav1.ConditionTrue, wantReason: infrav1.KubeletsWithinSkewPolicyReason},
		{name: "the control plane more than three minors ahead", controlPlane: []string{"v1.35.0"}, running: []string{"v1.31.0", "v1.34.0"},
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.KubeletsOutOfSkewPolicyReason,
			wantNamed: []string{"existing-0", "kubelet v1.31.0 more than 3 minors older than kube-apiserver v1.35.0"}, wantOut: 1},
		{name: "the control plane downgraded below the kubelets", controlPlane: []string{"v1.33.0"}, running: []string{"v1.34.0", "v1.34.0"},
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.KubeletsOutOfSkewPolicyReason,
			wantNamed: []string{"2 kubelets break", "existing-0", "existing-1", "kubelet v1.34.0 newer than kube-apiserver v1.33.0"}, wantOut: 2},
		{name: "the control plane reports no version", running: []string{"v1.34.0"},
			wantStatus: metav1.ConditionUnknown, wantReason: infrav1.KubeletSkewUnknownReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.34.0"))
			w := world{controlPlaneVersions: tt.controlPlane, machinePoolVersion: "v1.34.0", replicas: int32(len(tt.running)), dataSecret: true}
			objs := w.objects()
			for i, v := range tt.running {
				c := nodeContainer(g, "existing-"+itoa(i), v, time.Now().Add(time.Duration(i)*time.Second))
				rt.Add(c)
				objs = append(objs, joinedMachine(c))
			}
			r, _ := newTestReconciler(g, objs, rt)
			recorder := record.NewFakeRecorder(20)
			r.recorder = recorder
			metrics.ForgetPool(testNamespace, testPool)
			t.Cleanup(func() { metrics.ForgetPool(testNamespace, testPool) })

			pool := reconcilePool(g, r)
			cond := conditions.Get(pool, infrav1.KubeletSkewCondition)
			g.Expect(cond).ToNot(BeNil())
			g.Expect(cond.Status).To(Equal(tt.wantStatus), cond.Message)
			g.Expect(cond.Reason).To(Equal(tt.wantReason), cond.Message)
			for _, s := range tt.wantNamed {
				g.Expect(cond.Message).To(ContainSubstring(s))
			}
			g.Expect(testutil.ToFloat64(metrics.KubeletsOutOfPolicy.WithLabelValues(testNamespace, testPool))).To(Equal(tt.wantOut))
			var warnings []string
			for len(recorder.Events) > 0 {
				if e := <-recorder.Events; strings.Contains(e, infrav1.KubeletsOutOfSkewPolicyReason) {
					warnings = append(warnings, e)
				}
			}
			if tt.wantOut > 0 {
				g.Expect(warnings).To(HaveLen(1))
				g.Expect(warnings[0]).To(ContainSubstring(tt.wantNamed[len(tt.wantNamed)-1]))
			} else {
				g.Expect(warnings).To(BeEmpty())
			}

			// The same finding again is not a new event.
			reconcilePool(g, r)
			for len(recorder.Events) > 0 {
				g.Expect(<-recorder.Events).ToNot(ContainSubstring(infrav1.KubeletsOutOfSkewPolicyReason))
			}
		})
	}
}

// TestAdmittedImageFromContainers: a waiting pool whose status lost the last admitted image
// (clusterctl move does not copy status, a status wipe, a gate that never admitted here) takes it
// from its running containers, and replaces a lost container at that version.
func TestAdmittedImageFromContainers(t *testing.T) {
	tests := []struct {
		name         string
		running      []string // versions of the running containers, oldest first
		wantAdmitted string
		wantCreated  []string
	}{
		{name: "one version running: replaced at it", running: []string{"v1.31.0"}, wantAdmitted: "v1.31.0", wantCreated: []string{"v1.31.0"}},
		{name: "two versions running: the newest the gate admits", running: []string{"v1.31.0", "v1.30.0"}, wantAdmitted: "v1.31.0", wantCreated: []string{"v1.31.0"}},
		{name: "nothing running: nothing to derive, nothing created", wantCreated: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.30.0"), image(g, "v1.31.0"), image(g, "v1.32.0"))
			// The gate waits (control plane v1.31.0, MachinePool v1.32.0) with no status: as after
			// clusterctl move. One more replica than runs: a container was removed.
			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.32.0", replicas: int32(len(tt.running) + 1), dataSecret: true}
			objs := w.objects()
			var existing []string
			for i, v := range tt.running {
				c := nodeContainer(g, "existing-"+itoa(i), v, time.Now().Add(time.Duration(i-10)*time.Minute))
				c.Labels[infrav1.ImageLabel] = image(g, v)
				rt.Add(c)
				existing = append(existing, c.Name)
				objs = append(objs, joinedMachine(c))
			}
			r, _ := newTestReconciler(g, objs, rt)
			reconcilePool(g, r)
			// The pause began with this reconcile: no container is made with data older than it.
			// CABPK re-renders the data with a new token, as the refresh asked.
			secret := &corev1.Secret{}
			g.Expect(r.Client.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: "mp-data"}, secret)).To(Succeed())
			secret.Data["value"] = []byte(strings.Replace(cloudConfig, "abcdef.0123456789abcdef", "ghijkl.0123456789abcdef", 1))
			g.Expect(r.Client.Update(context.Background(), secret)).To(Succeed())
			pool := reconcilePool(g, r)

			g.Expect(pool.Status.VersionGate.AdmittedVersion).To(Equal(tt.wantAdmitted))
			if tt.wantAdmitted != "" {
				g.Expect(pool.Status.VersionGate.AdmittedImage).To(Equal(image(g, tt.wantAdmitted)))
			}
			var created []string
			for _, c := range rt.Containers() {
				if !slices.Contains(existing, c.Name) {
					created = append(created, c.Labels[infrav1.KubernetesVersionLabel])
				}
			}
			g.Expect(created).To(ConsistOf(labelValues(g, tt.wantCreated)), "%+v", pool.Status.Conditions)
		})
	}
}

// TestReplacesAtVersionStillAdmitted: a gate that re-opened on proof recorded the target as
// admitted; after a manager restart (the proof is in memory) or a control-plane downgrade the
// control plane's status no longer admits it. A lost container is still replaced, at the newest
// version a running container carries that the gate admits now. (The pause's bootstrap data was
// already refreshed: a pause that begins anew waits for that first, TestDockerMachinePoolRefreshTarget.)
func TestReplacesAtVersionStillAdmitted(t *testing.T) {
	g := NewWithT(t)
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"), image(g, "v1.32.0"))
	objs := world{controlPlaneVersions: []string{"v1.31.0", "v1.32.0"}, machinePoolVersion: "v1.32.0", replicas: 2, dataSecret: true,
		gate: infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.32.0", AdmittedImage: image(g, "v1.32.0"), TargetVersion: "v1.32.0",
			WaitingReason: string(skew.ControlPlaneOlder), WaitingSince: &metav1.Time{Time: time.Now().Add(-time.Hour)}, BootstrapDataHashAtPause: "data-of-an-hour-ago"}}.objects()
	c := nodeContainer(g, "w0", "v1.31.0", time.Now().Add(-time.Hour))
	c.Labels[infrav1.ImageLabel] = image(g, "v1.31.0")
	rt.Add(c)
	objs = append(objs, joinedMachine(c))
	r, _ := newTestReconciler(g, objs, rt)

	pool := reconcilePool(g, r)
	g.Expect(pool.Status.VersionGate.WaitingReason).To(Equal(string(skew.ControlPlaneOlder)))
	g.Expect(versionsOf(rt.Containers())).To(ConsistOf("v1.31.0", "v1.31.0"), "the lost container is replaced at v1.31.0")
	g.Expect(pool.Status.VersionGate.AdmittedVersion).To(Equal("v1.31.0"))
	g.Expect(pool.Status.VersionGate.AdmittedImage).To(Equal(image(g, "v1.31.0")))
}
