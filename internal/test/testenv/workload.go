package testenv

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/capdmp/capdmp/internal/test/apiserver"
)

const (
	// NodeBootstrapperGroup is the group kubeadm's bootstrap tokens authenticate as (CABPK puts it
	// in auth-extra-groups).
	NodeBootstrapperGroup = "system:bootstrappers:kubeadm:default-node-token"
	// StubNodeRegistrationRole is the ClusterRole that lets NodeBootstrapperGroup register Nodes.
	StubNodeRegistrationRole = "capdmp:stub-kubelet-node-registration"
)

// Workload is a running workload API server: bootstrap token authentication is on, and the
// objects `kubeadm init` would publish for joining nodes exist.
type Workload struct {
	Env *crenvtest.Environment
	// Config is the admin user's (system:masters).
	Config *rest.Config
	// Client is an uncached client of the admin user, with client-go's types.
	Client client.Client
	// CAData is the PEM CA certificate the API server's serving certificate chains to.
	CAData []byte
	// Endpoint is where the API server listens, 127.0.0.1 and a free port: a Cluster's
	// spec.controlPlaneEndpoint.
	Endpoint clusterv1.APIEndpoint
	// StartDuration is how long starting etcd, kube-apiserver and the setup took.
	StartDuration time.Duration
}

// StartWorkload starts a workload API server with bootstrap token authentication and publishes
// what kubeadm join needs:
//   - kube-public/cluster-info, a kubeconfig with the CA, readable by system:anonymous, as
//     `kubeadm init` publishes it for token discovery;
//   - ClusterRole StubNodeRegistrationRole bound to NodeBootstrapperGroup: create, get, update,
//     patch on nodes and nodes/status. It stands in for the kubelet's CSR flow: a real kubelet
//     trades the token for a client certificate and registers as system:node:<name>; the stub
//     kubeadm of test/stubnode registers the Node with the token itself.
func StartWorkload(ctx context.Context) (*Workload, error) {
	start := time.Now()
	assets, err := BinaryAssetsDirectory(ctx)
	if err != nil {
		return nil, err
	}
	env := &crenvtest.Environment{BinaryAssetsDirectory: assets}
	if err := apiserver.DieWithParent(env); err != nil {
		return nil, err
	}
	env.ControlPlane.GetAPIServer().Configure().Set("enable-bootstrap-token-auth", "true")
	cfg, err := apiserver.StartEnvtest(env)
	if err != nil {
		return nil, fmt.Errorf("starting the workload API server from %s: %w", assets, err)
	}
	w := &Workload{Env: env, Config: cfg, CAData: cfg.CAData}
	fail := func(err error) (*Workload, error) {
		_ = env.Stop()
		return nil, err
	}
	listen := env.ControlPlane.APIServer.SecureServing.ListenAddr
	port, err := strconv.Atoi(listen.Port)
	if err != nil {
		return fail(err)
	}
	w.Endpoint = clusterv1.APIEndpoint{Host: listen.Address, Port: int32(port)} //nolint:gosec // a TCP port
	// client-go's scheme: the workload's own types.
	if w.Client, err = client.New(cfg, client.Options{}); err != nil {
		return fail(err)
	}
	if err := w.publishJoinObjects(ctx); err != nil {
		return fail(fmt.Errorf("setting up the workload API server for kubeadm join: %w", err))
	}
	w.StartDuration = time.Since(start)
	return w, nil
}

// Stop stops the API server and etcd.
func (w *Workload) Stop() error {
	if w == nil || w.Env == nil {
		return nil
	}
	return w.Env.Stop()
}

// Server is the API server's URL, https://127.0.0.1:<port>.
func (w *Workload) Server() string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(w.Endpoint.Host, strconv.Itoa(int(w.Endpoint.Port))))
}

func (w *Workload) publishJoinObjects(ctx context.Context) error {
	clusterInfo := clientcmdapi.NewConfig()
	clusterInfo.Clusters[""] = &clientcmdapi.Cluster{Server: w.Server(), CertificateAuthorityData: w.CAData}
	kubeconfigData, err := clientcmd.Write(*clusterInfo)
	if err != nil {
		return err
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metav1.NamespacePublic}},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: "cluster-info"},
			Data:       map[string]string{"kubeconfig": string(kubeconfigData)},
		},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: "kubeadm:bootstrap-signer-clusterinfo"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"cluster-info"}, Verbs: []string{"get"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: "kubeadm:bootstrap-signer-clusterinfo"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubeadm:bootstrap-signer-clusterinfo"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:anonymous"}},
		},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: StubNodeRegistrationRole},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"},
				Verbs: []string{"create", "get", "update", "patch"},
			}},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: StubNodeRegistrationRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: StubNodeRegistrationRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: NodeBootstrapperGroup}},
		},
	}
	for _, o := range objs {
		if err := w.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", o, client.ObjectKeyFromObject(o), err)
		}
	}
	return nil
}

// CreateClusterSecrets creates, in the management cluster, the Secrets through which Cluster API
// reaches this workload API server for cluster: <cluster>-kubeconfig (admin credentials, owned by
// the Cluster, so the Cluster must exist and have its UID) and <cluster>-ca (tls.crt is the
// workload CA that CABPK derives caCertHashes from; tls.key is a throwaway key, envtest keeps the
// CA's own: nothing may sign with it).
func (w *Workload) CreateClusterSecrets(ctx context.Context, management client.Client, cluster *clusterv1.Cluster) error {
	if cluster.UID == "" {
		return fmt.Errorf("cluster %s has no UID: create it before its secrets", client.ObjectKeyFromObject(cluster))
	}
	kubeconfigSecret := kubeconfig.GenerateSecret(cluster, kubeconfig.FromEnvTestConfig(w.Config, cluster))
	signer, err := certs.NewSigner(bootstrapv1.EncryptionAlgorithmECDSAP256)
	if err != nil {
		return err
	}
	key, err := certs.EncodePrivateKeyPEMFromSigner(signer)
	if err != nil {
		return err
	}
	caSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace,
			Name:      secret.Name(cluster.Name, secret.ClusterCA),
			Labels:    map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: cluster.Name, UID: cluster.UID,
			}},
		},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{secret.TLSCrtDataName: w.CAData, secret.TLSKeyDataName: key},
	}
	for _, s := range []*corev1.Secret{kubeconfigSecret, caSecret} {
		if err := management.Create(ctx, s); err != nil {
			return fmt.Errorf("creating Secret %s: %w", client.ObjectKeyFromObject(s), err)
		}
	}
	return nil
}

// CreateBootstrapToken creates a kubeadm bootstrap token in the workload cluster, as CABPK does:
// kube-system/bootstrap-token-<id> of type bootstrap.kubernetes.io/token, usable for
// authentication and signing, in NodeBootstrapperGroup, expiring at expiration (already expired
// when in the past). It returns "<id>.<secret>".
func (w *Workload) CreateBootstrapToken(ctx context.Context, expiration time.Time) (string, error) {
	token, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return "", err
	}
	id, tokenSecret, _ := strings.Cut(token, ".")
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(id)},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               id,
			bootstrapapi.BootstrapTokenSecretKey:           tokenSecret,
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
			bootstrapapi.BootstrapTokenUsageSigningKey:     "true",
			bootstrapapi.BootstrapTokenExtraGroupsKey:      NodeBootstrapperGroup,
			bootstrapapi.BootstrapTokenExpirationKey:       expiration.UTC().Format(time.RFC3339),
			bootstrapapi.BootstrapTokenDescriptionKey:      "created by internal/test/testenv",
		},
	}
	if err := w.Client.Create(ctx, s); err != nil {
		return "", fmt.Errorf("creating bootstrap token Secret: %w", err)
	}
	return token, nil
}
