package stubnode_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/test/dockerengine"
	"github.com/capdmp/capdmp/internal/test/testenv"
	"github.com/capdmp/capdmp/test/stubnode"
	"github.com/capdmp/capdmp/test/stubnode/internal/kubeadm"
)

// logWriter sends the image builder's progress to the test log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestJoin runs the stub kubeadm of real node image containers against a real workload API
// server with real bootstrap token Secrets, the way CAPDMP's fast tier does.
func TestJoin(t *testing.T) {
	host := dockerengine.Require(t)
	ctx := context.Background()
	g := NewWithT(t)

	start := time.Now()
	g.Expect(stubnode.EnsureImages(ctx, logWriter{t}, "v1.30.13", "v1.31.9")).To(Succeed())
	t.Logf("TIMING node images ready in %s", time.Since(start).Round(time.Millisecond))

	workload, err := testenv.StartWorkload(ctx)
	g.Expect(err).ToNot(HaveOccurred())
	t.Cleanup(func() { _ = workload.Stop() })
	t.Logf("TIMING workload API server started in %s", workload.StartDuration.Round(time.Millisecond))

	caHashes, err := kubeadm.CACertHashes(workload.CAData)
	g.Expect(err).ToNot(HaveOccurred())
	caHash := caHashes[0]
	endpoint := fmt.Sprintf("%s:%d", workload.Endpoint.Host, workload.Endpoint.Port)

	validToken, err := workload.CreateBootstrapToken(ctx, time.Now().Add(time.Hour))
	g.Expect(err).ToNot(HaveOccurred())
	expiredToken, err := workload.CreateBootstrapToken(ctx, time.Now().Add(-time.Minute))
	g.Expect(err).ToNot(HaveOccurred())
	// Same id as the valid token, another secret.
	wrongSecret := strings.SplitN(validToken, ".", 2)[0] + ".0000000000000000"

	run := randomHex(t)
	t.Cleanup(func() { removeContainers(host, run) })

	tests := []struct {
		name string
		// image is the node image's version, renderedFor the version CABPK renders the
		// JoinConfiguration for (which picks its apiVersion).
		image, renderedFor string
		token              string
		providerID         string
		wantExitCode       int
		wantOutput         string
		wantProviderID     string
	}{
		{name: "valid token joins", image: "v1.31.9", renderedFor: "v1.31.9", token: validToken, wantOutput: "This node has joined the cluster"},
		{name: "v1beta3 and a provider-id on v1.30", image: "v1.30.13", renderedFor: "v1.30.13", token: validToken, providerID: "docker:////custom-id", wantProviderID: "docker:////custom-id", wantOutput: "apiVersion kubeadm.k8s.io/v1beta3"},
		{name: "v1beta3 still read by v1.31", image: "v1.31.9", renderedFor: "v1.30.13", token: validToken, wantOutput: "apiVersion kubeadm.k8s.io/v1beta3"},
		{name: "wrong secret fails with 401", image: "v1.31.9", renderedFor: "v1.31.9", token: wrongSecret, wantExitCode: kubeadm.ExitTokenRejected, wantOutput: "answered 401 Unauthorized"},
		{name: "expired token fails with 401", image: "v1.31.9", renderedFor: "v1.31.9", token: expiredToken, wantExitCode: kubeadm.ExitTokenRejected, wantOutput: "answered 401 Unauthorized"},
		{name: "v1beta4 refused by v1.30", image: "v1.30.13", renderedFor: "v1.31.9", token: validToken, wantExitCode: kubeadm.ExitUnsupportedConfig, wantOutput: `kubeadm v1.30.13 cannot read apiVersion "kubeadm.k8s.io/v1beta4"`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			name := fmt.Sprintf("capdmp-join-%s-%d", run, i)

			config := joinConfiguration(t, tt.renderedFor, endpoint, tt.token, caHash, name, tt.providerID)

			startContainer := time.Now()
			_, err := dockerengine.Docker(ctx, host, nil, "run", "--detach", "--pull=never", "--name", name,
				"--label", "test.capdmp.dev/run="+run, "--network", "host", "--privileged", "--cgroupns", "private",
				"--security-opt", "seccomp=unconfined", "--tmpfs", "/run", "--tmpfs", "/tmp", "--volume", "/var",
				stubnode.Image(tt.image))
			g.Expect(err).ToNot(HaveOccurred())
			t.Logf("TIMING container started in %s", time.Since(startContainer).Round(time.Millisecond))

			// Write the configuration as the cloud-init write_files step does, then join.
			_, err = dockerengine.Docker(ctx, host, []byte(config), "exec", "-i", name, "/bin/sh", "-c",
				"mkdir -p /run/kubeadm && cat > /run/kubeadm/kubeadm-join-config.yaml && chmod 0640 /run/kubeadm/kubeadm-join-config.yaml")
			g.Expect(err).ToNot(HaveOccurred())

			startJoin := time.Now()
			out, code := dockerExec(ctx, host, name, "kubeadm", "join", "--config", "/run/kubeadm/kubeadm-join-config.yaml",
				"--ignore-preflight-errors=SystemVerification,Swap,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables", "-v", "5")
			t.Logf("TIMING kubeadm join (exit %d) in %s; output:\n%s", code, time.Since(startJoin).Round(time.Millisecond), out)
			g.Expect(code).To(Equal(tt.wantExitCode))
			g.Expect(out).To(ContainSubstring(tt.wantOutput))

			node := &corev1.Node{}
			err = workload.Client.Get(ctx, client.ObjectKey{Name: name}, node)
			if tt.wantExitCode != 0 {
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no Node is registered by a failed join: %v", err)
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			wantProviderID := tt.wantProviderID
			if wantProviderID == "" {
				wantProviderID = "docker:////" + name
			}
			g.Expect(node.Spec.ProviderID).To(Equal(wantProviderID))
			g.Expect(node.Status.NodeInfo.KubeletVersion).To(Equal(tt.image))
			g.Expect(node.Status.Conditions).To(ContainElement(And(
				HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
			g.Expect(node.Spec.Taints).ToNot(ContainElement(HaveField("Key", corev1.TaintNodeNotReady)))

			// A second join of the same node fails its preflight check, as the real kubeadm does.
			out, code = dockerExec(ctx, host, name, "kubeadm", "join", "--config", "/run/kubeadm/kubeadm-join-config.yaml")
			g.Expect(code).To(Equal(kubeadm.ExitPreflight), out)
		})
	}
}

// joinConfiguration renders a worker JoinConfiguration as CABPK does for a Kubernetes version.
func joinConfiguration(t testing.TB, version, endpoint, token, caHash, nodeName, providerID string) string {
	t.Helper()
	jc := &bootstrapv1.JoinConfiguration{
		Discovery: bootstrapv1.Discovery{BootstrapToken: bootstrapv1.BootstrapTokenDiscovery{
			APIServerEndpoint: endpoint, Token: token, CACertHashes: []string{caHash},
		}},
		NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: nodeName},
	}
	if providerID != "" {
		jc.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "provider-id", Value: &providerID}}
	}
	out, err := kubeadmtypes.MarshalJoinConfigurationForVersion(jc, semver.MustParse(strings.TrimPrefix(version, "v")))
	if err != nil {
		t.Fatal(err)
	}
	return "---\n" + out
}

// dockerExec runs a command in a container and returns its combined output and exit code.
func dockerExec(ctx context.Context, host, name string, cmd ...string) (string, int) {
	c := exec.CommandContext(ctx, "docker", append([]string{"exec", name}, cmd...)...)
	c.Env = append(os.Environ(), "DOCKER_HOST="+host)
	out, err := c.CombinedOutput()
	if exitErr, ok := errors.AsType[*exec.ExitError](err); ok {
		return string(out), exitErr.ExitCode()
	}
	if err != nil {
		return string(out) + err.Error(), -1
	}
	return string(out), 0
}

func removeContainers(host, run string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids, err := dockerengine.Docker(ctx, host, nil, "ps", "--all", "--quiet", "--filter", "label=test.capdmp.dev/run="+run)
	if err != nil || strings.TrimSpace(ids) == "" {
		return
	}
	_, _ = dockerengine.Docker(ctx, host, nil, append([]string{"rm", "--force", "--volumes"}, strings.Fields(ids)...)...)
}

func randomHex(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestStopSignalExitCode: stopped with the image's stop signal, the stub's init exits 130 as a
// kindest/node's systemd does, so that restart policy on-failure brings it back after an engine
// restart; SIGTERM ends it with 0.
func TestStopSignalExitCode(t *testing.T) {
	host := dockerengine.Require(t)
	ctx := context.Background()
	g := NewWithT(t)
	g.Expect(stubnode.EnsureImages(ctx, logWriter{t}, "v1.31.9")).To(Succeed())

	for signal, wantCode := range map[string]string{"": "130", "SIGTERM": "0"} {
		suffix := make([]byte, 4)
		_, _ = rand.Read(suffix)
		name := "capdmp-stub-stop-" + hex.EncodeToString(suffix)
		_, err := dockerengine.Docker(ctx, host, nil, "run", "--detach", "--pull=never", "--name", name, stubnode.Image("v1.31.9"))
		g.Expect(err).ToNot(HaveOccurred())
		t.Cleanup(func() { _, _ = dockerengine.Docker(context.Background(), host, nil, "rm", "-f", name) })
		// PID 1 ignores a signal it has no handler for yet.
		g.Eventually(func() (string, error) { return dockerengine.Docker(ctx, host, nil, "logs", name) }, 10*time.Second, 50*time.Millisecond).
			Should(ContainSubstring("is up as pid 1"))
		// docker stop sends the image's stop signal; kill another one (the engine here may be
		// older than `docker stop --signal`).
		stop := []string{"stop", name}
		if signal != "" {
			stop = []string{"kill", "--signal", signal, name}
		}
		_, err = dockerengine.Docker(ctx, host, nil, stop...)
		g.Expect(err).ToNot(HaveOccurred())
		code, err := dockerengine.Docker(ctx, host, nil, "wait", name)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(strings.TrimSpace(code)).To(Equal(wantCode), "stopped with %q", signal)
	}
}
