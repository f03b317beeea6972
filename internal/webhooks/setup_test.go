package webhooks

import (
	"bytes"
	"net/http"
	"net/url"
	"os"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/hostpath"
)

// TestSetupWebhooksWithManager registers the webhooks with a manager (which does not contact any
// API server until it starts: the REST mapping PoolUIDIndex needs is static here) and checks that
// every path in the generated config/webhook/manifests.yaml, written from the kubebuilder markers,
// is served: a marker whose path differs from the one controller-runtime derives from the kind
// would fail every request.
func TestSetupWebhooksWithManager(t *testing.T) {
	g := NewWithT(t)

	scheme := runtime.NewScheme()
	g.Expect(infrav1.AddToScheme(scheme)).To(Succeed())
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		MapperProvider: func(*rest.Config, *http.Client) (meta.RESTMapper, error) {
			mapper := meta.NewDefaultRESTMapper(nil)
			mapper.Add(infrav1.GroupVersion.WithKind("DockerMachinePool"), meta.RESTScopeNamespace)
			return mapper, nil
		},
	})
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(SetupWebhooksWithManager(mgr, hostpath.Policy{})).To(Succeed())

	manifests, err := os.ReadFile("../../config/webhook/manifests.yaml")
	g.Expect(err).ToNot(HaveOccurred(), "run make generate")

	var paths []string
	for _, doc := range bytes.Split(manifests, []byte("\n---\n")) {
		var meta struct{ Kind string }
		g.Expect(yaml.Unmarshal(doc, &meta)).To(Succeed())
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			var config admissionregistrationv1.MutatingWebhookConfiguration
			g.Expect(yaml.UnmarshalStrict(doc, &config)).To(Succeed())
			for _, webhook := range config.Webhooks {
				paths = append(paths, *webhook.ClientConfig.Service.Path)
			}
		case "ValidatingWebhookConfiguration":
			var config admissionregistrationv1.ValidatingWebhookConfiguration
			g.Expect(yaml.UnmarshalStrict(doc, &config)).To(Succeed())
			for _, webhook := range config.Webhooks {
				paths = append(paths, *webhook.ClientConfig.Service.Path)
			}
		}
	}
	// Two defaulting webhooks (pool, template) and three validating ones.
	g.Expect(paths).To(HaveLen(5))

	mux := mgr.GetWebhookServer().WebhookMux()
	for _, path := range paths {
		_, pattern := mux.Handler(&http.Request{Method: http.MethodPost, URL: &url.URL{Path: path}})
		g.Expect(pattern).To(Equal(path), "no webhook serves %s", path)
	}
}
