package manifests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	capdv1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/webhooks"
)

// clusterctlVariables are the values clusterctl generate cluster sets from its arguments and
// flags; a template may require no other variable (others need a default).
var clusterctlVariables = map[string]string{
	"CLUSTER_NAME":                "capdmp-test",
	"NAMESPACE":                   "capdmp-test-ns",
	"KUBERNETES_VERSION":          "v1.35.0",
	"CONTROL_PLANE_MACHINE_COUNT": "3",
	"WORKER_MACHINE_COUNT":        "2",
}

// templateScheme knows every kind a template may contain, so that each object can be decoded
// strictly into its Go type: a misspelt or misplaced field fails the test instead of being
// dropped by the API server.
func templateScheme(g Gomega) *runtime.Scheme {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clusterv1.AddToScheme, bootstrapv1.AddToScheme, controlplanev1.AddToScheme, capdv1.AddToScheme, infrav1.AddToScheme,
	} {
		g.Expect(add(scheme)).To(Succeed())
	}
	return scheme
}

type templateFile struct {
	name    string
	objects []unstructured.Unstructured
}

// renderTemplates reads every template in templates/ and substitutes clusterctl's variables the
// way clusterctl does (its own yaml processor, defaults included).
func renderTemplates(t *testing.T) []templateFile {
	t.Helper()
	g := NewWithT(t)
	paths, err := filepath.Glob(filepath.Join(repoRoot(t), "templates", "*.yaml"))
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(paths).ToNot(BeEmpty())

	processor := yamlprocessor.NewSimpleProcessor()
	var files []templateFile
	for _, path := range paths {
		name := filepath.Base(path)
		raw, err := os.ReadFile(path)
		g.Expect(err).ToNot(HaveOccurred())

		variables, err := processor.GetVariableMap(raw)
		g.Expect(err).ToNot(HaveOccurred(), name)
		for variable, defaultValue := range variables {
			if strings.HasPrefix(name, "clusterclass-") {
				t.Errorf("%s uses the variable %s: the clusterctl contract wants ClusterClass definitions without variables", name, variable)
			}
			if _, known := clusterctlVariables[variable]; !known && defaultValue == nil {
				t.Errorf("%s requires the variable %s, which clusterctl does not set: give it a default", name, variable)
			}
		}

		rendered, err := processor.Process(raw, func(variable string) (string, error) {
			if v, ok := clusterctlVariables[variable]; ok {
				return v, nil
			}
			return "", fmt.Errorf("variable %s not set", variable)
		})
		g.Expect(err).ToNot(HaveOccurred(), name)
		files = append(files, templateFile{name: name, objects: decodeObjects(g, rendered)})
	}
	return files
}

func TestTemplatesNames(t *testing.T) {
	g := NewWithT(t)
	var names []string
	for _, file := range renderTemplates(t) {
		names = append(names, file.name)
		g.Expect(file.name).To(Or(HavePrefix("cluster-template-"), HavePrefix("clusterclass-")),
			"clusterctl and Tilt only know cluster-template-<flavor>.yaml and clusterclass-<name>.yaml")
	}
	g.Expect(names).To(ContainElements("cluster-template-machinepool.yaml", "cluster-template-topology.yaml", "clusterclass-capdmp.yaml"))
}

func TestTemplatesDecodeStrictly(t *testing.T) {
	g := NewWithT(t)
	scheme := templateScheme(g)
	for _, file := range renderTemplates(t) {
		g.Expect(file.objects).ToNot(BeEmpty(), file.name)
		for _, obj := range file.objects {
			id := fmt.Sprintf("%s: %s %s", file.name, obj.GetKind(), obj.GetName())
			typed, err := scheme.New(obj.GroupVersionKind())
			g.Expect(err).ToNot(HaveOccurred(), "%s: unknown kind %s", id, obj.GroupVersionKind())
			data, err := obj.MarshalJSON()
			g.Expect(err).ToNot(HaveOccurred(), id)
			g.Expect(yaml.UnmarshalStrict(data, typed)).To(Succeed(), id)

			if strings.HasPrefix(file.name, "clusterclass-") {
				g.Expect(obj.GetNamespace()).To(BeEmpty(), "%s: objects of a ClusterClass definition name no namespace", id)
			} else {
				g.Expect(obj.GetNamespace()).To(Equal(clusterctlVariables["NAMESPACE"]), "%s: every object goes to ${NAMESPACE}", id)
			}

			// Our objects must pass our own admission webhooks as they are.
			ctx := context.Background()
			switch o := typed.(type) {
			case *infrav1.DockerMachinePool:
				wh := &webhooks.DockerMachinePool{}
				g.Expect(wh.Default(ctx, o)).To(Succeed(), id)
				_, err := wh.ValidateCreate(ctx, o)
				g.Expect(err).ToNot(HaveOccurred(), id)
			case *infrav1.DockerMachinePoolTemplate:
				wh := &webhooks.DockerMachinePoolTemplate{}
				g.Expect(wh.Default(ctx, o)).To(Succeed(), id)
				_, err := wh.ValidateCreate(ctx, o)
				g.Expect(err).ToNot(HaveOccurred(), id)
			}
		}
	}
}

// objectKey identifies an object of a template by API group, kind and name.
func objectKey(group, kind, name string) string { return group + "/" + kind + "/" + name }

func index(objs []unstructured.Unstructured) sets.Set[string] {
	keys := sets.New[string]()
	for _, obj := range objs {
		keys.Insert(objectKey(obj.GroupVersionKind().Group, obj.GetKind(), obj.GetName()))
	}
	return keys
}

func TestTemplateMachinePool(t *testing.T) {
	g := NewWithT(t)
	scheme := templateScheme(g)
	file := findTemplate(t, "cluster-template-machinepool.yaml")
	objects := index(file.objects)

	// Every reference resolves to an object of the template.
	expectRef := func(from string, ref clusterv1.ContractVersionedObjectReference) {
		g.ExpectWithOffset(1, objects.Has(objectKey(ref.APIGroup, ref.Kind, ref.Name))).To(BeTrue(),
			"%s refers to %s %s (group %s), which the template does not create", from, ref.Kind, ref.Name, ref.APIGroup)
	}

	var clusters []clusterv1.Cluster
	var pools []clusterv1.MachinePool
	var healthChecks []clusterv1.MachineHealthCheck
	for _, obj := range file.objects {
		switch obj.GetKind() {
		case "MachineHealthCheck":
			var mhc clusterv1.MachineHealthCheck
			convert(g, scheme, obj, &mhc)
			healthChecks = append(healthChecks, mhc)
		case "Cluster":
			var c clusterv1.Cluster
			convert(g, scheme, obj, &c)
			clusters = append(clusters, c)
		case "MachinePool":
			var p clusterv1.MachinePool
			convert(g, scheme, obj, &p)
			pools = append(pools, p)
		case "KubeadmControlPlane":
			var kcp controlplanev1.KubeadmControlPlane
			convert(g, scheme, obj, &kcp)
			g.Expect(kcp.Spec.Version).To(Equal(clusterctlVariables["KUBERNETES_VERSION"]))
			g.Expect(*kcp.Spec.Replicas).To(BeEquivalentTo(3))
			g.Expect(kcp.Spec.Remediation.MaxRetry).To(HaveValue(BeEquivalentTo(3)), "KCP remediates a failed control-plane Machine")
			expectRef("KubeadmControlPlane", kcp.Spec.MachineTemplate.Spec.InfrastructureRef)
		case "KubeadmConfig":
			var config bootstrapv1.KubeadmConfig
			convert(g, scheme, obj, &config)
			expectKindNodeRegistration(g, config.Spec.JoinConfiguration.NodeRegistration)
		case "DockerMachineTemplate":
			// The control plane's image by tag (CAPD would pull kind's, pinned by digest), in a
			// template named for its version: the flavor applied again at another version makes
			// a new one rather than changing an immutable template.
			var dmt capdv1.DockerMachineTemplate //nolint:staticcheck // the kind the flavor uses
			convert(g, scheme, obj, &dmt)
			version := clusterctlVariables["KUBERNETES_VERSION"]
			g.Expect(dmt.Spec.Template.Spec.CustomImage).To(Equal("kindest/node:" + version))
			g.Expect(dmt.Name).To(HaveSuffix(version))
		}
	}

	g.Expect(clusters).To(HaveLen(1))
	g.Expect(clusters[0].Name).To(Equal(clusterctlVariables["CLUSTER_NAME"]))
	expectRef("Cluster", clusters[0].Spec.InfrastructureRef)
	expectRef("Cluster", clusters[0].Spec.ControlPlaneRef)
	g.Expect(clusters[0].Spec.InfrastructureRef.APIGroup).To(Equal(capdv1.GroupVersion.Group), "the control plane runs on CAPD")

	g.Expect(pools).To(HaveLen(1))
	pool := pools[0]

	// The control plane's Machines are health-checked, so that KCP replaces one whose join
	// failed, and so are the pool's, so that the pool replaces them.
	g.Expect(healthChecks).To(HaveLen(2))
	for _, mhc := range healthChecks {
		g.Expect(mhc.Spec.ClusterName).To(Equal(clusters[0].Name))
		g.Expect(mhc.Spec.Checks.NodeStartupTimeoutSeconds).To(HaveValue(BeEquivalentTo(600)))
		g.Expect(mhc.Spec.Checks.UnhealthyNodeConditions).NotTo(BeEmpty())
	}
	g.Expect(healthChecks[0].Spec.Selector.MatchLabels).To(HaveKey(clusterv1.MachineControlPlaneLabel))
	g.Expect(healthChecks[1].Spec.Selector.MatchLabels).To(Equal(map[string]string{clusterv1.MachinePoolNameLabel: pool.Name}),
		"the pool's Machines carry its name; a longer name than a label value holds would need its hash")
	g.Expect(pool.Spec.ClusterName).To(Equal(clusters[0].Name))
	g.Expect(*pool.Spec.Replicas).To(BeEquivalentTo(2))
	g.Expect(pool.Spec.Template.Spec.Version).To(Equal(clusterctlVariables["KUBERNETES_VERSION"]))
	g.Expect(pool.Spec.Template.Spec.InfrastructureRef.APIGroup).To(Equal(infrav1.GroupVersion.Group))
	g.Expect(pool.Spec.Template.Spec.InfrastructureRef.Kind).To(Equal("DockerMachinePool"))
	expectRef("MachinePool", pool.Spec.Template.Spec.InfrastructureRef)
	expectRef("MachinePool", pool.Spec.Template.Spec.Bootstrap.ConfigRef)
	for _, obj := range file.objects {
		if obj.GetKind() == "DockerMachinePool" {
			g.Expect(obj.GetAPIVersion()).To(Equal(infrav1.GroupVersion.String()))
		}
	}
}

func TestTemplateClusterClass(t *testing.T) {
	g := NewWithT(t)
	scheme := templateScheme(g)
	file := findTemplate(t, "clusterclass-capdmp.yaml")

	objects := sets.New[string]()
	for _, obj := range file.objects {
		objects.Insert(obj.GetAPIVersion() + "/" + obj.GetKind() + "/" + obj.GetName())
	}
	expectTemplate := func(from string, ref clusterv1.ClusterClassTemplateReference) {
		g.ExpectWithOffset(1, objects.Has(ref.APIVersion+"/"+ref.Kind+"/"+ref.Name)).To(BeTrue(),
			"%s refers to %s %s (%s), which the file does not define", from, ref.Kind, ref.Name, ref.APIVersion)
	}

	var classes []clusterv1.ClusterClass
	for _, obj := range file.objects {
		switch obj.GetKind() {
		case "ClusterClass":
			var cc clusterv1.ClusterClass
			convert(g, scheme, obj, &cc)
			classes = append(classes, cc)
		case "KubeadmConfigTemplate":
			var config bootstrapv1.KubeadmConfigTemplate
			convert(g, scheme, obj, &config)
			expectKindNodeRegistration(g, config.Spec.Template.Spec.JoinConfiguration.NodeRegistration)
		}
	}
	g.Expect(classes).To(HaveLen(1))
	cc := classes[0]
	g.Expect(cc.Name).To(Equal("capdmp"), "clusterclass-<name>.yaml defines the ClusterClass <name>")

	expectTemplate("infrastructure", cc.Spec.Infrastructure.TemplateRef)
	expectTemplate("controlPlane", cc.Spec.ControlPlane.TemplateRef)
	expectTemplate("controlPlane.machineInfrastructure", cc.Spec.ControlPlane.MachineInfrastructure.TemplateRef)
	g.Expect(cc.Spec.Workers.MachineDeployments).To(BeEmpty())
	g.Expect(cc.Spec.Workers.MachinePools).ToNot(BeEmpty())
	for _, mp := range cc.Spec.Workers.MachinePools {
		expectTemplate("machinePools "+mp.Class+" bootstrap", mp.Bootstrap.TemplateRef)
		expectTemplate("machinePools "+mp.Class+" infrastructure", mp.Infrastructure.TemplateRef)
		g.Expect(mp.Infrastructure.TemplateRef.APIVersion).To(Equal(infrav1.GroupVersion.String()), mp.Class)
		g.Expect(mp.Infrastructure.TemplateRef.Kind).To(Equal("DockerMachinePoolTemplate"), mp.Class)
	}
}

func TestTemplateTopology(t *testing.T) {
	g := NewWithT(t)
	scheme := templateScheme(g)
	file := findTemplate(t, "cluster-template-topology.yaml")

	g.Expect(file.objects).To(HaveLen(1), "a topology flavor holds the Cluster only; clusterctl adds the ClusterClass")
	var cluster clusterv1.Cluster
	convert(g, scheme, file.objects[0], &cluster)
	topology := cluster.Spec.Topology
	g.Expect(topology.Version).To(Equal(clusterctlVariables["KUBERNETES_VERSION"]))
	g.Expect(*topology.ControlPlane.Replicas).To(BeEquivalentTo(3))

	// The class exists in the ClusterClass definition of the same name, and so do the pool classes.
	classFile := findTemplate(t, "clusterclass-"+topology.ClassRef.Name+".yaml")
	var cc clusterv1.ClusterClass
	for _, obj := range classFile.objects {
		if obj.GetKind() == "ClusterClass" {
			convert(g, scheme, obj, &cc)
		}
	}
	poolClasses := sets.New[string]()
	for _, mp := range cc.Spec.Workers.MachinePools {
		poolClasses.Insert(mp.Class)
	}
	g.Expect(topology.Workers.MachinePools).ToNot(BeEmpty())
	for _, mp := range topology.Workers.MachinePools {
		g.Expect(poolClasses.Has(mp.Class)).To(BeTrue(), "machine pool %s uses class %s, which ClusterClass %s lacks", mp.Name, mp.Class, cc.Name)
		g.Expect(*mp.Replicas).To(BeEquivalentTo(2))
	}
}

func TestMetadata(t *testing.T) {
	g := NewWithT(t)
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "metadata.yaml"))
	g.Expect(err).ToNot(HaveOccurred())

	var metadata struct {
		APIVersion    string `json:"apiVersion"`
		Kind          string `json:"kind"`
		ReleaseSeries []struct {
			Major    int32  `json:"major"`
			Minor    int32  `json:"minor"`
			Contract string `json:"contract"`
		} `json:"releaseSeries"`
	}
	g.Expect(yaml.UnmarshalStrict(raw, &metadata)).To(Succeed())
	// clusterctl v1.11 and later reject any other apiVersion or kind, and an empty releaseSeries.
	g.Expect(metadata.APIVersion).To(Equal("clusterctl.cluster.x-k8s.io/v1alpha3"))
	g.Expect(metadata.Kind).To(Equal("Metadata"))
	g.Expect(metadata.ReleaseSeries).ToNot(BeEmpty())

	contracts := map[string]string{}
	for _, rs := range metadata.ReleaseSeries {
		contracts[fmt.Sprintf("v%d.%d", rs.Major, rs.Minor)] = rs.Contract
	}
	g.Expect(contracts).To(HaveKeyWithValue("v0.1", "v1beta2"))

	// The contract of the release series must be the one the CRDs declare.
	crdContracts := sets.New[string]()
	for _, obj := range byKind(components(t), "CustomResourceDefinition") {
		for label := range obj.GetLabels() {
			if contract, ok := strings.CutPrefix(label, "cluster.x-k8s.io/"); ok && strings.HasPrefix(contract, "v1") {
				crdContracts.Insert(contract)
			}
		}
	}
	g.Expect(sets.List(crdContracts)).To(Equal([]string{"v1beta2"}))
	for series, contract := range contracts {
		g.Expect(crdContracts.Has(contract)).To(BeTrue(), "release series %s declares contract %s, the CRDs %v", series, contract, sets.List(crdContracts))
	}
}

// expectKindNodeRegistration checks the kubeadm settings a node in a kind-like container needs,
// which CAPDMP does not add to the bootstrap data by itself.
func expectKindNodeRegistration(g Gomega, nr bootstrapv1.NodeRegistrationOptions) {
	g.ExpectWithOffset(1, nr.Name).To(Equal("{{ ds.meta_data.local_hostname }}"))
	g.ExpectWithOffset(1, nr.IgnorePreflightErrors).To(ContainElement("SystemVerification"))
	args := map[string]string{}
	for _, arg := range nr.KubeletExtraArgs {
		if arg.Value != nil {
			args[arg.Name] = *arg.Value
		}
	}
	g.ExpectWithOffset(1, args).To(HaveKeyWithValue("eviction-hard", "nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%"))
	g.ExpectWithOffset(1, args).To(HaveKeyWithValue("cgroup-root", "/kubelet"))
}

func findTemplate(t *testing.T, name string) templateFile {
	t.Helper()
	var names []string
	for _, file := range renderTemplates(t) {
		if file.name == name {
			return file
		}
		names = append(names, file.name)
	}
	sort.Strings(names)
	t.Fatalf("templates/%s not found among %v", name, names)
	return templateFile{}
}

func convert(g Gomega, scheme *runtime.Scheme, obj unstructured.Unstructured, into runtime.Object) {
	gvk := obj.GroupVersionKind()
	expected, err := scheme.New(gvk)
	g.ExpectWithOffset(1, err).ToNot(HaveOccurred())
	g.ExpectWithOffset(1, fmt.Sprintf("%T", expected)).To(Equal(fmt.Sprintf("%T", into)), "decoding %s", gvk)
	g.ExpectWithOffset(1, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into)).To(Succeed())
}
