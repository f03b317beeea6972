package manifests

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/cluster-api/core/reconcilers/topology/cluster/patches/inline"
	capdv1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/webhooks"
)

// capdmpClusterClass is the ClusterClass of clusterclass-capdmp.yaml and its
// DockerMachinePoolTemplate of the pool class default-worker.
func capdmpClusterClass(t *testing.T) (clusterv1.ClusterClass, unstructured.Unstructured) {
	t.Helper()
	g := NewWithT(t)
	scheme := templateScheme(g)
	file := findTemplate(t, "clusterclass-capdmp.yaml")
	var cc clusterv1.ClusterClass
	for _, obj := range byKind(file.objects, "ClusterClass") {
		convert(g, scheme, obj, &cc)
	}
	g.Expect(cc.Spec.Workers.MachinePools).To(HaveLen(1))
	ref := cc.Spec.Workers.MachinePools[0].Infrastructure.TemplateRef
	for _, obj := range byKind(file.objects, ref.Kind) {
		if obj.GetName() == ref.Name {
			return cc, obj
		}
	}
	t.Fatalf("clusterclass-capdmp.yaml has no %s %s", ref.Kind, ref.Name)
	return cc, unstructured.Unstructured{}
}

// topologyVariables renders cluster-template-topology.yaml with clusterctl's variables and these
// others, as clusterctl generate cluster does, and returns its Cluster's topology variables.
func topologyVariables(t *testing.T, extra map[string]string) []clusterv1.ClusterVariable {
	t.Helper()
	g := NewWithT(t)
	raw := readFile(g, filepath.Join(repoRoot(t), "templates", "cluster-template-topology.yaml"))
	rendered, err := yamlprocessor.NewSimpleProcessor().Process(raw, func(name string) (string, error) {
		if v, ok := extra[name]; ok {
			return v, nil
		}
		if v, ok := clusterctlVariables[name]; ok {
			return v, nil
		}
		return "", fmt.Errorf("variable %s not set", name)
	})
	g.Expect(err).NotTo(HaveOccurred())
	clusters := byKind(decodeObjects(g, rendered), "Cluster")
	g.Expect(clusters).To(HaveLen(1))
	var cluster clusterv1.Cluster
	convert(g, templateScheme(g), clusters[0], &cluster)
	return cluster.Spec.Topology.Variables
}

// patchPoolTemplate runs every patch of the ClusterClass on the pool class's template as the
// topology controller asks for it (held by a MachinePool of class poolClass), and checks that the
// result is a DockerMachinePoolTemplate our webhooks take.
func patchPoolTemplate(t *testing.T, cc clusterv1.ClusterClass, template unstructured.Unstructured, poolClass string, values []clusterv1.ClusterVariable) (*unstructured.Unstructured, *infrav1.DockerMachinePoolTemplate) {
	t.Helper()
	g := NewWithT(t)
	holder := runtimehooksv1.HolderReference{
		APIVersion: clusterv1.GroupVersion.String(), Kind: "MachinePool", Namespace: "default", Name: "demo-mp-0",
		FieldPath: "spec.template.spec.infrastructureRef",
	}
	obj := patchTemplate(t, cc, template, holder, fmt.Sprintf(`{"machinePool":{"class":%q}}`, poolClass), values)

	data, err := obj.MarshalJSON()
	g.Expect(err).NotTo(HaveOccurred())
	typed := &infrav1.DockerMachinePoolTemplate{}
	g.Expect(yaml.UnmarshalStrict(data, typed)).To(Succeed(), "the patched template is not a DockerMachinePoolTemplate:\n%s", data)
	// What the topology controller creates must pass our webhooks.
	wh := &webhooks.DockerMachinePoolTemplate{}
	g.Expect(wh.Default(context.Background(), typed)).To(Succeed())
	_, err = wh.ValidateCreate(context.Background(), typed)
	g.Expect(err).NotTo(HaveOccurred())
	return obj, typed
}

// patchTemplate runs every patch of the ClusterClass with CAPI's inline patch generator, the one
// the topology controller runs, on template held by holder, with the builtin variables (JSON) and
// these variables and the schema's defaults for the others, and applies the patches it returns.
func patchTemplate(t *testing.T, cc clusterv1.ClusterClass, template unstructured.Unstructured, holder runtimehooksv1.HolderReference, builtin string, values []clusterv1.ClusterVariable) *unstructured.Unstructured {
	t.Helper()
	g := NewWithT(t)
	set := map[string]apiextensionsv1.JSON{}
	for _, v := range values {
		set[v.Name] = v.Value
	}
	var variables []runtimehooksv1.Variable
	for _, v := range cc.Spec.Variables {
		value, ok := set[v.Name]
		if !ok {
			g.Expect(v.Schema.OpenAPIV3Schema.Default).NotTo(BeNil(), "variable %s is neither set nor defaulted", v.Name)
			value = *v.Schema.OpenAPIV3Schema.Default
		}
		delete(set, v.Name)
		variables = append(variables, runtimehooksv1.Variable{Name: v.Name, Value: value})
	}
	g.Expect(set).To(BeEmpty(), "the Cluster sets variables the ClusterClass does not define")

	obj := template.DeepCopy()
	for i := range cc.Spec.Patches {
		req := &runtimehooksv1.GeneratePatchesRequest{
			Variables: variables,
			Items: []runtimehooksv1.GeneratePatchesRequestItem{{
				UID:             "template",
				HolderReference: holder,
				Object:          runtime.RawExtension{Object: obj},
				Variables:       []runtimehooksv1.Variable{{Name: "builtin", Value: apiextensionsv1.JSON{Raw: []byte(builtin)}}},
			}},
		}
		resp, err := inline.NewGenerator(&cc.Spec.Patches[i]).Generate(context.Background(), nil, req)
		g.Expect(err).NotTo(HaveOccurred(), "patch %s", cc.Spec.Patches[i].Name)
		for _, item := range resp.Items {
			g.Expect(item.PatchType).To(Equal(runtimehooksv1.JSONPatchType))
			applyAddPatch(g, obj, item.Patch)
		}
	}
	return obj
}

// applyAddPatch applies a JSON patch (RFC 6902) of "add" operations on object members, the only
// kind the ClusterClass's patches have; any other fails the test.
func applyAddPatch(g Gomega, obj *unstructured.Unstructured, patch []byte) {
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	g.ExpectWithOffset(1, json.Unmarshal(patch, &ops)).To(Succeed())
	for _, op := range ops {
		g.ExpectWithOffset(1, op.Op).To(Equal("add"), "patch %s", patch)
		fields := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
		var value interface{}
		g.ExpectWithOffset(1, json.Unmarshal(op.Value, &value)).To(Succeed())
		_, found, err := unstructured.NestedMap(obj.Object, fields[:len(fields)-1]...)
		g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
		g.ExpectWithOffset(1, found).To(BeTrue(), "%s: the template has no %v", op.Path, fields[:len(fields)-1])
		g.ExpectWithOffset(1, unstructured.SetNestedField(obj.Object, value, fields...)).To(Succeed())
	}
}

// TestClusterClassPoolVariables: the ClusterClass's variables customImage and preLoadImages reach
// the pools' DockerMachinePoolTemplate through its patches, from the topology flavor's clusterctl
// variables, and the defaults leave the template as it is.
func TestClusterClassPoolVariables(t *testing.T) {
	g := NewWithT(t)
	cc, template := capdmpClusterClass(t)
	poolClass := cc.Spec.Workers.MachinePools[0].Class
	defined := map[string]bool{}
	for _, v := range cc.Spec.Variables {
		defined[v.Name] = true
		g.Expect(v.Required).To(HaveValue(BeFalse()), "variable %s: a Cluster from another template need not set it", v.Name)
	}
	g.Expect(defined).To(HaveKey("customImage"))
	g.Expect(defined).To(HaveKey("preLoadImages"))
	unpatched := &infrav1.DockerMachinePoolTemplate{}
	data, err := template.MarshalJSON()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(yaml.UnmarshalStrict(data, unpatched)).To(Succeed())

	tests := []struct {
		name        string
		poolClass   string
		variables   []clusterv1.ClusterVariable
		wantImage   string
		wantPreload []string
	}{
		{name: "the ClusterClass's defaults", poolClass: poolClass},
		{
			name: "the topology flavor's defaults", poolClass: poolClass,
			variables: topologyVariables(t, nil),
		},
		{
			name: "CAPDMP_CUSTOM_IMAGE and CAPDMP_PRELOAD_IMAGES of the topology flavor", poolClass: poolClass,
			variables: topologyVariables(t, map[string]string{
				"CAPDMP_CUSTOM_IMAGE":   "registry.example/capdmp/node:v1.36.3",
				"CAPDMP_PRELOAD_IMAGES": `["registry.example/app:v1", "busybox:1.36"]`,
			}),
			wantImage:   "registry.example/capdmp/node:v1.36.3",
			wantPreload: []string{"registry.example/app:v1", "busybox:1.36"},
		},
		{
			name: "another pool class is left alone", poolClass: "other-worker",
			variables: []clusterv1.ClusterVariable{
				{Name: "customImage", Value: apiextensionsv1.JSON{Raw: []byte(`"kindest/node:v1.36.3"`)}},
				{Name: "preLoadImages", Value: apiextensionsv1.JSON{Raw: []byte(`["busybox:1.36"]`)}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			obj, patched := patchPoolTemplate(t, cc, template, tt.poolClass, tt.variables)
			// An empty variable leaves the field out: the CRD takes no empty customImage.
			for field, want := range map[string]bool{"customImage": tt.wantImage != "", "preLoadImages": tt.wantPreload != nil} {
				_, found, err := unstructured.NestedFieldNoCopy(obj.Object, "spec", "template", "spec", "template", field)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(found).To(Equal(want), "spec.template.spec.template.%s set: %v", field, found)
			}
			g.Expect(patched.Spec.Template.Spec.Template.CustomImage).To(Equal(tt.wantImage))
			g.Expect(patched.Spec.Template.Spec.Template.PreLoadImages).To(Equal(tt.wantPreload))
			if tt.wantImage == "" && tt.wantPreload == nil {
				g.Expect(patched.Spec).To(Equal(unpatched.Spec), "the template changed")
			}
		})
	}
}

// TestTopologyFlavorSetsOnlyClassVariables: every variable the topology flavor's Cluster sets is one
// the ClusterClass defines, with a value its schema's type takes.
func TestTopologyFlavorSetsOnlyClassVariables(t *testing.T) {
	g := NewWithT(t)
	cc, _ := capdmpClusterClass(t)
	schemas := map[string]clusterv1.JSONSchemaProps{}
	for _, v := range cc.Spec.Variables {
		schemas[v.Name] = v.Schema.OpenAPIV3Schema
	}
	variables := topologyVariables(t, nil)
	g.Expect(variables).NotTo(BeEmpty())
	for _, v := range variables {
		schema, ok := schemas[v.Name]
		g.Expect(ok).To(BeTrue(), "the topology flavor sets %s, which ClusterClass %s does not define", v.Name, cc.Name)
		var value interface{}
		g.Expect(json.Unmarshal(v.Value.Raw, &value)).To(Succeed())
		switch schema.Type {
		case "string":
			g.Expect(value).To(BeAssignableToTypeOf(""), v.Name)
		case "array":
			g.Expect(value).To(BeAssignableToTypeOf([]interface{}{}), v.Name)
		default:
			t.Errorf("variable %s: type %s not checked here", v.Name, schema.Type)
		}
		g.Expect(v.Value.Raw).To(MatchJSON(schema.Default.Raw), "%s: the flavor's default is not the class's", v.Name)
	}
}

// TestClusterClassControlPlaneImageByTag: the topology controller's patches name the control
// plane's node image by the tag of its version, so that CAPD runs an image of that tag on the
// engine (one `make node-images` built) instead of pulling kind's, pinned by digest; a new
// version gives a new image, which the topology controller rotates the template for.
func TestClusterClassControlPlaneImageByTag(t *testing.T) {
	g := NewWithT(t)
	cc, _ := capdmpClusterClass(t)
	ref := cc.Spec.ControlPlane.MachineInfrastructure.TemplateRef
	var template unstructured.Unstructured
	for _, obj := range byKind(findTemplate(t, "clusterclass-capdmp.yaml").objects, ref.Kind) {
		if obj.GetName() == ref.Name {
			template = obj
		}
	}
	g.Expect(template.Object).NotTo(BeNil(), "clusterclass-capdmp.yaml has no %s %s", ref.Kind, ref.Name)
	holder := runtimehooksv1.HolderReference{
		APIVersion: controlplanev1.GroupVersion.String(), Kind: "KubeadmControlPlane", Namespace: "default", Name: "demo-control-plane",
		FieldPath: "spec.machineTemplate.spec.infrastructureRef",
	}
	for version, want := range map[string]string{
		"v1.36.4":          "kindest/node:v1.36.4",
		"v1.37.0":          "kindest/node:v1.37.0",
		"v1.37.0+capdmp.1": "kindest/node:v1.37.0_capdmp.1", // an image tag has no "+"
	} {
		t.Run(version, func(t *testing.T) {
			g := NewWithT(t)
			obj := patchTemplate(t, cc, template, holder, fmt.Sprintf(`{"controlPlane":{"version":%q}}`, version), nil)
			dmt := &capdv1.DockerMachineTemplate{} //nolint:staticcheck // the kind the ClusterClass uses
			convert(g, templateScheme(g), *obj, dmt)
			g.Expect(dmt.Spec.Template.Spec.CustomImage).To(Equal(want))
		})
	}
}
