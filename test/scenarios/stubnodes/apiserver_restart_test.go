package stubnodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/pkg/conformance"
)

// apiServerDown is how long TestFaultManagementAPIServerRestarted keeps kube-apiserver stopped.
const apiServerDown = 30 * time.Second

// TestFaultManagementAPIServerRestarted stops the management cluster's kube-apiserver (SIGKILL, as
// a crash or an OOM kill does) once a scale-up has made its first container, and starts it again
// 30 s later with the same command line: the same certificates, port and etcd. The API
// server is one of the test's own, since the suite's serves the other tests. The scale-up
// completes with no skew violation, and the monitor counts apart the samples it could not read.
func TestFaultManagementAPIServerRestarted(t *testing.T) {
	// Its API server and manager are its own: it may run beside other tests.
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	management, err := testenv.StartManagement(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = management.Stop() })
	// Registered before the manager and the cluster, so that it runs after their clean-up.
	var restarted *exec.Cmd
	t.Cleanup(func() {
		if restarted != nil {
			_ = restarted.Process.Kill()
			_ = restarted.Wait()
		}
	})
	g.Expect(installInfrastructureClusterCRD(management.APIServer)).To(Succeed())
	stopManager, err := runManager(management.APIServer, currentManager)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(stopManager)

	c := newTestCluster(t, clusterOptions{controlPlaneVersion: v131, poolVersion: v131, replicas: 0, management: management.Client})
	monitor := conformance.Watch(ctx, c.conformanceCluster(), conformance.Options{Interval: monitorInterval})
	c.setReplicas(3)
	g.Eventually(c.clusterContainers, faultBudgets.ClusterReady, 100*time.Millisecond).ShouldNot(BeEmpty(), "the scale-up made a container")

	process, err := management.Process()
	g.Expect(err).NotTo(HaveOccurred())
	command, err := commandOf(process.Pid)
	g.Expect(err).NotTo(HaveOccurred())
	stopped := time.Now()
	g.Expect(process.Signal(syscall.SIGKILL)).To(Succeed())
	g.Eventually(func() bool { return exited(process.Pid) }, time.Minute, 100*time.Millisecond).Should(BeTrue(), "kube-apiserver exits")
	t.Logf("kube-apiserver stopped in %s with %d containers made", time.Since(stopped).Round(time.Millisecond), len(c.clusterContainers()))
	time.Sleep(apiServerDown - time.Since(stopped))

	log, err := os.Create(filepath.Join(testenv.RepoRoot(), "_artifacts", "kube-apiserver-restarted.log"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = log.Close() })
	command.Stdout, command.Stderr = log, log
	command.SysProcAttr = diesWithTheTest()
	g.Expect(command.Start()).To(Succeed())
	restarted = command
	t.Logf("kube-apiserver started again %s after it was stopped", time.Since(stopped).Round(time.Millisecond))
	g.Eventually(func() error {
		return management.Client.Get(ctx, c.key(), &infrav1.DockerMachinePool{})
	}, time.Minute, 250*time.Millisecond).Should(Succeed(), "kube-apiserver answers again; its log: %s", log.Name())
	t.Logf("kube-apiserver answers %s after it was stopped", time.Since(stopped).Round(time.Millisecond))

	c.waitForReady(3, v131, faultBudgets.PoolUpgrade)
	t.Logf("scale-up complete %s after kube-apiserver was stopped", time.Since(stopped).Round(time.Millisecond))
	report := monitor.Stop()
	t.Logf("monitor: %s", report.Coverage)
	g.Expect(report.Violations).To(BeEmpty())
	g.Expect(report.Coverage.Blind()).To(BeEmpty())
	g.Expect(report.Coverage.Unknown).To(BeNumerically(">", 0), "the monitor counted the samples it could not read")
	g.Expect(c.containers()).To(HaveEach(HaveField("Labels", HaveKeyWithValue(infrav1.KubernetesVersionLabel, v131))))
}

// commandOf is the command that runs process pid again: its arguments, environment and working
// directory, read from /proc.
func commandOf(pid int) (*exec.Cmd, error) {
	proc := fmt.Sprintf("/proc/%d", pid)
	rawArgs, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		return nil, err
	}
	rawEnv, err := os.ReadFile(proc + "/environ")
	if err != nil {
		return nil, err
	}
	dir, err := os.Readlink(proc + "/cwd")
	if err != nil {
		return nil, err
	}
	args := strings.Split(strings.TrimRight(string(rawArgs), "\x00"), "\x00")
	if len(args) == 0 || args[0] == "" {
		return nil, errors.New("empty command line in " + proc)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = strings.Split(strings.TrimRight(string(rawEnv), "\x00"), "\x00")
	cmd.Dir = dir
	return cmd, nil
}

// exited says whether process pid ended: gone, or a zombie its parent (envtest, which waits for
// it only when stopped) has not reaped.
func exited(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}
