package apiserver

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/capdmp/capdmp/config"
)

// Names of the manager's identity and role as `make manifests` deploys them (config/default's
// namespace and name prefix on config/rbac).
const (
	managerNamespace      = "capdmp-system"
	managerServiceAccount = "capdmp-manager"
	managerRoleName       = "capdmp-manager-role"
)

// ManagerConfig returns credentials of the manager's ServiceAccount as deployed, bound to the
// ClusterRole CAPDMP ships (config/rbac/role.yaml) and to nothing else: a manager that runs with
// them is refused whatever the shipped RBAC does not grant, as in a real management cluster.
func (s *APIServer) ManagerConfig(ctx context.Context) (*rest.Config, error) {
	shipped := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(config.ManagerRole, shipped); err != nil {
		return nil, fmt.Errorf("reading the manager's ClusterRole: %w", err)
	}
	// Updated when the API server kept an earlier plane's: the role is the one of this build.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: managerRoleName}}
	if _, err := controllerutil.CreateOrUpdate(ctx, s.Client, role, func() error {
		role.Rules = shipped.Rules
		return nil
	}); err != nil {
		return nil, fmt.Errorf("installing ClusterRole %s: %w", role.Name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: managerRoleName + "binding"}}
	if _, err := controllerutil.CreateOrUpdate(ctx, s.Client, binding, func() error {
		binding.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: managerRoleName}
		binding.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: managerNamespace, Name: managerServiceAccount}}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("installing ClusterRoleBinding %s: %w", binding.Name, err)
	}
	// A client certificate whose subject is the ServiceAccount's user name: RBAC matches a
	// ServiceAccount subject on that name, whatever authenticated it.
	user, err := s.env.ControlPlane.AddUser(crenvtest.User{Name: "system:serviceaccount:" + managerNamespace + ":" + managerServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + managerNamespace}}, s.Config)
	if err != nil {
		return nil, fmt.Errorf("provisioning the manager's credentials: %w", err)
	}
	return user.Config(), nil
}
