package webhooks

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// envtestAssets is the directory with kube-apiserver and etcd: KUBEBUILDER_ASSETS (make test sets
// it), else bin/envtest. Without them the test fails.
func envtestAssets(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	dir := filepath.Join("..", "..", "bin", "envtest")
	for _, binary := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, binary)); err != nil {
			t.Fatalf("no %s in %s: run make envtest-binaries (make test does)", binary, dir)
		}
	}
	return dir
}

// TestWebhooksOnAPIServer installs the generated CRDs and webhook configurations into a real API
// server, serves the webhooks from a manager, and checks what users and Cluster API's topology
// controller see: defaults stored, invalid objects refused with field paths, templates immutable
// except in the topology controller's server-side apply dry runs.
func TestWebhooksOnAPIServer(t *testing.T) {
	g := NewWithT(t)
	env := &envtest.Environment{
		BinaryAssetsDirectory: envtestAssets(t),
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join("..", "..", "config", "webhook")}},
	}
	cfg, err := env.Start()
	g.Expect(err).ToNot(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(infrav1.AddToScheme(scheme)).To(Succeed())

	wio := env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir}),
	})
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(SetupWebhooksWithManager(mgr, testHostPaths)).To(Succeed())

	ctx, cancel := context.WithCancel(context.Background())
	managerDone := make(chan error, 1)
	go func() { managerDone <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-managerDone; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	address := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	g.Eventually(func() error {
		dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second}, Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a readiness probe of the test's own server
		conn, err := dialer.DialContext(ctx, "tcp", address)
		if err != nil {
			return err
		}
		return conn.Close()
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).ToNot(HaveOccurred())
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "webhooks"}}
	g.Expect(c.Create(ctx, namespace)).To(Succeed())

	t.Run("a DockerMachinePool is stored with its defaults", func(t *testing.T) {
		g := NewWithT(t)
		pool := &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: namespace.Name}}
		g.Expect(c.Create(ctx, pool)).To(Succeed())
		stored := &infrav1.DockerMachinePool{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pool), stored)).To(Succeed())
		g.Expect(stored.Spec.Template.BootstrapTimeout).To(Equal(&metav1.Duration{Duration: infrav1.DefaultBootstrapTimeout}))
	})

	t.Run("a DockerMachinePool mounting an allowed host path is stored", func(t *testing.T) {
		g := NewWithT(t)
		pool := &infrav1.DockerMachinePool{
			ObjectMeta: metav1.ObjectMeta{Name: "allowed-mount", Namespace: namespace.Name},
			Spec: infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{
				ExtraMounts: []infrav1.Mount{{ContainerPath: "/data", HostPath: "/srv/data"}},
			}},
		}
		g.Expect(c.Create(ctx, pool)).To(Succeed())
	})

	t.Run("a host path outside --allowed-host-paths is refused naming the field, the path and the flag", func(t *testing.T) {
		g := NewWithT(t)
		pool := &infrav1.DockerMachinePool{
			ObjectMeta: metav1.ObjectMeta{Name: "refused-mount", Namespace: namespace.Name},
			Spec: infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{
				ExtraMounts: []infrav1.Mount{{ContainerPath: "/data", HostPath: "/srv/data"}, {ContainerPath: "/etc/host", HostPath: "/etc"}},
			}},
		}
		err := c.Create(ctx, pool)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(And(
			ContainSubstring("spec.template.extraMounts[1].hostPath"),
			ContainSubstring(`/etc`),
			ContainSubstring("--allowed-host-paths=/srv"),
		))
		g.Expect(err.Error()).ToNot(ContainSubstring("extraMounts[0]"))
	})

	t.Run("a rollout strategy is stored as counts and percentages, and a bad one refused", func(t *testing.T) {
		g := NewWithT(t)
		pool := &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "strategy", Namespace: namespace.Name}}
		pool.Spec.Strategy.RollingUpdate = infrav1.DockerMachinePoolRollingUpdate{MaxSurge: ptr.To(intstr.FromString("25%")), MaxUnavailable: ptr.To(intstr.FromInt32(1))}
		g.Expect(c.Create(ctx, pool)).To(Succeed())
		stored := &infrav1.DockerMachinePool{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pool), stored)).To(Succeed())
		g.Expect(stored.Spec.Strategy).To(Equal(pool.Spec.Strategy))

		stored.Spec.Strategy.RollingUpdate = infrav1.DockerMachinePoolRollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(0))}
		err := c.Update(ctx, stored)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("spec.strategy.rollingUpdate.maxUnavailable"))
	})

	t.Run("an invalid DockerMachinePool is refused with the field path", func(t *testing.T) {
		g := NewWithT(t)
		pool := &infrav1.DockerMachinePool{
			ObjectMeta: metav1.ObjectMeta{Name: "invalid", Namespace: namespace.Name},
			Spec: infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{
				CustomImage: "kindest/node:latest",
				ExtraMounts: []infrav1.Mount{{ContainerPath: "/a", HostPath: "/x"}, {ContainerPath: "/a", HostPath: "/y"}},
			}},
		}
		err := c.Create(ctx, pool)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(And(ContainSubstring("spec.template.customImage"), ContainSubstring("spec.template.extraMounts[1].containerPath")))
	})

	t.Run("hostile input is refused naming its field", func(t *testing.T) {
		names := map[string]bool{}
		for i, input := range hostileInputs {
			t.Run(input.name, func(t *testing.T) {
				g := NewWithT(t)
				g.Expect(names).NotTo(HaveKey(input.name), "each input once")
				names[input.name] = true
				expectRefused(g, createHostile(ctx, c, namespace.Name, fmt.Sprintf("hostile-%d", i), input), input.wantField)
			})
		}
		t.Logf("%d distinct hostile inputs refused", len(hostileInputs))
	})

	t.Run("a pool copied from another, with its recorded UID, is refused; without it admitted", func(t *testing.T) {
		g := NewWithT(t)
		a := &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "original", Namespace: namespace.Name}}
		g.Expect(c.Create(ctx, a)).To(Succeed())
		// What the controller does in its first reconcile.
		before := a.DeepCopy()
		a.Annotations = map[string]string{infrav1.PoolUIDAnnotation: string(a.UID)}
		g.Expect(c.Patch(ctx, a, client.MergeFrom(before))).To(Succeed())
		// The webhook reads the manager's cache: wait until it holds a's annotation.
		g.Eventually(func(g Gomega) {
			pools := &infrav1.DockerMachinePoolList{}
			g.Expect(mgr.GetCache().List(ctx, pools, client.MatchingFields{PoolUIDIndex: string(a.UID)})).To(Succeed())
			g.Expect(pools.Items).To(ConsistOf(HaveField("ObjectMeta.Annotations", HaveKeyWithValue(infrav1.PoolUIDAnnotation, string(a.UID)))))
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())

		// kubectl get dmp original -o yaml, renamed, applied: the server gives it its own UID.
		stored := &infrav1.DockerMachinePool{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(a), stored)).To(Succeed())
		copyAs := func(namespace, name string) *infrav1.DockerMachinePool {
			b := &infrav1.DockerMachinePool{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: stored.Labels, Annotations: stored.Annotations},
				Spec:       stored.Spec,
			}
			return b.DeepCopy()
		}
		for _, ns := range []string{namespace.Name, "webhooks-other"} {
			if ns != namespace.Name {
				g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
			}
			err := c.Create(ctx, copyAs(ns, "copy"))
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "in %s: got %v", ns, err)
			g.Expect(err.Error()).To(And(
				ContainSubstring("metadata.annotations[infrastructure.capdmp.dev/pool-uid]: Forbidden"),
				ContainSubstring("UID %s is held by DockerMachinePool %s/original", a.UID, namespace.Name),
				ContainSubstring("a pool copied from another must not keep this annotation"),
			))
		}

		b := copyAs(namespace.Name, "copy")
		delete(b.Annotations, infrav1.PoolUIDAnnotation)
		g.Expect(c.Create(ctx, b)).To(Succeed())
		// The controller records b's own UID: admitted, as for any pool.
		before = b.DeepCopy()
		b.Annotations = map[string]string{infrav1.PoolUIDAnnotation: string(b.UID)}
		g.Expect(c.Patch(ctx, b, client.MergeFrom(before))).To(Succeed())
		// And a's recorded UID stays a's: b can no more take it by an update.
		before = b.DeepCopy()
		b.Annotations[infrav1.PoolUIDAnnotation] = string(a.UID)
		err := c.Patch(ctx, b, client.MergeFrom(before))
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	})

	t.Run("a DockerMachinePoolTemplate changes only in the topology controller's dry runs", func(t *testing.T) {
		g := NewWithT(t)
		template := &infrav1.DockerMachinePoolTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: namespace.Name},
			Spec: infrav1.DockerMachinePoolTemplateSpec{Template: infrav1.DockerMachinePoolTemplateResource{
				Spec: infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node:v1.34.1"}},
			}},
		}
		g.Expect(c.Create(ctx, template)).To(Succeed())
		g.Expect(template.Spec.Template.Spec.Template.BootstrapTimeout).ToNot(BeNil(), "defaulted on create")

		changed := template.DeepCopy()
		changed.Spec.Template.Spec.Template.CustomImage = "kindest/node:v1.35.0"
		err := c.Update(ctx, changed)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("spec.template.spec: Forbidden"))

		// What the topology controller sends to compute a diff: a server-side apply dry run of the
		// desired object, marked with the dry-run annotation.
		apply := func(annotations map[string]string, opts ...client.ApplyOption) error {
			desired := &unstructured.Unstructured{}
			desired.SetAPIVersion(infrav1.GroupVersion.String())
			desired.SetKind("DockerMachinePoolTemplate")
			desired.SetNamespace(template.Namespace)
			desired.SetName(template.Name)
			desired.SetAnnotations(annotations)
			g.Expect(unstructured.SetNestedField(desired.Object, "kindest/node:v1.35.0", "spec", "template", "spec", "template", "customImage")).To(Succeed())
			return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired), append(opts, client.FieldOwner("capi-topology"), client.ForceOwnership)...)
		}
		dryRunAnnotation := map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
		g.Expect(apply(dryRunAnnotation, client.DryRunAll)).To(Succeed())

		err = apply(nil, client.DryRunAll)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "a dry run without the annotation is checked: got %v", err)
		err = apply(dryRunAnnotation)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "the annotation outside a dry run is checked: got %v", err)

		stored := &infrav1.DockerMachinePoolTemplate{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(template), stored)).To(Succeed())
		g.Expect(stored.Spec.Template.Spec.Template.CustomImage).To(Equal("kindest/node:v1.34.1"), "dry runs store nothing")
	})

	t.Run("a DockerMachinePoolMachine keeps its provider ID", func(t *testing.T) {
		g := NewWithT(t)
		machine := &infrav1.DockerMachinePoolMachine{
			ObjectMeta: metav1.ObjectMeta{Name: "pool-abcde", Namespace: namespace.Name},
			Spec:       infrav1.DockerMachinePoolMachineSpec{ProviderID: "docker:////pool-abcde"},
		}
		g.Expect(c.Create(ctx, machine)).To(Succeed())
		machine.Spec.ProviderID = "docker:////pool-fghij"
		err := c.Update(ctx, machine)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		g.Expect(err.Error()).To(ContainSubstring("spec.providerID: Forbidden"))
	})
}
