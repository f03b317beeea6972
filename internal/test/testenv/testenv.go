// Package testenv starts the API servers CAPDMP's integration tests run against, with
// controller-runtime's envtest and the kube-apiserver and etcd that hack/envtest-binaries.sh builds:
//
//   - a management API server with the CRDs of Cluster API v1.14.2 (core, kubeadm bootstrap and
//     control plane, CAPD) and CAPDMP (internal/apiserver.CRDs);
//   - optionally a workload API server with bootstrap token authentication, the kube-public
//     cluster-info that kubeadm discovery reads, and RBAC letting bootstrap tokens register Nodes
//     (for the stub kubeadm of test/stubnode), plus helpers to create a Cluster's
//     <cluster>-kubeconfig and <cluster>-ca Secrets pointing at it.
//
// Typical use, in a package's suite_test.go:
//
//	var env *testenv.Environment
//
//	func TestMain(m *testing.M) {
//		var err error
//		if env, err = testenv.Start(context.Background(), testenv.Options{Workload: true}); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		_ = env.Stop()
//		os.Exit(code)
//	}
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/capdmp/capdmp/internal/test/apiserver"
)

// RepoRoot is the root of this repository, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Scheme returns the management plane's scheme: client-go's types, Cluster API's, CAPD's and
// CAPDMP's.
func Scheme() *kruntime.Scheme { return apiserver.Scheme() }

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

// Management is a running management API server with every provider's CRDs (no webhooks: the
// tests that need them start the whole management plane).
type Management struct {
	*apiserver.APIServer
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
	s, err := apiserver.StartAPIServer(apiserver.Options{BinaryAssetsDirectory: assets})
	if err != nil {
		return nil, err
	}
	return &Management{APIServer: s, StartDuration: time.Since(start)}, nil
}

// Stop stops the API server and etcd.
func (m *Management) Stop() error {
	if m == nil {
		return nil
	}
	return m.APIServer.Stop()
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
