package manifests

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// metricsConfigs are config/metrics' files, one per kind, each a whole kube-state-metrics
// CustomResourceStateMetrics document.
var metricsConfigs = map[string]string{
	"DockerMachinePool":        "dockermachinepool.yaml",
	"DockerMachinePoolMachine": "dockermachinepoolmachine.yaml",
}

// ksmConfig mirrors the part of kube-state-metrics' custom resource configuration
// (pkg/customresourcestate: Metrics, Resource, Generator, Metric and its Gauge, Info and StateSet)
// that a configuration may set; read strictly, a misspelt or misplaced key is an error.
type ksmConfig struct {
	Kind string `json:"kind"`
	Spec struct {
		Resources []ksmResource `json:"resources"`
	} `json:"spec"`
}

type ksmResource struct {
	GroupVersionKind struct {
		Group   string `json:"group"`
		Version string `json:"version"`
		Kind    string `json:"kind"`
	} `json:"groupVersionKind"`
	CommonLabels     map[string]string   `json:"commonLabels,omitempty"`
	LabelsFromPath   map[string][]string `json:"labelsFromPath,omitempty"`
	MetricNamePrefix *string             `json:"metricNamePrefix,omitempty"`
	Metrics          []ksmGenerator      `json:"metrics"`
	ErrorLogV        int                 `json:"errorLogV,omitempty"`
	ResourcePlural   string              `json:"resourcePlural,omitempty"`
}

type ksmGenerator struct {
	Name           string              `json:"name"`
	Help           string              `json:"help"`
	Each           ksmMetric           `json:"each"`
	CommonLabels   map[string]string   `json:"commonLabels,omitempty"`
	LabelsFromPath map[string][]string `json:"labelsFromPath,omitempty"`
	ErrorLogV      int                 `json:"errorLogV,omitempty"`
}

type ksmMetric struct {
	Type     string          `json:"type"`
	Gauge    *ksmValueMetric `json:"gauge,omitempty"`
	StateSet *ksmValueMetric `json:"stateSet,omitempty"`
	Info     *ksmValueMetric `json:"info,omitempty"`
}

// ksmValueMetric has the fields of a Gauge, a StateSet and an Info: which may be set is checked
// by kind (ksmMetric.value).
type ksmValueMetric struct {
	Path           []string            `json:"path,omitempty"`
	LabelsFromPath map[string][]string `json:"labelsFromPath,omitempty"`
	ValueFrom      []string            `json:"valueFrom,omitempty"`
	NilIsZero      bool                `json:"nilIsZero,omitempty"`
	LabelFromKey   string              `json:"labelFromKey,omitempty"`
	List           []string            `json:"list,omitempty"`
	LabelName      string              `json:"labelName,omitempty"`
}

// value returns the metric's Gauge, StateSet or Info, the one its type names, and says what is
// wrong when another is set or a field does not belong to its type.
func (m ksmMetric) value() (*ksmValueMetric, error) {
	set := map[string]*ksmValueMetric{"Gauge": m.Gauge, "StateSet": m.StateSet, "Info": m.Info}
	v, known := set[m.Type]
	if !known || v == nil {
		return nil, fmt.Errorf("type %q without its %s", m.Type, strings.ToLower(m.Type[:1])+m.Type[1:])
	}
	for t, other := range set {
		if t != m.Type && other != nil {
			return nil, fmt.Errorf("type %s with a %s", m.Type, t)
		}
	}
	switch {
	case m.Type != "Gauge" && v.NilIsZero:
		return nil, fmt.Errorf("nilIsZero on a %s", m.Type)
	case m.Type == "Info" && len(v.ValueFrom) > 0:
		return nil, fmt.Errorf("valueFrom on an Info")
	case m.Type != "StateSet" && (len(v.List) > 0 || v.LabelName != ""):
		return nil, fmt.Errorf("list or labelName on a %s", m.Type)
	case m.Type == "StateSet" && (len(v.List) == 0 || v.LabelName == ""):
		return nil, fmt.Errorf("a StateSet without list or labelName")
	}
	return v, nil
}

func readMetricsConfig(g Gomega, data []byte) ksmConfig {
	var cfg ksmConfig
	g.ExpectWithOffset(1, yaml.UnmarshalStrict(data, &cfg)).To(Succeed())
	g.ExpectWithOffset(1, cfg.Kind).To(Equal("CustomResourceStateMetrics"))
	return cfg
}

// crdSchemas reads the CRDs of config/crd/bases: each kind's served versions with their schemas.
func crdSchemas(t *testing.T) map[string]map[string]*apiextensionsv1.JSONSchemaProps {
	t.Helper()
	g := NewWithT(t)
	paths, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "crd", "bases", "*.yaml"))
	g.Expect(err).ToNot(HaveOccurred())
	out := map[string]map[string]*apiextensionsv1.JSONSchemaProps{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		g.Expect(err).ToNot(HaveOccurred())
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(yaml.Unmarshal(raw, crd)).To(Succeed())
		versions := map[string]*apiextensionsv1.JSONSchemaProps{}
		for _, v := range crd.Spec.Versions {
			if v.Served && v.Schema != nil {
				versions[crd.Spec.Group+"/"+v.Name] = v.Schema.OpenAPIV3Schema
			}
		}
		out[crd.Spec.Names.Kind] = versions
	}
	return out
}

// objectMeta is the schema of metadata, which a CRD's schema leaves as a bare object: the API
// server validates it as ObjectMeta.
var objectMeta = func() apiextensionsv1.JSONSchemaProps {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	stringMap := apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &str}}
	return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"name": str, "namespace": str, "uid": str, "generateName": str, "resourceVersion": str,
		"generation":        {Type: "integer"},
		"creationTimestamp": {Type: "string", Format: "date-time"},
		"deletionTimestamp": {Type: "string", Format: "date-time"},
		"labels":            stringMap,
		"annotations":       stringMap,
		"finalizers":        {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}},
		"ownerReferences": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"apiVersion": str, "kind": str, "name": str, "uid": str,
				"controller": {Type: "boolean"}, "blockOwnerDeletion": {Type: "boolean"},
			},
		}}},
	}}
}()

// schemaAt resolves a kube-state-metrics path in a schema: field names, map keys where the schema
// allows any, and, in an array, an index or a [field=value] selector.
func schemaAt(s *apiextensionsv1.JSONSchemaProps, path []string) (*apiextensionsv1.JSONSchemaProps, error) {
	for i, p := range path {
		switch {
		case s.Type == "array":
			if !selectsElements(p) {
				return nil, fmt.Errorf("%s: %q into an array: an index or [field=value] selects its elements", strings.Join(path[:i+1], "."), p)
			}
			s = s.Items.Schema
		case s.Properties != nil:
			next, ok := s.Properties[p]
			if !ok {
				return nil, fmt.Errorf("%s: no field %q in the schema", strings.Join(path[:i+1], "."), p)
			}
			s = &next
		case s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
			s = s.AdditionalProperties.Schema
		default:
			return nil, fmt.Errorf("%s: %q below a %s without fields", strings.Join(path[:i+1], "."), p, s.Type)
		}
	}
	return s, nil
}

// selectsElements is true for an index or a [field=value] selector.
func selectsElements(p string) bool {
	if _, err := strconv.Atoi(p); err == nil {
		return true
	}
	return strings.HasPrefix(p, "[") && strings.HasSuffix(p, "]") && strings.Contains(p, "=")
}

// isGaugeValue is true for what kube-state-metrics reads as a number: numbers, booleans, times.
func isGaugeValue(s *apiextensionsv1.JSONSchemaProps) bool {
	return s.Type == "integer" || s.Type == "number" || s.Type == "boolean" || (s.Type == "string" && s.Format == "date-time")
}

func isScalar(s *apiextensionsv1.JSONSchemaProps) bool {
	return slices.Contains([]string{"string", "integer", "number", "boolean"}, s.Type) || s.XIntOrString
}

// checkMetricsResource checks a resource of a kube-state-metrics configuration against the
// schema of its kind: every path names a field the schema has (labels, metric paths, values and
// labels relative to what a path selects, each element of an array), a gauge's value is a number,
// a boolean or a time, a state set's value a string, an info's labels scalars.
func checkMetricsResource(root *apiextensionsv1.JSONSchemaProps, r ksmResource) []error {
	withMeta := *root
	withMeta.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
	for k, v := range root.Properties {
		withMeta.Properties[k] = v
	}
	withMeta.Properties["metadata"] = objectMeta
	var errs []error
	label := func(where string, base *apiextensionsv1.JSONSchemaProps, labels map[string][]string) {
		for name, path := range labels {
			s, err := schemaAt(base, path)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: label %s: %w", where, name, err))
			case !isScalar(s):
				errs = append(errs, fmt.Errorf("%s: label %s: %s is a %s, not a value", where, name, strings.Join(path, "."), s.Type))
			}
		}
	}
	label("labelsFromPath", &withMeta, r.LabelsFromPath)
	for _, m := range r.Metrics {
		where := "metric " + m.Name
		v, err := m.Each.value()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		base, err := schemaAt(&withMeta, v.Path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: path: %w", where, err))
			continue
		}
		// A path that selects an array yields a series per element; what follows is relative to it.
		if base.Type == "array" {
			base = base.Items.Schema
		}
		label(where, base, v.LabelsFromPath)
		value := base
		if len(v.ValueFrom) > 0 {
			if value, err = schemaAt(base, v.ValueFrom); err != nil {
				errs = append(errs, fmt.Errorf("%s: valueFrom: %w", where, err))
				continue
			}
		}
		switch m.Each.Type {
		case "Gauge":
			if !isGaugeValue(value) {
				errs = append(errs, fmt.Errorf("%s: a gauge of a %s %s, not a number, a boolean or a time", where, value.Type, value.Format))
			}
		case "StateSet":
			if value.Type != "string" {
				errs = append(errs, fmt.Errorf("%s: a state set of a %s, not a string", where, value.Type))
			}
			for _, state := range v.List {
				if len(value.Enum) > 0 && !slices.ContainsFunc(value.Enum, func(e apiextensionsv1.JSON) bool { return string(e.Raw) == strconv.Quote(state) }) {
					errs = append(errs, fmt.Errorf("%s: state %q is not one the schema allows", where, state))
				}
			}
		}
	}
	return errs
}

var (
	promMetricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	promLabelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// TestKubeStateMetricsConfig: each file of config/metrics configures kube-state-metrics for one
// of CAPDMP's kinds, at a version its CRD serves, as Cluster API configures its own kinds (info,
// created, paused, owner, conditions), with the pool's replicas and the Kubernetes version label;
// every path it names is in the CRD's schema, so that a renamed field fails here and not as a
// series that silently never appears.
func TestKubeStateMetricsConfig(t *testing.T) {
	schemas := crdSchemas(t)
	common := []string{"info", "created", "annotation_paused", "owner", "status_condition", "status_condition_last_transition_time", "status_initialization_provisioned"}
	wantMetrics := map[string][]string{
		"DockerMachinePool":        append(slices.Clone(common), "status_replicas", "status_replicas_ready", "status_version_gate_waiting_since"),
		"DockerMachinePoolMachine": common,
	}
	for kind, file := range metricsConfigs {
		t.Run(kind, func(t *testing.T) {
			g := NewWithT(t)
			raw, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "metrics", file))
			g.Expect(err).ToNot(HaveOccurred())
			cfg := readMetricsConfig(g, raw)
			g.Expect(cfg.Spec.Resources).To(HaveLen(1), "one kind per file")
			r := cfg.Spec.Resources[0]
			gvk := r.GroupVersionKind
			g.Expect(gvk.Kind).To(Equal(kind))
			g.Expect(gvk.Group + "/" + gvk.Version).To(Equal(infrav1.GroupVersion.String()))
			root := schemas[kind][gvk.Group+"/"+gvk.Version]
			g.Expect(root).ToNot(BeNil(), "config/crd/bases serves %s at %s/%s", kind, gvk.Group, gvk.Version)
			g.Expect(r.MetricNamePrefix).To(HaveValue(Equal("capdmp_" + strings.ToLower(kind))))
			g.Expect(r.LabelsFromPath).To(Equal(map[string][]string{
				"cluster_name": {"metadata", "labels", "cluster.x-k8s.io/cluster-name"},
				"name":         {"metadata", "name"},
				"namespace":    {"metadata", "namespace"},
				"uid":          {"metadata", "uid"},
			}), "objects are named as Cluster API's metrics name them")

			var names []string
			for _, m := range r.Metrics {
				g.Expect(m.Help).ToNot(BeEmpty(), m.Name)
				g.Expect(promMetricName.MatchString(*r.MetricNamePrefix+"_"+m.Name)).To(BeTrue(), m.Name)
				v, err := m.Each.value()
				g.Expect(err).ToNot(HaveOccurred(), m.Name)
				for l := range v.LabelsFromPath {
					g.Expect(promLabelName.MatchString(l)).To(BeTrue(), "%s: label %s", m.Name, l)
					g.Expect(r.LabelsFromPath).ToNot(HaveKey(l), "%s: label %s is the object's already", m.Name, l)
				}
				names = append(names, m.Name)
			}
			g.Expect(names).To(ConsistOf(wantMetrics[kind]), "each metric once")
			info := r.Metrics[slices.IndexFunc(r.Metrics, func(m ksmGenerator) bool { return m.Name == "info" })]
			g.Expect(info.Each.Info.LabelsFromPath).To(HaveKeyWithValue("version", []string{"metadata", "labels", infrav1.KubernetesVersionLabel}))

			g.Expect(checkMetricsResource(root, r)).To(BeEmpty())
		})
	}
}

// TestKubeStateMetricsConfigCheck: the check of TestKubeStateMetricsConfig refuses what would
// give no series or a wrong one.
func TestKubeStateMetricsConfigCheck(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "metrics", metricsConfigs["DockerMachinePool"]))
	if err != nil {
		t.Fatal(err)
	}
	root := crdSchemas(t)["DockerMachinePool"][infrav1.GroupVersion.String()]
	metric := func(name string, each ksmMetric) func(*ksmResource) {
		return func(r *ksmResource) { r.Metrics = append(r.Metrics, ksmGenerator{Name: name, Help: name, Each: each}) }
	}
	gauge := func(path []string, valueFrom ...string) ksmMetric {
		return ksmMetric{Type: "Gauge", Gauge: &ksmValueMetric{Path: path, ValueFrom: valueFrom}}
	}
	tests := []struct {
		name    string
		mutate  func(*ksmResource)
		wantErr string
	}{
		{name: "the shipped file", mutate: func(*ksmResource) {}},
		{name: "a status field the schema lacks", mutate: metric("x", gauge([]string{"status", "readyReplica"})),
			wantErr: `status.readyReplica: no field "readyReplica"`},
		{name: "a field of the v1beta1 contract", mutate: metric("x", gauge([]string{"status", "availableReplicas"})),
			wantErr: `no field "availableReplicas"`},
		{name: "a condition field relative to the list", mutate: metric("x", gauge([]string{"status", "conditions"}, "lastTransition")),
			wantErr: `valueFrom: lastTransition: no field "lastTransition"`},
		{name: "a gauge of a string", mutate: metric("x", gauge([]string{"status", "versionGate", "admittedVersion"})),
			wantErr: "a gauge of a string"},
		{name: "a gauge of an object", mutate: metric("x", gauge([]string{"status", "versionGate"})),
			wantErr: "a gauge of a object"},
		{name: "metadata is checked as ObjectMeta", mutate: metric("x", gauge([]string{"metadata", "creationTimestmap"})),
			wantErr: `no field "creationTimestmap"`},
		{name: "a resource label that is an object", mutate: func(r *ksmResource) { r.LabelsFromPath["spec"] = []string{"spec", "template"} },
			wantErr: "label spec: spec.template is a object"},
		{name: "a state the schema does not allow", mutate: metric("x", ksmMetric{Type: "StateSet", StateSet: &ksmValueMetric{
			Path: []string{"status", "conditions"}, ValueFrom: []string{"status"}, LabelName: "status", List: []string{"Yes"},
		}}), wantErr: `state "Yes"`},
		{name: "a type without its metric", mutate: metric("x", ksmMetric{Type: "Info", Gauge: &ksmValueMetric{Path: []string{"status", "replicas"}}}),
			wantErr: `type "Info" without its info`},
		{name: "a field into an array without a selector", mutate: metric("x", gauge([]string{"status", "conditions", "lastTransitionTime"})),
			wantErr: "into an array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r := readMetricsConfig(g, raw).Spec.Resources[0]
			tt.mutate(&r)
			errs := checkMetricsResource(root, r)
			if tt.wantErr == "" {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs).To(ContainElement(MatchError(ContainSubstring(tt.wantErr))))
		})
	}
}

// TestKubeStateMetricsConfigShipped: kustomize builds config/metrics as Cluster API's: a
// ConfigMap labelled for the kube-state-metrics sidecar of Cluster API's observability setup,
// holding every file, which that sidecar's script (hack/observability/kube-state-metrics/
// crd-sidecar-cm.yaml: one header, then every file without its own header) compiles into a
// configuration of all the kinds; and a ClusterRole, aggregated into kube-state-metrics' own,
// that reads those kinds and nothing else.
func TestKubeStateMetricsConfigShipped(t *testing.T) {
	g := NewWithT(t)
	objs := decodeObjects(g, kustomizeBuild(t, "config/metrics"))
	g.Expect(objs).To(HaveLen(2))

	configMaps := byKind(objs, "ConfigMap")
	g.Expect(configMaps).To(HaveLen(1))
	var cm corev1.ConfigMap
	fromUnstructured(g, configMaps[0], &cm)
	g.Expect(cm.Namespace).To(Equal("observability"))
	g.Expect(cm.Labels).To(HaveKeyWithValue("kube-state-metrics/custom-resource", "true"))
	g.Expect(cm.Data).To(HaveLen(len(metricsConfigs)))
	for _, file := range metricsConfigs {
		raw, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "metrics", file))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(cm.Data).To(HaveKeyWithValue("capdmp-"+file, string(raw)))
	}

	// As the sidecar's compile.sh does.
	compiled := "kind: CustomResourceStateMetrics\nspec:\n  resources:\n"
	header := regexp.MustCompile(`^(-|kind: CustomResourceStateMetrics|spec:| +resources:)`)
	for _, key := range slices.Sorted(maps.Keys(cm.Data)) {
		scanner := bufio.NewScanner(strings.NewReader(cm.Data[key]))
		for scanner.Scan() {
			if !header.MatchString(scanner.Text()) {
				compiled += scanner.Text() + "\n"
			}
		}
	}
	var kinds []string
	var plurals []string
	for _, r := range readMetricsConfig(g, []byte(compiled)).Spec.Resources {
		kinds = append(kinds, r.GroupVersionKind.Kind)
		plurals = append(plurals, strings.ToLower(r.GroupVersionKind.Kind)+"s")
	}
	g.Expect(kinds).To(ConsistOf(slices.Collect(maps.Keys(metricsConfigs))))

	roles := byKind(objs, "ClusterRole")
	g.Expect(roles).To(HaveLen(1))
	var role rbacv1.ClusterRole
	fromUnstructured(g, roles[0], &role)
	g.Expect(role.Labels).To(HaveKeyWithValue("kube-state-metrics/aggregate-to-manager", "true"))
	g.Expect(role.Name).To(HavePrefix("kube-state-metrics-"), "beside Cluster API's kube-state-metrics-manager-metrics-role")
	g.Expect(role.Name).ToNot(Equal("kube-state-metrics-manager-metrics-role"))
	g.Expect(role.Rules).To(HaveLen(1))
	g.Expect(role.Rules[0].APIGroups).To(Equal([]string{infrav1.GroupVersion.Group}))
	g.Expect(role.Rules[0].Resources).To(ConsistOf(plurals))
	g.Expect(role.Rules[0].Verbs).To(ConsistOf("get", "list", "watch"))
}
