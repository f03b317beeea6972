//go:build published

package published

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/kubeversions"
	"github.com/capdmp/capdmp/internal/test/testenv"
)

// envtestArchive packs kube-apiserver and etcd as controller-tools publishes them for setup-envtest:
// a gzipped tarball of controller-tools/envtest/<binary>.
func envtestArchive(t *testing.T, binaries map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range binaries {
		if err := tw.WriteHeader(&tar.Header{Name: "controller-tools/envtest/" + name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestEnvtestBinariesFetchedWithSetupEnvtest: where controller-tools' releases can be reached,
// hack/envtest-binaries.sh builds nothing: setup-envtest downloads the published binaries. Here
// the index and the archive are served on loopback, in controller-tools' layout, from the
// binaries of bin/envtest; the script is pointed at the index as at a mirror's.
func TestEnvtestBinariesFetchedWithSetupEnvtest(t *testing.T) {
	g := NewWithT(t)
	assets, err := testenv.BinaryAssetsDirectory(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	binaries := map[string][]byte{}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		binaries[name], err = os.ReadFile(filepath.Join(assets, name))
		g.Expect(err).NotTo(HaveOccurred(), "the envtest binaries to serve")
	}
	version := kubeversions.Envtest
	archive := envtestArchive(t, binaries)
	sum := sha512.Sum512(archive)
	archiveName := fmt.Sprintf("envtest-%s-%s-%s.tar.gz", version, runtime.GOOS, runtime.GOARCH)

	var (
		mu     sync.Mutex
		served []string
	)
	listener, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	base := "http://" + listener.Addr().String()
	index := fmt.Sprintf("releases:\n  %s:\n    %s:\n      hash: %s\n      selfLink: %s/download/%s\n",
		version, archiveName, hex.EncodeToString(sum[:]), base, archiveName)
	server := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/envtest-releases.yaml":
			_, _ = w.Write([]byte(index))
		case "/download/" + archiveName:
			_, _ = w.Write(archive)
		default:
			http.NotFound(w, r)
		}
	})}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(func() { _ = server.Close() })

	home := t.TempDir()
	out := filepath.Join(t.TempDir(), "envtest")
	cmd := exec.CommandContext(t.Context(), filepath.Join(testenv.RepoRoot(), "hack", "envtest-binaries.sh"))
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = []string{}
	for _, kv := range os.Environ() {
		// Nothing of this machine's: no assets named, no cache of source builds, no setup-envtest folder.
		if name, _, _ := strings.Cut(kv, "="); name != "KUBEBUILDER_ASSETS" && name != "CAPDMP_CACHE" && name != "HOME" && name != "XDG_DATA_HOME" && name != "CAPDMP_PULL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, ".local", "share"), "CAPDMP_CACHE="+filepath.Join(home, "cache"),
		"ENVTEST_BIN_DIR="+out, "ENVTEST_INDEX="+base+"/envtest-releases.yaml",
		// Go's own caches stay where they are: the modules come from the proxy, not from a registry.
		"GOPATH="+goEnv(t, "GOPATH"), "GOCACHE="+goEnv(t, "GOCACHE"), "GOMODCACHE="+goEnv(t, "GOMODCACHE"))
	output, err := cmd.CombinedOutput()
	t.Logf("hack/envtest-binaries.sh:\n%s", output)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(output)).To(ContainSubstring("fetched with setup-envtest"))
	g.Expect(string(output)).NotTo(ContainSubstring("building"), "nothing is built from source")
	mu.Lock()
	g.Expect(served).To(ContainElements("/envtest-releases.yaml", "/download/"+archiveName))
	mu.Unlock()
	for name, want := range binaries {
		got, err := os.ReadFile(filepath.Join(out, name))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(bytes.Equal(got, want)).To(BeTrue(), "%s is the published one", name)
	}
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}
