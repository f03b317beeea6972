package manifests

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/cluster-api/util/contract"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

const (
	providerLabel     = "cluster.x-k8s.io/provider"
	providerName      = "infrastructure-capdmp"
	targetNamespace   = "capdmp-system"
	contractLabel     = "cluster.x-k8s.io/v1beta2"
	aggregationLabel  = "cluster.x-k8s.io/aggregate-to-manager"
	injectCAFrom      = "cert-manager.io/inject-ca-from"
	dockerSocket      = "/var/run/docker.sock"
	managerImage      = "docker.io/library/capdmp-controller:dev"
	managerContainer  = "manager"
	webhookServerPort = 9443
)

var ourKinds = []string{"DockerMachinePool", "DockerMachinePoolTemplate", "DockerMachinePoolMachine"}

// components is the kustomize build of config/default, what make manifests writes to
// out/infrastructure-components.yaml for clusterctl, as clusterctl init installs it when the user
// sets none of its variables: every ${VAR:=default} replaced by its default.
// It is built once per test run; each test gets its own copy.
func components(t *testing.T) []unstructured.Unstructured {
	t.Helper()
	componentsOnce.Do(func() { componentsYAML = kustomizeBuild(t, "config/default") })
	if componentsYAML == nil {
		t.Fatal("kustomize build config/default failed in an earlier test")
	}
	g := NewWithT(t)
	rendered, err := yamlprocessor.NewSimpleProcessor().Process(componentsYAML, func(variable string) (string, error) {
		return "", fmt.Errorf("variable %s not set", variable)
	})
	g.Expect(err).ToNot(HaveOccurred(), "clusterctl init without variables set")
	return decodeObjects(g, rendered)
}

var (
	componentsOnce sync.Once
	componentsYAML []byte
)

func fromUnstructured(g Gomega, obj unstructured.Unstructured, into interface{}) {
	g.ExpectWithOffset(1, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
}

func TestComponentsFollowTheClusterctlContract(t *testing.T) {
	g := NewWithT(t)
	objs := components(t)

	namespaces := byKind(objs, "Namespace")
	g.Expect(namespaces).To(HaveLen(1), "clusterctl needs exactly one Namespace, the target namespace")
	g.Expect(namespaces[0].GetName()).To(Equal(targetNamespace))

	clusterScoped := sets.New("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
		"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
	for _, obj := range objs {
		id := obj.GetKind() + " " + obj.GetName()
		g.Expect(obj.GetLabels()).To(HaveKeyWithValue(providerLabel, providerName), id)
		g.Expect(obj.GetName()).ToNot(ContainSubstring("SERVICE_NAME"), id)
		if clusterScoped.Has(obj.GetKind()) {
			g.Expect(obj.GetNamespace()).To(BeEmpty(), id)
		} else {
			g.Expect(obj.GetNamespace()).To(Equal(targetNamespace), id)
		}
	}
}

func TestComponentsCRDs(t *testing.T) {
	g := NewWithT(t)
	objs := components(t)

	crds := map[string]apiextensionsv1.CustomResourceDefinition{}
	for _, obj := range byKind(objs, "CustomResourceDefinition") {
		var crd apiextensionsv1.CustomResourceDefinition
		fromUnstructured(g, obj, &crd)
		crds[crd.Spec.Names.Kind] = crd
	}
	g.Expect(crds).To(HaveLen(len(ourKinds)))

	for _, kind := range ourKinds {
		g.Expect(crds).To(HaveKey(kind))
		crd := crds[kind]
		// Cluster API reads the contract label from the CRD it finds by this name without a lookup.
		g.Expect(crd.Name).To(Equal(contract.CalculateCRDName(infrav1.GroupVersion.Group, kind)))
		g.Expect(crd.Labels).To(HaveKeyWithValue(contractLabel, infrav1.GroupVersion.Version), kind)
		g.Expect(crd.Spec.Scope).To(Equal(apiextensionsv1.NamespaceScoped), kind)
		g.Expect(crd.Spec.Versions).To(HaveLen(1), kind)
		g.Expect(crd.Spec.Versions[0].Name).To(Equal(infrav1.GroupVersion.Version), kind)
		g.Expect(crd.Spec.Versions[0].Served && crd.Spec.Versions[0].Storage).To(BeTrue(), kind)
		// One version: no conversion webhook, and the cert-manager annotation stays inert.
		if crd.Spec.Conversion != nil {
			g.Expect(crd.Spec.Conversion.Strategy).To(Equal(apiextensionsv1.NoneConverter), kind)
		}
		g.Expect(crd.Annotations).To(HaveKeyWithValue(injectCAFrom, targetNamespace+"/capdmp-serving-cert"), kind)
	}
}

func TestComponentsAggregatedClusterRole(t *testing.T) {
	g := NewWithT(t)
	objs := components(t)

	var crds []apiextensionsv1.CustomResourceDefinition
	for _, obj := range byKind(objs, "CustomResourceDefinition") {
		var crd apiextensionsv1.CustomResourceDefinition
		fromUnstructured(g, obj, &crd)
		crds = append(crds, crd)
	}

	var aggregated []rbacv1.ClusterRole
	for _, obj := range byKind(objs, "ClusterRole") {
		if obj.GetLabels()[aggregationLabel] == "true" {
			var role rbacv1.ClusterRole
			fromUnstructured(g, obj, &role)
			aggregated = append(aggregated, role)
		}
	}
	g.Expect(aggregated).To(HaveLen(1), "one ClusterRole aggregated into Cluster API's core manager role")

	// Every resource of our group, whatever CRDs are added later, must be fully readable and
	// writable by the core manager.
	fullAccess := []string{"create", "delete", "get", "list", "patch", "update", "watch"}
	for _, crd := range crds {
		granted := sets.New[string]()
		for _, rule := range aggregated[0].Rules {
			if sets.New(rule.APIGroups...).Has(crd.Spec.Group) && sets.New(rule.Resources...).Has(crd.Spec.Names.Plural) {
				granted.Insert(rule.Verbs...)
			}
		}
		g.Expect(sets.List(granted)).To(ContainElements(fullAccess), crd.Spec.Names.Plural)
	}
}

// TestComponentsLeaderElectionRole: the Role the manager's ServiceAccount is bound to for
// --leader-elect grants what leader election uses and nothing more: get, create and update of
// leases (client-go's LeaseLock, which controller-runtime uses) and events about them.
func TestComponentsLeaderElectionRole(t *testing.T) {
	g := NewWithT(t)
	objs := components(t)

	var roleName string
	for _, obj := range byKind(objs, "RoleBinding") {
		var binding rbacv1.RoleBinding
		fromUnstructured(g, obj, &binding)
		for _, s := range binding.Subjects {
			if s.Kind == "ServiceAccount" && s.Name == "capdmp-manager" && s.Namespace == targetNamespace && binding.RoleRef.Kind == "Role" {
				g.Expect(roleName).To(BeEmpty(), "one Role bound to the manager")
				roleName = binding.RoleRef.Name
			}
		}
	}
	g.Expect(roleName).To(Equal("capdmp-leader-election-role"))

	var roles []rbacv1.Role
	for _, obj := range byKind(objs, "Role") {
		if obj.GetName() == roleName {
			var role rbacv1.Role
			fromUnstructured(g, obj, &role)
			roles = append(roles, role)
		}
	}
	g.Expect(roles).To(HaveLen(1))
	g.Expect(roles[0].Namespace).To(Equal(targetNamespace))
	g.Expect(roles[0].Rules).To(Equal([]rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}), "leader election lists, watches, patches and deletes no lease")
}

func TestComponentsWebhooks(t *testing.T) {
	g := NewWithT(t)
	objs := components(t)

	services := sets.New[string]()
	for _, obj := range byKind(objs, "Service") {
		services.Insert(obj.GetNamespace() + "/" + obj.GetName())
	}
	certificates := map[string]unstructured.Unstructured{}
	for _, obj := range byKind(objs, "Certificate") {
		certificates[obj.GetNamespace()+"/"+obj.GetName()] = obj
	}

	checkClient := func(id string, annotations map[string]string, cc admissionregistrationv1.WebhookClientConfig) {
		g.ExpectWithOffset(1, cc.Service).ToNot(BeNil(), id)
		g.ExpectWithOffset(1, services.Has(cc.Service.Namespace+"/"+cc.Service.Name)).To(BeTrue(), "%s points to a missing Service %s/%s", id, cc.Service.Namespace, cc.Service.Name)
		g.ExpectWithOffset(1, certificates).To(HaveKey(annotations[injectCAFrom]), "%s: %s must name the serving Certificate", id, injectCAFrom)
	}

	mutating := byKind(objs, "MutatingWebhookConfiguration")
	g.Expect(mutating).To(HaveLen(1))
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	fromUnstructured(g, mutating[0], &mwc)
	var defaulted []string
	for _, wh := range mwc.Webhooks {
		checkClient(wh.Name, mwc.Annotations, wh.ClientConfig)
		defaulted = append(defaulted, webhookResources(wh.Rules)...)
	}
	g.Expect(defaulted).To(ConsistOf("dockermachinepools", "dockermachinepooltemplates"))

	validating := byKind(objs, "ValidatingWebhookConfiguration")
	g.Expect(validating).To(HaveLen(1))
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	fromUnstructured(g, validating[0], &vwc)
	var validated []string
	for _, wh := range vwc.Webhooks {
		checkClient(wh.Name, vwc.Annotations, wh.ClientConfig)
		validated = append(validated, webhookResources(wh.Rules)...)
	}
	g.Expect(validated).To(ConsistOf("dockermachinepools", "dockermachinepooltemplates", "dockermachinepoolmachines"))

	// The serving certificate names the webhook Service.
	for _, cert := range certificates {
		dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		g.Expect(dnsNames).To(ContainElement(fmt.Sprintf("%s.%s.svc", mwc.Webhooks[0].ClientConfig.Service.Name, targetNamespace)))
	}
}

func webhookResources(rules []admissionregistrationv1.RuleWithOperations) []string {
	var resources []string
	for _, rule := range rules {
		for _, group := range rule.APIGroups {
			if group == infrav1.GroupVersion.Group {
				resources = append(resources, rule.Resources...)
			}
		}
	}
	return resources
}

func TestComponentsManagerDeployment(t *testing.T) {
	g := NewWithT(t)
	objs := components(t)

	deployments := byKind(objs, "Deployment")
	g.Expect(deployments).To(HaveLen(1))
	var deployment appsv1.Deployment
	fromUnstructured(g, deployments[0], &deployment)
	g.Expect(deployment.Name).To(Equal("capdmp-controller-manager"))

	pod := deployment.Spec.Template.Spec
	var manager *corev1.Container
	for i := range pod.Containers {
		if pod.Containers[i].Name == managerContainer {
			manager = &pod.Containers[i]
		}
	}
	g.Expect(manager).ToNot(BeNil(), "clusterctl and Tilt need a container named manager")
	g.Expect(manager.Image).To(Equal(managerImage), "Tilt replaces the image named in tilt-provider.yaml")
	g.Expect(manager.Command).To(Equal([]string{"/manager"}))
	g.Expect(manager.Args).To(ContainElements("--leader-elect", fmt.Sprintf("--webhook-port=%d", webhookServerPort)))
	managerFlags := mainFlags(t)
	for _, arg := range manager.Args {
		g.Expect(arg).To(HavePrefix("--"))
		name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		g.Expect(managerFlags).To(ContainElement(name), "the manager has no flag --%s", name)
	}

	ports := map[string]int32{}
	for _, p := range manager.Ports {
		ports[p.Name] = p.ContainerPort
	}
	g.Expect(ports).To(HaveKeyWithValue("webhook-server", int32(webhookServerPort)))
	g.Expect(ports).To(HaveKey("healthz"))

	// The ClusterCache finds the manager's own Pod by these, as Cluster API's managers do.
	fromPod := map[string]string{}
	for _, e := range manager.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fromPod[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	g.Expect(fromPod).To(Equal(map[string]string{
		"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name", "POD_UID": "metadata.uid",
	}))

	// The webhook server reads the certificate cert-manager writes into the Secret.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]string{}
	for _, m := range manager.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	certVolume := volumes[mounts["/tmp/k8s-webhook-server/serving-certs"]]
	g.Expect(certVolume.Secret).ToNot(BeNil(), "the webhook serving certificate is mounted from a Secret")
	var certSecrets []string
	for _, cert := range byKind(objs, "Certificate") {
		name, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		certSecrets = append(certSecrets, name)
	}
	g.Expect(certSecrets).To(ContainElement(certVolume.Secret.SecretName))

	// Like CAPD's manager, ours talks to the Docker engine of the host through its socket.
	socketVolume := volumes[mounts[dockerSocket]]
	g.Expect(socketVolume.HostPath).ToNot(BeNil(), "the Docker socket is mounted from the host")
	g.Expect(socketVolume.HostPath.Path).To(Equal(dockerSocket))

	g.Expect(pod.ServiceAccountName).To(Equal("capdmp-manager"))
	var bound bool
	for _, obj := range byKind(objs, "ClusterRoleBinding") {
		var binding rbacv1.ClusterRoleBinding
		fromUnstructured(g, obj, &binding)
		for _, s := range binding.Subjects {
			if s.Kind == "ServiceAccount" && s.Name == pod.ServiceAccountName && s.Namespace == targetNamespace && binding.RoleRef.Name == "capdmp-manager-role" {
				bound = true
			}
		}
	}
	g.Expect(bound).To(BeTrue(), "the manager's ServiceAccount is bound to the generated manager role")
}
