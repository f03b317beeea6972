// Package envtest starts the API servers CAPDMP's integration tests run against, with
// controller-runtime's envtest and the kube-apiserver and etcd that hack/envtest-binaries.sh builds:
//
//   - a management API server with the CRDs of Cluster API v1.14.2 (core, kubeadm bootstrap and
//     control plane, CAPD) read from the module cache and CAPDMP's own from config/crd/bases;
//   - optionally a workload API server with bootstrap token authentication, the kube-public
//     cluster-info that kubeadm discovery reads, and RBAC letting bootstrap tokens register Nodes
//     (for the stub kubeadm of test/nodeimage), plus helpers to create a Cluster's
//     <cluster>-kubeconfig and <cluster>-ca Secrets pointing at it.
//
// Typical use, in a package's suite_test.go:
//
//	var env *envtest.Environment
//
//	func TestMain(m *testing.M) {
//		var err error
//		if env, err = envtest.Start(context.Background(), envtest.Options{Workload: true}); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		_ = env.Stop()
//		os.Exit(code)
//	}
package envtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capdv1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// ContractLabel maps the Cluster API v1beta2 contract to a CRD's versions; kustomize adds it in
// real installs, CRDs read from the sources lack it.
const ContractLabel = "cluster.x-k8s.io/v1beta2"

// RepoRoot is the root of this repository, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Scheme returns a scheme with client-go's types, apiextensions v1, Cluster API core, kubeadm
// bootstrap and control plane v1beta2, CAPD v1beta2 and CAPDMP v1alpha1.
func Scheme() *kruntime.Scheme {
	s := kruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(clusterv1.AddToScheme(s))
	utilruntime.Must(bootstrapv1.AddToScheme(s))
	utilruntime.Must(controlplanev1.AddToScheme(s))
	utilruntime.Must(capdv1.AddToScheme(s))
	utilruntime.Must(infrav1.AddToScheme(s))
	return s
}

// moduleDir returns where a module of this build lives in the module cache.
func moduleDir(module string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return "", fmt.Errorf("go list -m %s: %w: %s", module, err, exitErr.Stderr)
		}
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// CRDDirectories are the folders the management API server's CRDs are read from.
func CRDDirectories() ([]string, error) {
	capi, err := moduleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return nil, err
	}
	capiTest, err := moduleDir("sigs.k8s.io/cluster-api/test")
	if err != nil {
		return nil, err
	}
	return []string{
		filepath.Join(capi, "core", "config", "crd", "bases"),
		filepath.Join(capi, "bootstrap", "kubeadm", "config", "crd", "bases"),
		filepath.Join(capi, "controlplane", "kubeadm", "config", "crd", "bases"),
		filepath.Join(capiTest, "infrastructure", "docker", "config", "crd", "bases"),
		filepath.Join(RepoRoot(), "config", "crd", "bases"),
	}, nil
}

// CRDs reads the CRDs of CRDDirectories and labels each one lacking ContractLabel with the
// versions that serve the v1beta2 contract: v1beta2 where the CRD serves it (Cluster API's and
// CAPD's), else every served version (CAPDMP's v1alpha1, as config/crd/kustomization.yaml does).
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dirs, err := CRDDirectories()
	if err != nil {
		return nil, err
	}
	options := &crenvtest.CRDInstallOptions{Paths: dirs, ErrorIfPathMissing: true}
	if err := crenvtest.ReadCRDFiles(options); err != nil {
		return nil, fmt.Errorf("reading CRDs from %v: %w", dirs, err)
	}
	crds := options.CRDs
	for _, crd := range crds {
		if _, ok := crd.Labels[ContractLabel]; ok {
			continue
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
	return crds, nil
}

var assetsMu sync.Mutex

// BinaryAssetsDirectory returns the folder holding kube-apiserver and etcd: KUBEBUILDER_ASSETS
// when set, else bin/envtest, which hack/envtest-binaries.sh fills when a binary is missing
// (minutes when its cache is cold; a file lock keeps parallel test processes from building twice).
func BinaryAssetsDirectory(ctx context.Context) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	dir := filepath.Join(RepoRoot(), "bin", "envtest")
	if haveBinaries(dir) {
		return dir, nil
	}
	assetsMu.Lock()
	defer assetsMu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(RepoRoot(), "bin", ".envtest.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer func() { _ = lock.Close() }()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking bin/.envtest.lock: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if haveBinaries(dir) {
		return dir, nil
	}
	fmt.Fprintf(os.Stderr, "envtest: %s lacks kube-apiserver or etcd; running hack/envtest-binaries.sh (minutes when its cache is cold)\n", dir)
	cmd := exec.CommandContext(ctx, filepath.Join(RepoRoot(), "hack", "envtest-binaries.sh"))
	cmd.Dir = RepoRoot()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/envtest-binaries.sh: %w", err)
	}
	if !haveBinaries(dir) {
		return "", fmt.Errorf("hack/envtest-binaries.sh left no kube-apiserver and etcd in %s", dir)
	}
	return dir, nil
}

func haveBinaries(dir string) bool {
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// Management is a running management API server.
type Management struct {
	Env    *crenvtest.Environment
	Config *rest.Config
	Scheme *kruntime.Scheme
	// Client is an uncached client of the admin user.
	Client client.Client
	// StartDuration is how long starting etcd, kube-apiserver and installing the CRDs took.
	StartDuration time.Duration
}

// StartManagement starts a management API server with the CRDs installed.
func StartManagement(ctx context.Context) (*Management, error) {
	start := time.Now()
	assets, err := BinaryAssetsDirectory(ctx)
	if err != nil {
		return nil, err
	}
	crds, err := CRDs()
	if err != nil {
		return nil, err
	}
	scheme := Scheme()
	env := &crenvtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDs:                  crds,
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the management API server from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Management{Env: env, Config: cfg, Scheme: scheme, Client: c, StartDuration: time.Since(start)}, nil
}

// Stop stops the API server and etcd.
func (m *Management) Stop() error {
	if m == nil || m.Env == nil {
		return nil
	}
	return m.Env.Stop()
}

// Options configure Start.
type Options struct {
	// Workload also starts a workload API server (in parallel with the management one).
	Workload bool
}

// Environment is a management API server and, when asked for, a workload API server.
type Environment struct {
	Management *Management
	Workload   *Workload
}

// Start starts the management API server and, with Options.Workload, the workload API server,
// both at once.
func Start(ctx context.Context, o Options) (*Environment, error) {
	// Build the binaries once, before the two starts race to do it.
	if _, err := BinaryAssetsDirectory(ctx); err != nil {
		return nil, err
	}
	e := &Environment{}
	var mErr, wErr error
	var wg sync.WaitGroup
	if o.Workload {
		wg.Go(func() { e.Workload, wErr = StartWorkload(ctx) })
	}
	e.Management, mErr = StartManagement(ctx)
	wg.Wait()
	if err := errors.Join(mErr, wErr); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

// Stop stops whatever Start started.
func (e *Environment) Stop() error {
	if e == nil {
		return nil
	}
	return errors.Join(e.Workload.Stop(), e.Management.Stop())
}
