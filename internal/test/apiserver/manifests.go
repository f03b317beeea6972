package apiserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/capdmp/capdmp/config"
)

// ContractLabel maps the Cluster API v1beta2 contract to a CRD's versions; kustomize adds it in
// real installs, CRDs read from the sources lack it.
const ContractLabel = "cluster.x-k8s.io/v1beta2"

// provider is one provider's manifests in a module's source, and the prefix its kustomization
// gives the names of its webhook configurations (all of them are called
// mutating-webhook-configuration and validating-webhook-configuration in the sources).
type provider struct {
	module, dir, namePrefix string
}

// clusterAPIProviders are Cluster API's providers the plane runs in-process.
var clusterAPIProviders = []provider{
	{module: clusterAPIModule, dir: "core/config", namePrefix: "capi-"},
	{module: clusterAPIModule, dir: "bootstrap/kubeadm/config", namePrefix: "capi-kubeadm-bootstrap-"},
	{module: clusterAPIModule, dir: "controlplane/kubeadm/config", namePrefix: "capi-kubeadm-control-plane-"},
	{module: clusterAPITestModule, dir: "infrastructure/docker/config", namePrefix: "capd-"},
}

// capdmpWebhookPrefix names CAPDMP's webhook configurations, as config/default's namePrefix does.
const capdmpWebhookPrefix = "capdmp-"

// CRDs returns the CRDs of Cluster API's core, kubeadm bootstrap and control plane, CAPD (read
// from the module cache) and CAPDMP (embedded), each labelled with the versions that serve the
// v1beta2 contract: v1beta2 where the CRD serves it, else every served version (CAPDMP's
// v1alpha1, as config/crd/kustomization.yaml does).
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var dirs []string
	for _, p := range clusterAPIProviders {
		root, err := moduleDir(p.module)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, filepath.Join(root, p.dir, "crd", "bases"))
	}
	options := &crenvtest.CRDInstallOptions{Paths: dirs, ErrorIfPathMissing: true}
	if err := crenvtest.ReadCRDFiles(options); err != nil {
		return nil, fmt.Errorf("reading CRDs from %v: %w", dirs, err)
	}
	crds := options.CRDs
	own, err := capdmpCRDs()
	if err != nil {
		return nil, err
	}
	crds = append(crds, own...)
	for _, crd := range crds {
		labelContract(crd)
	}
	return crds, nil
}

func capdmpCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := fs.Glob(config.CRDs, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(files))
	for _, f := range files {
		raw, err := config.CRDs.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return nil, fmt.Errorf("reading CAPDMP's %s: %w", f, err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

func labelContract(crd *apiextensionsv1.CustomResourceDefinition) {
	if _, ok := crd.Labels[ContractLabel]; ok {
		return
	}
	if crd.Labels == nil {
		crd.Labels = map[string]string{}
	}
	var served []string
	for _, v := range crd.Spec.Versions {
		if v.Served {
			served = append(served, v.Name)
		}
	}
	value := strings.Join(served, "_")
	for _, v := range served {
		if v == "v1beta2" {
			value = "v1beta2"
		}
	}
	crd.Labels[ContractLabel] = value
}

// webhookConfigurations are the admission webhook configurations of a provider.
type webhookConfigurations struct {
	mutating   []*admissionregistrationv1.MutatingWebhookConfiguration
	validating []*admissionregistrationv1.ValidatingWebhookConfiguration
}

// clusterAPIWebhooks reads the webhook configurations of clusterAPIProviders from the module
// cache, named as their kustomizations name them.
func clusterAPIWebhooks() (webhookConfigurations, error) {
	var all webhookConfigurations
	for _, p := range clusterAPIProviders {
		root, err := moduleDir(p.module)
		if err != nil {
			return all, err
		}
		path := filepath.Join(root, p.dir, "webhook", "manifests.yaml")
		raw, err := os.ReadFile(path)
		if err != nil {
			return all, fmt.Errorf("reading the webhook configuration of %s: %w", p.dir, err)
		}
		if err := all.add(raw, p.namePrefix); err != nil {
			return all, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	return all, nil
}

// capdmpWebhooks returns CAPDMP's webhook configurations (embedded).
func capdmpWebhooks() (webhookConfigurations, error) {
	var own webhookConfigurations
	err := own.add(config.WebhookManifests, capdmpWebhookPrefix)
	return own, err
}

// add reads a multi-document manifest of webhook configurations and adds each, its name prefixed.
func (w *webhookConfigurations) add(raw []byte, namePrefix string) error {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var doc map[string]any
		if err := decoder.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if doc == nil {
			continue
		}
		one, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		switch doc["kind"] {
		case "MutatingWebhookConfiguration":
			c := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(one, c); err != nil {
				return err
			}
			c.Name = namePrefix + c.Name
			w.mutating = append(w.mutating, c)
		case "ValidatingWebhookConfiguration":
			c := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(one, c); err != nil {
				return err
			}
			c.Name = namePrefix + c.Name
			w.validating = append(w.validating, c)
		default:
			return fmt.Errorf("unexpected kind %v in a webhook manifest", doc["kind"])
		}
	}
}

// serveAt points every webhook at the server at hostPort (https, certificates signed by caBundle)
// instead of the in-cluster Service the manifests name.
func (w webhookConfigurations) serveAt(hostPort string, caBundle []byte) {
	point := func(cc *admissionregistrationv1.WebhookClientConfig) {
		path := ""
		if cc.Service != nil && cc.Service.Path != nil {
			path = *cc.Service.Path
		}
		url := "https://" + hostPort + path
		cc.Service, cc.URL, cc.CABundle = nil, &url, caBundle
	}
	for _, c := range w.mutating {
		for i := range c.Webhooks {
			point(&c.Webhooks[i].ClientConfig)
		}
	}
	for _, c := range w.validating {
		for i := range c.Webhooks {
			point(&c.Webhooks[i].ClientConfig)
		}
	}
}
