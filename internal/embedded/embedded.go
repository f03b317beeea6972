// Package embedded starts a local management API server (kube-apiserver and etcd built from
// source by hack/envtest-binaries.sh) with the CRDs of Cluster API v1.14.2 and CAPDMP installed,
// so that the manager runs without any cluster or registry (`manager --embedded`, `make run`).
// It shares the CRD set and the binaries with the tests (internal/test/envtest).
package embedded

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/capdmp/capdmp/internal/test/envtest"
)

// ControlPlane is a running embedded management API server.
type ControlPlane struct {
	Env            *crenvtest.Environment
	Config         *rest.Config
	KubeconfigPath string
}

// Start starts kube-apiserver and etcd with the CRDs installed and writes a kubeconfig for them
// to kubeconfigPath (when not empty).
func Start(ctx context.Context, kubeconfigPath string) (*ControlPlane, error) {
	management, err := envtest.StartManagement(ctx)
	if err != nil {
		return nil, err
	}
	plane := &ControlPlane{Env: management.Env, Config: management.Config}
	if kubeconfigPath != "" {
		if err := WriteKubeconfig(management.Config, kubeconfigPath); err != nil {
			_ = management.Stop()
			return nil, err
		}
		plane.KubeconfigPath, _ = filepath.Abs(kubeconfigPath)
	}
	return plane, nil
}

// Stop stops the API server and etcd.
func (p *ControlPlane) Stop() {
	_ = p.Env.Stop()
}

// WriteKubeconfig writes a kubeconfig for cfg (certificate or token auth) to path, mode 0600.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["embedded"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kubeconfig.AuthInfos["embedded"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kubeconfig.Contexts["embedded"] = &clientcmdapi.Context{Cluster: "embedded", AuthInfo: "embedded"}
	kubeconfig.CurrentContext = "embedded"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // like ~/.kube; the file itself is 0600
		return fmt.Errorf("creating the kubeconfig's folder: %w", err)
	}
	if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
