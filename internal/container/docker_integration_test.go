package container_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/container/containertest"
)

const testImage = containertest.BusyboxImage

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func TestDockerIntegration(t *testing.T) {
	d := containertest.Engine(t)
	containertest.EnsureBusyboxImage(t, d)
	ctx := context.Background()

	run := randomSuffix(t)
	runLabel := map[string]string{"capdmp.test/run": run}
	network := "capdmp-it-" + run
	name := func(s string) string { return "capdmp-it-" + run + "-" + s }
	t.Cleanup(func() {
		// Leave nothing behind on a shared engine, whatever failed.
		if cs, err := d.List(ctx, runLabel); err == nil {
			for _, c := range cs {
				_ = d.Delete(ctx, c.Name)
			}
		}
		_ = exec.Command("docker", "network", "rm", network).Run()
	})

	g := NewWithT(t)
	// The tests' nodes reach only the host and each other.
	d.IsolatedNetworks = true
	ensured, err := d.EnsureNetwork(ctx, network)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(ensured.Subnets).ToNot(BeEmpty())
	g.Expect(d.EnsureNetwork(ctx, network)).To(Equal(ensured), "EnsureNetwork is idempotent")
	g.Expect(d.EnsureNetwork(ctx, container.HostNetwork)).To(Equal(container.Network{Name: container.HostNetwork}))
	out, err := exec.Command("docker", "network", "inspect", "-f", `{{.Driver}} {{index .Options "com.docker.network.bridge.enable_ip_masquerade"}}`, network).CombinedOutput()
	g.Expect(err).ToNot(HaveOccurred(), string(out))
	g.Expect(strings.TrimSpace(string(out))).To(Equal("bridge false"))

	// nodeSpec is a kind node spec that a busybox image can run: the test host has no
	// /lib/modules, and the bind would create it.
	nodeSpec := func(n, network string, labels map[string]string) container.Spec {
		spec := container.NodeSpec(container.NodeSpecInput{Name: n, Image: testImage, ClusterName: "c-" + run, Network: network, Labels: labels})
		spec.Mounts = nil
		spec.Cmd = []string{"/bin/sleep", "3600"}
		return spec
	}

	var created []container.Container
	t.Run("Create starts kind node containers on a user network and on the host network", func(t *testing.T) {
		g := NewWithT(t)
		for _, s := range []container.Spec{
			nodeSpec(name("a"), network, map[string]string{"capdmp.test/run": run, "pool": "p1"}),
			nodeSpec(name("b"), network, map[string]string{"capdmp.test/run": run, "pool": "p2"}),
			nodeSpec(name("h"), container.HostNetwork, map[string]string{"capdmp.test/run": run, "pool": "host"}),
		} {
			d.ResetCalls()
			start := time.Now()
			c, err := d.Create(ctx, s)
			elapsed := time.Since(start)
			g.Expect(err).ToNot(HaveOccurred())
			t.Logf("Create %s (network %s): %v, calls %v", s.Name, s.Network, elapsed, d.Calls())
			g.Expect(d.Calls()).To(Equal(container.CallCounts{"ImageInspect": 1, "ContainerCreate": 1, "ContainerStart": 1, "ContainerInspect": 1}))
			g.Expect(c.Name).To(Equal(s.Name))
			g.Expect(c.Image).To(Equal(testImage))
			g.Expect(c.Running).To(BeTrue())
			g.Expect(c.Labels).To(HaveKeyWithValue("io.x-k8s.kind.role", "worker"))
			g.Expect(c.CreatedAt).To(BeTemporally("~", time.Now(), time.Minute))
			if s.Network == container.HostNetwork {
				g.Expect(c.IPv4).To(BeEmpty())
			} else {
				g.Expect(c.IPv4).ToNot(BeEmpty())
			}
			created = append(created, c)
		}

		// What the engine made of the kind node options.
		out, err := exec.Command("docker", "inspect", "-f",
			`{{.HostConfig.Privileged}} {{.HostConfig.CgroupnsMode}} {{.Config.StopSignal}} {{.Config.Hostname}} {{.HostConfig.RestartPolicy.Name}}:{{.HostConfig.RestartPolicy.MaximumRetryCount}} {{json .HostConfig.Tmpfs}}`,
			name("a")).CombinedOutput()
		g.Expect(err).ToNot(HaveOccurred(), string(out))
		g.Expect(strings.TrimSpace(string(out))).To(Equal(
			`true private SIGRTMIN+3 ` + name("a") + ` on-failure:1 {"/run":"","/tmp":""}`))
		out, err = exec.Command("docker", "inspect", "-f", `{{json .HostConfig.SecurityOpt}}`, name("a")).CombinedOutput()
		g.Expect(err).ToNot(HaveOccurred(), string(out))
		// The engine adds label=disable for privileged containers.
		g.Expect(strings.TrimSpace(string(out))).To(ContainSubstring(`"seccomp=unconfined","apparmor=unconfined"`))
		out, err = exec.Command("docker", "inspect", "-f", `{{.Config.Hostname}}`, name("h")).CombinedOutput()
		g.Expect(err).ToNot(HaveOccurred(), string(out))
		g.Expect(strings.TrimSpace(string(out))).ToNot(Equal(name("h")), "on the host network the node has the host's name")
	})

	t.Run("Create with a name in use is container.ErrAlreadyExists", func(t *testing.T) {
		g := NewWithT(t)
		_, err := d.Create(ctx, nodeSpec(name("a"), network, runLabel))
		g.Expect(err).To(MatchError(container.ErrAlreadyExists))
	})

	t.Run("Create with a missing image fails typed without pulling", func(t *testing.T) {
		g := NewWithT(t)
		missing := "capdmp.local/does-not-exist:v0.0.0-" + run
		spec := nodeSpec(name("missing"), network, runLabel)
		spec.Image = missing
		d.ResetCalls()
		_, err := d.Create(ctx, spec)
		g.Expect(err).To(MatchError(container.ErrImageNotFound))
		g.Expect(err.Error()).To(ContainSubstring(missing))
		g.Expect(d.Calls()).To(Equal(container.CallCounts{"ImageInspect": 1}), "nothing but the image check may reach the engine")
		exists, err := d.ImageExists(ctx, missing)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(exists).To(BeFalse(), "the image must not have been pulled")
		_, err = d.Inspect(ctx, name("missing"))
		g.Expect(err).To(MatchError(container.ErrNotFound))
	})

	t.Run("List returns the containers having all labels", func(t *testing.T) {
		g := NewWithT(t)
		d.ResetCalls()
		all, err := d.List(ctx, runLabel)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(d.Calls()).To(Equal(container.CallCounts{"ContainerList": 1}))
		g.Expect(names(all)).To(Equal([]string{name("a"), name("b"), name("h")}))
		p1, err := d.List(ctx, map[string]string{"capdmp.test/run": run, "pool": "p1"})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(names(p1)).To(Equal([]string{name("a")}))
		g.Expect(p1[0].IPv4).To(Equal(created[0].IPv4))
		g.Expect(p1[0].ID).To(Equal(created[0].ID))
		none, err := d.List(ctx, map[string]string{"capdmp.test/run": run, "pool": "nope"})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(none).To(BeEmpty())
	})

	t.Run("Containers on the user network reach each other by name", func(t *testing.T) {
		g := NewWithT(t)
		res, err := d.Exec(ctx, name("a"), []string{"ping", "-c", "1", "-W", "2", name("b")}, nil)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(BeZero(), "stdout %s stderr %s", res.Stdout, res.Stderr)
	})

	t.Run("Exec reports exit codes, stdout and stderr", func(t *testing.T) {
		g := NewWithT(t)
		d.ResetCalls()
		start := time.Now()
		res, err := d.Exec(ctx, name("a"), []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, nil)
		t.Logf("Exec without stdin: %v, calls %v", time.Since(start), d.Calls())
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(Equal(3))
		g.Expect(string(res.Stdout)).To(Equal("out\n"))
		g.Expect(string(res.Stderr)).To(Equal("err\n"))

		res, err = d.Exec(ctx, name("a"), []string{"true"}, nil)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(BeZero())

		res, err = d.Exec(ctx, name("a"), []string{"/no/such/binary"}, nil)
		g.Expect(err).ToNot(HaveOccurred(), "a command that cannot start is a result, not an adapter error")
		g.Expect(res.ExitCode).To(BeNumerically(">=", 126))
	})

	t.Run("Exec feeds stdin, large in and out", func(t *testing.T) {
		g := NewWithT(t)
		payload := bytes.Repeat([]byte("0123456789abcdef"), 64*1024) // 1 MiB
		start := time.Now()
		res, err := d.Exec(ctx, name("a"), []string{"/bin/sh", "-c", "mkdir -p /tmp/x && cat > /tmp/x/f && wc -c < /tmp/x/f"}, bytes.NewReader(payload))
		t.Logf("Exec with 1 MiB stdin: %v", time.Since(start))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(BeZero(), string(res.Stderr))
		g.Expect(strings.TrimSpace(string(res.Stdout))).To(Equal("1048576"))

		// Echo 2 MiB back: both directions stream at once, and the output is capped.
		big := append(payload, payload...)
		res, err = d.Exec(ctx, name("a"), []string{"cat"}, bytes.NewReader(big))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(BeZero())
		g.Expect(res.Stdout).To(HaveLen(container.MaxExecOutput))
		g.Expect(res.Stdout).To(Equal(big[:container.MaxExecOutput]))

		// A command that ignores its stdin still ends with its own exit code.
		res, err = d.Exec(ctx, name("a"), []string{"/bin/sh", "-c", "exit 7"}, bytes.NewReader(big))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(Equal(7))

		// Empty stdin gives EOF at once.
		res, err = d.Exec(ctx, name("a"), []string{"wc", "-c"}, strings.NewReader(""))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(strings.TrimSpace(string(res.Stdout))).To(Equal("0"))
	})

	t.Run("Exec honours the context", func(t *testing.T) {
		g := NewWithT(t)
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := d.Exec(cctx, name("a"), []string{"sleep", "30"}, nil)
		g.Expect(err).To(MatchError(context.DeadlineExceeded))
		g.Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second))
	})

	t.Run("Exec in a missing or stopped container is typed", func(t *testing.T) {
		g := NewWithT(t)
		_, err := d.Exec(ctx, name("missing"), []string{"true"}, nil)
		g.Expect(err).To(MatchError(container.ErrNotFound))

		spec := container.Spec{Name: name("exited"), Image: testImage, Labels: runLabel, Cmd: []string{"true"}}
		_, err = d.Create(ctx, spec)
		g.Expect(err).ToNot(HaveOccurred())
		g.Eventually(func(g Gomega) {
			c, err := d.Inspect(ctx, name("exited"))
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(c.Running).To(BeFalse())
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		_, err = d.Exec(ctx, name("exited"), []string{"true"}, nil)
		g.Expect(err).To(MatchError(container.ErrNotRunning))
		listed, err := d.List(ctx, map[string]string{"capdmp.test/run": run})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(names(listed)).To(ContainElement(name("exited")), "List includes containers that do not run")
	})

	t.Run("A container never started is told from one that ran and exited", func(t *testing.T) {
		g := NewWithT(t)
		out, err := exec.Command("docker", "create", "--name", name("never-started"), "--label", "capdmp.test/run="+run, testImage, "true").CombinedOutput()
		g.Expect(err).ToNot(HaveOccurred(), string(out))
		inspected, err := d.Inspect(ctx, name("never-started"))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(inspected.Running).To(BeFalse())
		g.Expect(inspected.NeverStarted).To(BeTrue())

		listed, err := d.List(ctx, runLabel)
		g.Expect(err).ToNot(HaveOccurred())
		neverStarted := map[string]bool{}
		for _, c := range listed {
			neverStarted[c.Name] = c.NeverStarted
		}
		g.Expect(neverStarted).To(HaveKeyWithValue(name("never-started"), true))
		g.Expect(neverStarted).To(HaveKeyWithValue(name("exited"), false), "a container that ran and exited started once")
		exited, err := d.Inspect(ctx, name("exited"))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(exited.NeverStarted).To(BeFalse())
	})

	t.Run("SaveImages streams a docker save tarball", func(t *testing.T) {
		g := NewWithT(t)
		rc, err := d.SaveImages(ctx, []string{testImage})
		g.Expect(err).ToNot(HaveOccurred())
		var buf bytes.Buffer
		_, err = buf.ReadFrom(rc)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(rc.Close()).To(Succeed())
		g.Expect(buf.Len()).To(BeNumerically(">", 1<<20))
		_, err = d.SaveImages(ctx, []string{testImage, "capdmp.local/does-not-exist:v0"})
		g.Expect(err).To(MatchError(container.ErrImageNotFound))
	})

	t.Run("Watch reports the labelled containers' creates, starts, stops and removals since a time", func(t *testing.T) {
		g := NewWithT(t)
		since := time.Now().Add(-time.Second) // the engine keeps whole seconds
		watched := map[string]string{"capdmp.test/run": run, "pool": "watched"}
		w, err := d.Create(ctx, nodeSpec(name("w"), network, watched))
		g.Expect(err).ToNot(HaveOccurred())
		other, err := d.Create(ctx, nodeSpec(name("o"), network, map[string]string{"capdmp.test/run": run, "pool": "other"}))
		g.Expect(err).ToNot(HaveOccurred())

		watchCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		d.ResetCalls()
		changes, errs := d.Watch(watchCtx, watched, since)
		g.Expect(d.Calls()).To(Equal(container.CallCounts{"Events": 1}))
		_, err = d.Exec(ctx, w.Name, []string{"true"}, nil)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(d.Delete(ctx, w.Name)).To(Succeed())

		// create and start from before the watch began, then die and destroy; not the exec, not
		// the other container.
		var got []string
		for len(got) < 4 {
			select {
			case c := <-changes:
				g.Expect(c.At).To(BeTemporally(">=", since))
				g.Expect(c.At).To(BeTemporally("<=", time.Now()))
				g.Expect(c.Attributes).To(HaveKeyWithValue("name", w.Name))
				g.Expect(c.Attributes).To(HaveKeyWithValue("pool", "watched"))
				got = append(got, c.ID+" "+c.Action)
			case <-time.After(10 * time.Second):
				t.Fatalf("got %d of 4 events: %v", len(got), got)
			}
		}
		g.Expect(got).To(Equal([]string{w.ID + " create", w.ID + " start", w.ID + " die", w.ID + " destroy"}))
		g.Consistently(changes, time.Second).ShouldNot(Receive())

		cancel()
		g.Eventually(errs).Should(Receive(MatchError(context.Canceled)))
		g.Eventually(changes).Should(BeClosed())
		g.Expect(d.Delete(ctx, other.Name)).To(Succeed())
	})

	t.Run("Delete removes containers and their anonymous volumes, twice is fine", func(t *testing.T) {
		g := NewWithT(t)
		out, err := exec.Command("docker", "inspect", "-f", `{{range .Mounts}}{{if eq .Destination "/var"}}{{.Name}}{{end}}{{end}}`, name("a")).CombinedOutput()
		g.Expect(err).ToNot(HaveOccurred(), string(out))
		volume := strings.TrimSpace(string(out))
		g.Expect(volume).ToNot(BeEmpty())

		for _, c := range []string{name("a"), name("b"), name("h"), name("exited"), name("never-started")} {
			d.ResetCalls()
			start := time.Now()
			g.Expect(d.Delete(ctx, c)).To(Succeed())
			t.Logf("Delete %s: %v, calls %v", c, time.Since(start), d.Calls())
		}
		g.Expect(d.Delete(ctx, name("a"))).To(Succeed())
		left, err := d.List(ctx, runLabel)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(left).To(BeEmpty())
		g.Expect(exec.Command("docker", "volume", "inspect", volume).Run()).ToNot(Succeed(), "the anonymous /var volume must be gone")
	})
}

func names(cs []container.Container) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}
