package apiserver_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/capdmp/capdmp/internal/test/apiserver"
	"github.com/capdmp/capdmp/internal/test/testenv"
)

// dieWithParentChild, set in the environment, makes TestDieWithParent the process that starts
// kube-apiserver and etcd, in the etcd data folder it names, and waits to be killed.
const dieWithParentChild = "CAPDMP_DIE_WITH_PARENT_CHILD"

// TestDieWithParent kills, with SIGKILL, a process that started kube-apiserver and etcd through
// DieWithParent: both must go with it.
func TestDieWithParent(t *testing.T) {
	g := NewWithT(t)
	if dataDir := os.Getenv(dieWithParentChild); dataDir != "" {
		assets, err := testenv.BinaryAssetsDirectory(context.Background())
		g.Expect(err).NotTo(HaveOccurred())
		env := &crenvtest.Environment{BinaryAssetsDirectory: assets}
		env.ControlPlane.Etcd = &crenvtest.Etcd{DataDir: dataDir}
		g.Expect(apiserver.DieWithParent(env)).To(Succeed())
		_, err = env.Start()
		g.Expect(err).NotTo(HaveOccurred())
		fmt.Println("started")
		time.Sleep(time.Hour)
		return
	}
	if _, err := testenv.BinaryAssetsDirectory(context.Background()); err != nil {
		t.Fatalf("the envtest binaries: %v", err)
	}
	dataDir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^TestDieWithParent$", "-test.v") //nolint:gosec // this test binary, run again as the child
	child.Env = append(os.Environ(), dieWithParentChild+"="+dataDir)
	out, err := child.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(child.Start()).To(Succeed())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	started := make(chan struct{})
	go func() {
		for s := bufio.NewScanner(out); s.Scan(); {
			if s.Text() == "started" {
				close(started)
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(2 * time.Minute):
		t.Fatal("the child did not start kube-apiserver and etcd in 2 minutes")
	}
	// etcd names its data folder on its command line, and kube-apiserver etcd's port.
	etcd := processesWith(t, dataDir)
	g.Expect(etcd).To(HaveLen(1), "etcd of the child")
	apiServers := processesWith(t, "--etcd-servers=http://127.0.0.1:"+etcdPort(t, etcd[0]))
	g.Expect(apiServers).To(HaveLen(1), "kube-apiserver of the child")

	t.Cleanup(func() {
		// What a failed run left behind.
		for _, pid := range append(etcd, apiServers...) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	g.Expect(child.Process.Signal(syscall.SIGKILL)).To(Succeed())
	for _, pid := range append(etcd, apiServers...) {
		g.Eventually(func() bool { return alive(pid) }, 10*time.Second, 100*time.Millisecond).Should(BeFalse(), "process %d outlived its parent", pid)
	}
}

// processesWith lists the PIDs whose command line contains s.
func processesWith(t *testing.T, s string) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		raw, err := os.ReadFile(d)
		if err != nil || !strings.Contains(strings.ReplaceAll(string(raw), "\x00", " "), s) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// etcdPort is the client port in etcd's command line.
func etcdPort(t *testing.T, pid int) string {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range strings.Split(string(raw), "\x00") {
		if v, ok := strings.CutPrefix(arg, "--listen-client-urls=http://127.0.0.1:"); ok {
			return v
		}
	}
	t.Fatalf("no client port in etcd's command line %q", raw)
	return ""
}

func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	// A zombie is gone: only its parent has not read its status yet.
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

// TestStartEnvtestAgain: the environment StartEnvtest retries with, stopped after a start, starts
// again and serves.
func TestStartEnvtestAgain(t *testing.T) {
	g := NewWithT(t)
	assets, err := testenv.BinaryAssetsDirectory(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	env := &crenvtest.Environment{BinaryAssetsDirectory: assets}
	g.Expect(apiserver.DieWithParent(env)).To(Succeed())
	_, err = apiserver.StartEnvtest(env)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.ControlPlaneStartTimeout).To(Equal(2 * time.Minute))
	g.Expect(env.Stop()).To(Succeed())

	cfg, err := apiserver.StartEnvtest(env)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Get(context.Background(), client.ObjectKey{Name: "default"}, &corev1.Namespace{})).To(Succeed())
}
