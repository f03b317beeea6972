//go:build kind

package kind

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/kubeversions"
)

const (
	capdmpNamespace = "capdmp-system"
	// The names config/ ships, with the capdmp- prefix of config/default.
	managerDeployment     = "capdmp-controller-manager"
	managerServiceAccount = "capdmp-manager"
	managerClusterRole    = "capdmp-manager-role"
	servingCertificate    = "capdmp-serving-cert"
	servingSecret         = "capdmp-webhook-service-cert"
	validatingWebhooks    = "capdmp-validating-webhook-configuration"
	mutatingWebhooks      = "capdmp-mutating-webhook-configuration"
	managerImage          = "docker.io/library/capdmp-controller:dev"
)

// providerNamespaces are the namespaces clusterctl init made, each with the providers' Deployments.
var providerNamespaces = []string{
	"cert-manager", "capi-system", "capi-kubeadm-bootstrap-system",
	"capi-kubeadm-control-plane-system", "capd-system", capdmpNamespace,
}

// management is the cluster KUBECONFIG names (make test-kind sets it to make kind-management's).
type management struct {
	config    *rest.Config
	client    client.Client
	clientset kubernetes.Interface
}

func connect(t *testing.T) management {
	t.Helper()
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		t.Fatal("KUBECONFIG is empty: run make kind-management, then make test-kind")
	}
	config, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return management{config: config, client: c, clientset: cs}
}

func TestProvidersAvailable(t *testing.T) {
	g := NewWithT(t)
	m := connect(t)
	ctx := t.Context()

	providers := &unstructured.UnstructuredList{}
	providers.SetGroupVersionKind(schema.GroupVersionKind{Group: "clusterctl.cluster.x-k8s.io", Version: "v1alpha3", Kind: "ProviderList"})
	g.Expect(m.client.List(ctx, providers)).To(Succeed())
	installed := map[string]string{}
	for _, p := range providers.Items {
		version, _, _ := unstructured.NestedString(p.Object, "version")
		installed[p.GetName()] = version
	}
	t.Logf("clusterctl providers: %v", installed)
	g.Expect(installed).To(HaveKey("cluster-api"))
	g.Expect(installed).To(HaveKey("bootstrap-kubeadm"))
	g.Expect(installed).To(HaveKey("control-plane-kubeadm"))
	g.Expect(installed).To(HaveKey("infrastructure-docker"))
	g.Expect(installed).To(HaveKeyWithValue("infrastructure-capdmp", Not(BeEmpty())))

	for _, ns := range providerNamespaces {
		deployments := &appsv1.DeploymentList{}
		g.Expect(m.client.List(ctx, deployments, client.InNamespace(ns))).To(Succeed())
		g.Expect(deployments.Items).NotTo(BeEmpty(), "no Deployment in %s", ns)
		for _, d := range deployments.Items {
			g.Expect(available(d)).To(BeTrue(), "Deployment %s/%s is not Available: %+v", ns, d.Name, d.Status.Conditions)
			t.Logf("Deployment %s/%s Available, image %s", ns, d.Name, d.Spec.Template.Spec.Containers[0].Image)
		}
	}
}

func available(d appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestManagerRunsWithShippedRBAC: the manager's Pod runs the image make images built under the
// ServiceAccount config/rbac ships, holds its leader-election Lease, logged no RBAC refusal, and
// the API server grants that ServiceAccount what the manager does and nothing beyond it that matters.
func TestManagerRunsWithShippedRBAC(t *testing.T) {
	g := NewWithT(t)
	m := connect(t)
	ctx := t.Context()

	deployment := &appsv1.Deployment{}
	g.Expect(m.client.Get(ctx, client.ObjectKey{Namespace: capdmpNamespace, Name: managerDeployment}, deployment)).To(Succeed())
	g.Expect(deployment.Spec.Template.Spec.ServiceAccountName).To(Equal(managerServiceAccount))

	pods := &corev1.PodList{}
	g.Expect(m.client.List(ctx, pods, client.InNamespace(capdmpNamespace), client.MatchingLabels(deployment.Spec.Selector.MatchLabels))).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(1))
	pod := pods.Items[0]
	g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
	g.Expect(pod.Spec.ServiceAccountName).To(Equal(managerServiceAccount))
	g.Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
	status := pod.Status.ContainerStatuses[0]
	g.Expect(status.Ready).To(BeTrue())
	g.Expect(status.RestartCount).To(BeZero(), "the manager restarted")
	g.Expect(status.Image).To(Equal(managerImage))
	t.Logf("manager Pod %s Running, ServiceAccount %s, image %s (%s)", pod.Name, pod.Spec.ServiceAccountName, status.Image, status.ImageID)

	binding := &unstructured.Unstructured{}
	binding.SetGroupVersionKind(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"})
	g.Expect(m.client.Get(ctx, client.ObjectKey{Name: "capdmp-manager-rolebinding"}, binding)).To(Succeed())
	roleName, _, _ := unstructured.NestedString(binding.Object, "roleRef", "name")
	g.Expect(roleName).To(Equal(managerClusterRole))

	// The manager is leader: its Lease names this Pod.
	leases := &coordinationv1.LeaseList{}
	g.Expect(m.client.List(ctx, leases, client.InNamespace(capdmpNamespace))).To(Succeed())
	var holders []string
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil {
			holders = append(holders, *l.Spec.HolderIdentity)
		}
	}
	g.Expect(holders).To(ContainElement(HavePrefix(pod.Name+"_")), "no Lease in %s held by %s", capdmpNamespace, pod.Name)

	// A cache that may not list or watch logs "is forbidden" over and over.
	raw, err := m.clientset.CoreV1().Pods(capdmpNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(raw)).NotTo(ContainSubstring("forbidden"))
	g.Expect(bytes.Count(raw, []byte("Starting workers"))).To(BeNumerically(">=", 2), "the controllers did not start:\n%s", raw)

	user := "system:serviceaccount:" + capdmpNamespace + ":" + managerServiceAccount
	tests := []struct {
		attributes authorizationv1.ResourceAttributes
		allowed    bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "watch", Group: infrav1.GroupVersion.Group, Resource: "dockermachinepools"}, true},
		{authorizationv1.ResourceAttributes{Verb: "patch", Group: infrav1.GroupVersion.Group, Resource: "dockermachinepools", Subresource: "status"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: infrav1.GroupVersion.Group, Resource: "dockermachinepoolmachines"}, true},
		{authorizationv1.ResourceAttributes{Verb: "watch", Group: "cluster.x-k8s.io", Resource: "machinepools"}, true},
		{authorizationv1.ResourceAttributes{Verb: "get", Group: "cluster.x-k8s.io", Resource: "clusters"}, true},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "default"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "events", Namespace: "default"}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: capdmpNamespace}, true},
		// The secure diagnostics endpoint authenticates and authorizes its clients.
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}, false},
		{authorizationv1.ResourceAttributes{Verb: "delete", Resource: "nodes"}, false},
	}
	for _, tt := range tests {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + capdmpNamespace}, ResourceAttributes: &tt.attributes,
		}}
		g.Expect(m.client.Create(ctx, review)).To(Succeed())
		a := tt.attributes
		g.Expect(review.Status.Allowed).To(Equal(tt.allowed), "%s %s.%s/%s in %q: allowed=%v (%s)", a.Verb, a.Resource, a.Group, a.Subresource, a.Namespace, review.Status.Allowed, review.Status.Reason)
	}

	// The aggregated ClusterRole lets Cluster API's core manager write our kinds, as the contract asks.
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:capi-system:capi-manager",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "patch", Group: infrav1.GroupVersion.Group, Resource: "dockermachinepools"},
	}}
	g.Expect(m.client.Create(ctx, review)).To(Succeed())
	g.Expect(review.Status.Allowed).To(BeTrue(), "Cluster API's manager may not patch DockerMachinePools: %s", review.Status.Reason)
}

// TestWebhooksServedWithCertManagerCertificates: cert-manager issued the serving certificate,
// its CA-injector put the CA into both webhook configurations, and the manager's webhooks answer
// through the Service: an invalid DockerMachinePool is refused by the validating webhook, a valid
// one is defaulted by the mutating webhook and stored.
func TestWebhooksServedWithCertManagerCertificates(t *testing.T) {
	g := NewWithT(t)
	m := connect(t)
	ctx := t.Context()

	certificate := &unstructured.Unstructured{}
	certificate.SetGroupVersionKind(schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"})
	g.Expect(m.client.Get(ctx, client.ObjectKey{Namespace: capdmpNamespace, Name: servingCertificate}, certificate)).To(Succeed())
	conditions, _, _ := unstructured.NestedSlice(certificate.Object, "status", "conditions")
	g.Expect(conditions).To(ContainElement(And(HaveKeyWithValue("type", "Ready"), HaveKeyWithValue("status", "True"))))

	secret := &corev1.Secret{}
	g.Expect(m.client.Get(ctx, client.ObjectKey{Namespace: capdmpNamespace, Name: servingSecret}, secret)).To(Succeed())
	g.Expect(secret.Annotations).To(HaveKeyWithValue("cert-manager.io/certificate-name", servingCertificate))
	ca := secret.Data["ca.crt"]
	g.Expect(ca).NotTo(BeEmpty())

	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	g.Expect(m.client.Get(ctx, client.ObjectKey{Name: validatingWebhooks}, validating)).To(Succeed())
	g.Expect(validating.Webhooks).NotTo(BeEmpty())
	for _, w := range validating.Webhooks {
		g.Expect(w.ClientConfig.CABundle).To(Equal(ca), "webhook %s has not the CA cert-manager issued", w.Name)
		g.Expect(w.ClientConfig.Service).NotTo(BeNil())
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	g.Expect(m.client.Get(ctx, client.ObjectKey{Name: mutatingWebhooks}, mutating)).To(Succeed())
	g.Expect(mutating.Webhooks).NotTo(BeEmpty())
	for _, w := range mutating.Webhooks {
		g.Expect(w.ClientConfig.CABundle).To(Equal(ca), "webhook %s has not the CA cert-manager issued", w.Name)
	}

	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kind-webhooks-"}}
	g.Expect(m.client.Create(ctx, namespace)).To(Succeed())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = m.client.Delete(ctx, namespace)
	})

	invalid := &infrav1.DockerMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "invalid", Namespace: namespace.Name},
		Spec:       infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node:latest"}},
	}
	err := m.client.Create(ctx, invalid)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(And(ContainSubstring("admission webhook"), ContainSubstring("spec.template.customImage")))
	t.Logf("invalid pool refused: %v", err)

	valid := &infrav1.DockerMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "valid", Namespace: namespace.Name},
		Spec:       infrav1.DockerMachinePoolSpec{Template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node:" + kubeversions.Older}},
	}
	g.Expect(m.client.Create(ctx, valid)).To(Succeed())
	g.Expect(valid.Spec.Template.BootstrapTimeout).NotTo(BeNil(), "the defaulting webhook did not set bootstrapTimeout")
	g.Expect(valid.Spec.Template.BootstrapTimeout.Duration).To(Equal(infrav1.DefaultBootstrapTimeout))
	t.Logf("valid pool stored, bootstrapTimeout defaulted to %s", valid.Spec.Template.BootstrapTimeout.Duration)
	g.Expect(m.client.Delete(ctx, valid)).To(Succeed())

	// The manager serves the webhooks: its log names the webhook server's certificate folder.
	pods := &corev1.PodList{}
	g.Expect(m.client.List(ctx, pods, client.InNamespace(capdmpNamespace), client.MatchingLabels{"control-plane": "controller-manager"})).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(1))
	raw, err := m.clientset.CoreV1().Pods(capdmpNamespace).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Contains(string(raw), "Serving webhook server")).To(BeTrue(), "the manager's log does not show its webhook server:\n%s", raw)
}
