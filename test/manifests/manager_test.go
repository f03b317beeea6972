package manifests

import (
	"fmt"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// TestComponentsManagerAsClusterAPIs checks that the components deploy the manager as Cluster
// API deploys its own: metrics behind the secure diagnostics endpoint, with the RBAC that endpoint
// needs and a role to read them; ready when /readyz says so (the webhook server serves); resource
// requests for the scheduler.
func TestComponentsManagerAsClusterAPIs(t *testing.T) {
	objs := components(t)
	g := NewWithT(t)
	deployments := byKind(objs, "Deployment")
	g.Expect(deployments).To(HaveLen(1))
	var deployment appsv1.Deployment
	fromUnstructured(g, deployments[0], &deployment)
	var manager corev1.Container
	for _, c := range deployment.Spec.Template.Spec.Containers {
		if c.Name == managerContainer {
			manager = c
		}
	}
	roles := map[string]rbacv1.ClusterRole{}
	for _, obj := range byKind(objs, "ClusterRole") {
		var role rbacv1.ClusterRole
		fromUnstructured(g, obj, &role)
		roles[role.Name] = role
	}
	ports := map[string]int32{}
	for _, p := range manager.Ports {
		ports[p.Name] = p.ContainerPort
	}

	tests := []struct {
		name   string
		actual any
		want   OmegaMatcher
	}{
		{
			name:   "diagnostics on :8443, secure",
			actual: manager.Args,
			want:   ContainElements("--diagnostics-address=:8443", "--insecure-diagnostics=false"),
		},
		{
			name:   "no plain metrics flag",
			actual: manager.Args,
			want:   Not(ContainElement(HavePrefix("--metrics-bind-address"))),
		},
		{
			name:   "the metrics port is the diagnostics endpoint's",
			actual: ports,
			want:   HaveKeyWithValue("metrics", int32(8443)),
		},
		{
			name:   "the manager may ask the API server who a client is",
			actual: roles["capdmp-manager-role"].Rules,
			want:   ContainElement(rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}}),
		},
		{
			name:   "the manager may ask the API server what a client may do",
			actual: roles["capdmp-manager-role"].Rules,
			want:   ContainElement(rbacv1.PolicyRule{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}}),
		},
		{
			name:   "ready when /readyz answers",
			actual: manager.ReadinessProbe,
			want:   Equal(&corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("healthz")}}}),
		},
		{
			name:   "the healthz port is the manager's health probe address",
			actual: manager.Args,
			want:   ContainElement(fmt.Sprintf("--health-probe-bind-address=:%d", ports["healthz"])),
		},
		{
			name:   "CPU and memory requests, no limits",
			actual: manager.Resources,
			want: Equal(corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
			}}),
		},
		{
			name:   "a ClusterRole reads the metrics",
			actual: roles["capdmp-metrics-reader"].Rules,
			want:   Equal([]rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tt.actual).To(tt.want)
		})
	}
}

// TestManagerRoleLeastPrivilege: the manager's ClusterRole grants what its controllers do and
// nothing they do not: Secrets only by name (no list or watch, which a ClusterRole would grant in
// every namespace, every Secret's data with it), no update (the patch helper and util/finalizers
// patch), no finalizers subresource (no owner reference the controllers set blocks owner
// deletion), the status subresources patched only. TestManagerRunsWithItsRole (main_test.go) runs
// the manager with this role and sees no request refused.
func TestManagerRoleLeastPrivilege(t *testing.T) {
	objs := components(t)
	g := NewWithT(t)
	var role *rbacv1.ClusterRole
	for _, obj := range byKind(objs, "ClusterRole") {
		var r rbacv1.ClusterRole
		fromUnstructured(g, obj, &r)
		if r.Name == "capdmp-manager-role" {
			role = &r
		}
	}
	g.Expect(role).ToNot(BeNil())
	// verbs are every verb the role grants on group/resource.
	verbs := func(group, resource string) []string {
		var out []string
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && (slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) {
				out = append(out, r.Verbs...)
			}
		}
		return out
	}
	var allVerbs, allResources []string
	for _, r := range role.Rules {
		allVerbs = append(allVerbs, r.Verbs...)
		allResources = append(allResources, r.Resources...)
	}

	tests := []struct {
		name   string
		actual any
		want   OmegaMatcher
	}{
		{name: "Secrets: get by name, nothing else", actual: verbs("", "secrets"), want: ConsistOf("get")},
		{name: "no update anywhere", actual: allVerbs, want: Not(ContainElement("update"))},
		{name: "no verb wildcard", actual: allVerbs, want: Not(ContainElement("*"))},
		{name: "no finalizers subresource", actual: allResources, want: Not(ContainElement(HaveSuffix("/finalizers")))},
		{name: "pools: read and patch", actual: verbs(infrav1.GroupVersion.Group, "dockermachinepools"), want: ConsistOf("get", "list", "watch", "patch")},
		{name: "pools' status: patch", actual: verbs(infrav1.GroupVersion.Group, "dockermachinepools/status"), want: ConsistOf("patch")},
		{name: "machines: read, create, patch, delete", actual: verbs(infrav1.GroupVersion.Group, "dockermachinepoolmachines"),
			want: ConsistOf("get", "list", "watch", "create", "patch", "delete")},
		{name: "machines' status: patch", actual: verbs(infrav1.GroupVersion.Group, "dockermachinepoolmachines/status"), want: ConsistOf("patch")},
		{name: "templates: none, the topology controller's business", actual: verbs(infrav1.GroupVersion.Group, "dockermachinepooltemplates"), want: BeEmpty()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tt.actual).To(tt.want)
		})
	}
}
