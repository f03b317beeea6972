package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/test/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

const (
	// staleConfiguration is the configuration of data the pool no longer has.
	staleConfiguration = "0123456789abcdef0123456789abcdef"
	// rotatedToken replaces the test data's token, as CABPK's rotation does.
	rotatedToken = "zyx987.zyxwvutsrq987654"
)

// currentConfiguration is the configuration of the test world's bootstrap data.
func currentConfiguration(g Gomega) string {
	data, err := bootstrap.NewData([]byte(cloudConfig), bootstrap.FormatCloudConfig)
	g.Expect(err).ToNot(HaveOccurred())
	configuration, err := data.Configuration(context.Background())
	g.Expect(err).ToNot(HaveOccurred())
	return configuration
}

// configuredContainer is a ready container of version whose bootstrap configuration is recorded
// as containerConfig on the container and machineConfig on its machine ("" records none).
func configuredContainer(g Gomega, rt *fakeruntime.Runtime, name, version, containerConfig, machineConfig string) *infrav1.DockerMachinePoolMachine {
	c := nodeContainer(g, name, version, time.Now().Add(-time.Hour))
	if containerConfig != "" {
		c.Labels[infrav1.BootstrapConfigurationLabel] = containerConfig
	}
	rt.Add(c)
	m := joinedMachine(c)
	if machineConfig != "" {
		m.Labels[infrav1.BootstrapConfigurationLabel] = machineConfig
	}
	return m
}

// TestConfigurationRollout: a container bootstrapped with another configuration than the pool's
// data carries now is replaced, as one of another image is, within the strategy; a data change
// that is not a configuration change (a rotated token) replaces nothing, nor does a container
// whose configuration is unknown.
func TestConfigurationRollout(t *testing.T) {
	const desired = 3
	tests := []struct {
		name                           string
		containerConfig, machineConfig string // "current" stands for the data's configuration
		rotateToken                    bool
		wantReplaced                   bool
	}{
		{name: "configuration changed: every container replaced", containerConfig: staleConfiguration, wantReplaced: true},
		{name: "the bootstrap ran with another configuration than the container was made for", containerConfig: "current", machineConfig: staleConfiguration, wantReplaced: true},
		{name: "same configuration, token rotated: nothing replaced", containerConfig: "current", rotateToken: true},
		{name: "made for a stale configuration, bootstrapped with the current one: nothing replaced", containerConfig: staleConfiguration, machineConfig: "current"},
		{name: "no configuration recorded (made before CAPDMP recorded it): nothing replaced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			current := currentConfiguration(g)
			resolve := func(c string) string {
				if c == "current" {
					return current
				}
				return c
			}
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
			objs := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: desired, dataSecret: true}.objects()
			var original []string
			for i := range desired {
				name := "old-" + itoa(i)
				objs = append(objs, configuredContainer(g, rt, name, "v1.31.0", resolve(tt.containerConfig), resolve(tt.machineConfig)))
				original = append(original, name)
			}
			r, _ := newTestReconciler(g, objs, rt)
			if tt.rotateToken {
				rewriteData(g, r.Client, func(value string) string { return strings.ReplaceAll(value, "abcdef.0123456789abcdef", rotatedToken) })
			}

			most, leastReady := 0, desired
			for range 12 {
				count, ready := rolloutStep(g, r, rt)
				most, leastReady = max(most, count), min(leastReady, ready)
			}
			pool := reconcilePool(g, r)
			g.Expect(pool.Status.BootstrapData.Configuration).To(Equal(current), "a rotated token is the same configuration")
			names := containerNames(rt.Containers())
			if !tt.wantReplaced {
				g.Expect(names).To(ConsistOf(original), "containers replaced")
				return
			}
			g.Expect(names).To(HaveLen(desired))
			g.Expect(names).ToNot(ContainElements(original[0]), "replaced")
			for _, c := range rt.Containers() {
				g.Expect(c.Labels).To(HaveKeyWithValue(infrav1.BootstrapConfigurationLabel, current), "container %s", c.Name)
			}
			machines := &infrav1.DockerMachinePoolMachineList{}
			g.Expect(r.Client.List(context.Background(), machines)).To(Succeed())
			for _, m := range machines.Items {
				g.Expect(m.Labels).To(HaveKeyWithValue(infrav1.BootstrapConfigurationLabel, current), "DockerMachinePoolMachine %s", m.Name)
			}
			g.Expect(most).To(Equal(desired+1), "maxSurge 1 by default")
			g.Expect(leastReady).To(Equal(desired), "maxUnavailable 0 by default")
		})
	}
}

// TestConfigurationChangeDuringPause: while the gate waits for the control plane, containers of
// a changed configuration are replaced by containers of the last admitted version, never of the
// target; when the gate opens, the version rollout follows.
func TestConfigurationChangeDuringPause(t *testing.T) {
	const desired = 3
	g := NewWithT(t)
	current := currentConfiguration(g)
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"), image(g, "v1.32.0"))
	w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.32.0", replicas: desired, dataSecret: true,
		gate: infrav1.DockerMachinePoolVersionGateStatus{AdmittedVersion: "v1.31.0", AdmittedImage: image(g, "v1.31.0")}}
	objs := w.objects()
	for i := range desired {
		objs = append(objs, configuredContainer(g, rt, "old-"+itoa(i), "v1.31.0", staleConfiguration, ""))
	}
	r, _ := newTestReconciler(g, objs, rt)
	cabpk := renderOnRequest(g, r.Client)

	// checkSkew fails a step that runs a container of another version than the control plane.
	checkSkew := func(controlPlane string) {
		for _, v := range versionsOf(rt.Containers()) {
			g.Expect(v).To(Equal(controlPlane), "a container of %s beside a control plane of %s", v, controlPlane)
		}
	}
	for range 12 {
		rolloutStep(g, r, rt)
		cabpk()
		checkSkew("v1.31.0")
	}
	pool := reconcilePool(g, r)
	g.Expect(conditions.IsFalse(pool, infrav1.VersionSkewCondition)).To(BeTrue(), "the gate still waits")
	g.Expect(rt.Containers()).To(HaveLen(desired))
	for _, c := range rt.Containers() {
		g.Expect(c.Name).ToNot(HavePrefix("old-"))
		g.Expect(c.Labels).To(HaveKeyWithValue(infrav1.BootstrapConfigurationLabel, current))
	}

	// The control plane reaches the target: the version rollout follows.
	setControlPlaneVersions(g, r.Client, "v1.32.0")
	for range 12 {
		rolloutStep(g, r, rt)
		cabpk()
	}
	g.Expect(versionsOf(rt.Containers())).To(HaveLen(desired))
	g.Expect(versionsOf(rt.Containers())).To(HaveEach("v1.32.0"))
}

// renderOnRequest returns what CABPK does, to be called between reconciles: when the pool asked
// for fresh data (the KubeadmConfig touched), it renders the data again with a new token.
func renderOnRequest(g Gomega, c client.Client) func() {
	tokens := []string{"abcdef.0123456789abcdef", rotatedToken}
	rendered := ""
	return func() {
		config := &bootstrapv1.KubeadmConfig{}
		g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: "mp-config"}, config)).To(Succeed())
		requested := config.Annotations[BootstrapRefreshRequestedAnnotation]
		if requested == "" || requested == rendered {
			return
		}
		rendered = requested
		rewriteData(g, c, func(value string) string { return strings.ReplaceAll(value, tokens[0], tokens[1]) })
		tokens[0], tokens[1] = tokens[1], tokens[0]
	}
}

// TestEditedKubeadmConfigIsRendered: CABPK does not render a MachinePool's data again when its
// KubeadmConfig is edited; the pool notices the changed spec and has CABPK render it (the pool's
// token revoked, the KubeadmConfig touched). The new data's configuration then rolls the pool.
// A token rotation, which CABPK writes into the spec before it writes the data, asks for nothing.
func TestEditedKubeadmConfigIsRendered(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	current := currentConfiguration(g)
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
	r, workload := newOneNodePool(g, rt, current)
	token := &corev1.Secret{}
	tokenKey := client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-abcdef"}
	configKey := client.ObjectKey{Namespace: testNamespace, Name: "mp-config"}
	editConfig := func(mutate func(*bootstrapv1.KubeadmConfig)) {
		config := &bootstrapv1.KubeadmConfig{}
		g.Expect(r.Client.Get(ctx, configKey, config)).To(Succeed())
		mutate(config)
		g.Expect(r.Client.Update(ctx, config)).To(Succeed())
	}

	pool := reconcilePool(g, r)
	g.Expect(pool.Status.BootstrapData.ConfigName).To(Equal("mp-config"))
	recorded := pool.Status.BootstrapData.ConfigHash
	g.Expect(recorded).ToNot(BeEmpty())

	// A token rotation: CABPK writes the new token into the spec, then renders the data. Between
	// the two writes the pool sees the spec change and must ask nothing.
	editConfig(func(c *bootstrapv1.KubeadmConfig) {
		c.Spec.JoinConfiguration.Discovery.BootstrapToken.Token = rotatedToken
	})
	reconcilePool(g, r)
	g.Expect(workload.Get(ctx, tokenKey, token)).To(Succeed(), "no token revoked")
	rewriteData(g, r.Client, func(value string) string { return strings.ReplaceAll(value, "abcdef.0123456789abcdef", rotatedToken) })
	pool = reconcilePool(g, r)
	g.Expect(pool.Status.BootstrapData.ConfigHash).To(Equal(recorded), "the token is not the configuration")
	rewriteData(g, r.Client, func(value string) string { return strings.ReplaceAll(value, rotatedToken, "abcdef.0123456789abcdef") })
	reconcilePool(g, r)

	// The user edits the KubeadmConfig: its spec changes, CABPK's data stays.
	editConfig(func(c *bootstrapv1.KubeadmConfig) { c.Spec.PreKubeadmCommands = []string{"echo edited"} })
	reconcilePool(g, r)
	g.Expect(apierrors.IsNotFound(workload.Get(ctx, tokenKey, token))).To(BeTrue(), "the pool's token revoked")
	config := &bootstrapv1.KubeadmConfig{}
	g.Expect(r.Client.Get(ctx, configKey, config)).To(Succeed())
	g.Expect(config.Annotations).To(HaveKey(BootstrapRefreshRequestedAnnotation))
	g.Expect(containerNames(rt.Containers())).To(ConsistOf("old-0"), "nothing replaced before the data changes")

	// CABPK renders the edit with a new token: the pool records it and rolls.
	rewriteData(g, r.Client, func(value string) string {
		value = strings.ReplaceAll(value, "abcdef.0123456789abcdef", rotatedToken)
		return strings.Replace(value, "runcmd:\n", "runcmd:\n- echo edited\n", 1)
	})
	for range 6 {
		rolloutStep(g, r, rt)
	}
	pool = reconcilePool(g, r)
	g.Expect(pool.Status.BootstrapData.ConfigHash).ToNot(Equal(recorded))
	g.Expect(pool.Status.BootstrapData.Configuration).ToNot(Equal(current))
	g.Expect(containerNames(rt.Containers())).To(HaveLen(1))
	g.Expect(containerNames(rt.Containers())).ToNot(ContainElement("old-0"), "the pool rolled to the edited configuration")
}

// newOneNodePool is a pool of one node bootstrapped with configuration, whose KubeadmConfig
// holds the data's token, as CABPK writes it.
func newOneNodePool(g Gomega, rt *fakeruntime.Runtime, configuration string) (*DockerMachinePoolReconciler, client.Client) {
	objs := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}.objects()
	for _, o := range objs {
		if config, ok := o.(*bootstrapv1.KubeadmConfig); ok {
			config.Spec.JoinConfiguration.Discovery.BootstrapToken.Token = "abcdef.0123456789abcdef"
		}
	}
	objs = append(objs, configuredContainer(g, rt, "old-0", "v1.31.0", configuration, configuration))
	return newTestReconciler(g, objs, rt)
}

// rewriteData changes the value of the pool's bootstrap data Secret, as the bootstrap provider
// rewrites it.
func rewriteData(g Gomega, c client.Client, rewrite func(string) string) {
	secret := &corev1.Secret{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: "mp-data"}, secret)).To(Succeed())
	secret.Data["value"] = []byte(rewrite(string(secret.Data["value"])))
	g.Expect(c.Update(context.Background(), secret)).To(Succeed())
}

// setControlPlaneVersions writes the control plane's status.versions.
func setControlPlaneVersions(g Gomega, c client.Client, versions ...string) {
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(builder.ControlPlaneGroupVersion.WithKind(builder.GenericControlPlaneKind))
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: "cp"}, cp)).To(Succeed())
	var list []any
	for _, v := range versions {
		list = append(list, map[string]any{"version": v, "replicas": int64(1)})
	}
	g.Expect(unstructured.SetNestedSlice(cp.Object, list, "status", "versions")).To(Succeed())
	g.Expect(c.Update(context.Background(), cp)).To(Succeed())
}

func containerNames(cs []container.Container) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// TestRefreshAskedOnceWithAStaleCache: the reconcile right after a refresh request may read a
// cache that does not show the request's annotation yet; the pool reads the KubeadmConfig live,
// so it waits for CABPK instead of revoking the token and asking again.
func TestRefreshAskedOnceWithAStaleCache(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	current := currentConfiguration(g)
	rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
	r, workload := newOneNodePool(g, rt, current)
	// A cache that never shows the pool's request.
	r.Client = interceptor.NewClient(r.Client.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if annotations := obj.GetAnnotations(); annotations != nil {
				delete(annotations, BootstrapRefreshRequestedAnnotation)
				obj.SetAnnotations(annotations)
			}
			return nil
		},
	})
	reconcilePool(g, r)

	config := &bootstrapv1.KubeadmConfig{}
	g.Expect(r.APIReader.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: "mp-config"}, config)).To(Succeed())
	config.Spec.PreKubeadmCommands = []string{"echo edited"}
	g.Expect(r.APIReader.(client.Client).Update(ctx, config)).To(Succeed())
	reconcilePool(g, r)
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-abcdef"}}
	g.Expect(apierrors.IsNotFound(workload.Get(ctx, client.ObjectKeyFromObject(token), token))).To(BeTrue(), "the first reconcile asks")

	// The token back, as if CABPK had not got to it yet: the next reconcile must not revoke it.
	g.Expect(workload.Create(ctx, &corev1.Secret{ObjectMeta: token.ObjectMeta})).To(Succeed())
	reconcilePool(g, r)
	g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(token), token)).To(Succeed(), "asked a second time")
}
