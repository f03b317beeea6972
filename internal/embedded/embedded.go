// Package embedded starts a local management API server (kube-apiserver and etcd built from
// source by hack/envtest-binaries.sh) with the CRDs of Cluster API v1.14.2 and CAPDMP installed,
// so that the manager and the tests run without any cluster or registry.
package embedded

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ContractLabel maps the Cluster API v1beta2 contract to a CRD's version. kustomize adds it in real
// installs; CRDs read straight from the sources lack it, and without it Cluster API cannot resolve
// references to their kinds.
const ContractLabel = "cluster.x-k8s.io/v1beta2"

// RepoRoot is the root of this repository, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BinaryAssetsDirectory is where hack/envtest-binaries.sh puts kube-apiserver and etcd, unless
// KUBEBUILDER_ASSETS says otherwise.
func BinaryAssetsDirectory() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(RepoRoot(), "bin", "envtest")
}

// moduleDir returns where a module of the build lives in the module cache.
func moduleDir(module string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating module %s: %w", module, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// CRDs reads the CRDs of Cluster API core, kubeadm bootstrap and control plane, CAPD (for its
// DockerCluster and DockerMachine) and CAPDMP, each labelled with the contract version it serves.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	capi, err := moduleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return nil, err
	}
	capiTest, err := moduleDir("sigs.k8s.io/cluster-api/test")
	if err != nil {
		return nil, err
	}
	dirs := []string{
		filepath.Join(capi, "core", "config", "crd", "bases"),
		filepath.Join(capi, "bootstrap", "kubeadm", "config", "crd", "bases"),
		filepath.Join(capi, "controlplane", "kubeadm", "config", "crd", "bases"),
		filepath.Join(capiTest, "infrastructure", "docker", "config", "crd", "bases"),
		filepath.Join(RepoRoot(), "config", "crd", "bases"),
	}
	opts := &envtest.CRDInstallOptions{Paths: dirs, ErrorIfPathMissing: true}
	if err := envtest.ReadCRDFiles(opts); err != nil {
		return nil, fmt.Errorf("reading CRDs: %w", err)
	}
	crds := opts.CRDs
	for _, crd := range crds {
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		if _, ok := crd.Labels[ContractLabel]; ok {
			continue
		}
		crd.Labels[ContractLabel] = contractVersions(crd)
	}
	return crds, nil
}

// contractVersions names the versions of a CRD that serve the v1beta2 contract: all of its served
// versions from v1beta2 on for Cluster API's own groups, and every served version of CAPDMP's.
func contractVersions(crd *apiextensionsv1.CustomResourceDefinition) string {
	var versions []string
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		if strings.HasSuffix(crd.Spec.Group, "cluster.x-k8s.io") && v.Name != "v1beta2" {
			continue
		}
		versions = append(versions, v.Name)
	}
	return strings.Join(versions, "_")
}

// ControlPlane is a running embedded management API server.
type ControlPlane struct {
	Env            *envtest.Environment
	Config         *rest.Config
	KubeconfigPath string
}

// Start starts kube-apiserver and etcd with the CRDs installed and writes a kubeconfig for them
// to kubeconfigPath (when not empty).
func Start(_ context.Context, kubeconfigPath string) (*ControlPlane, error) {
	crds, err := CRDs()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: BinaryAssetsDirectory(),
		CRDs:                  crds,
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s (run hack/envtest-binaries.sh): %w", env.BinaryAssetsDirectory, err)
	}
	plane := &ControlPlane{Env: env, Config: cfg}
	if kubeconfigPath != "" {
		if err := writeKubeconfig(cfg, kubeconfigPath); err != nil {
			_ = env.Stop()
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

func writeKubeconfig(cfg *rest.Config, path string) error {
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["embedded"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kubeconfig.AuthInfos["embedded"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kubeconfig.Contexts["embedded"] = &clientcmdapi.Context{Cluster: "embedded", AuthInfo: "embedded"}
	kubeconfig.CurrentContext = "embedded"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the kubeconfig's folder: %w", err)
	}
	if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
