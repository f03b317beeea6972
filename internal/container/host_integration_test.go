package container_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/container/containertest"
)

// TestHostAsANodeContainerSeesIt: what the engine reports of its machine (Host) is what a process
// in a node container reads where a kubelet's cAdvisor reads it: the CPUs online in
// /sys/devices/system/cpu/online, MemTotal in /proc/meminfo, and uname's machine. A node container
// has no resource limits, so its kubelet reports these as its Node's capacity.
func TestHostAsANodeContainerSeesIt(t *testing.T) {
	d := containertest.Engine(t)
	containertest.EnsureBusyboxImage(t, d)
	ctx := context.Background()
	g := NewWithT(t)

	d.ResetCalls()
	host, err := d.Host(ctx)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(d.Calls()).To(Equal(container.CallCounts{"Info": 1}))
	t.Logf("engine's machine: %+v", host)

	name := "capdmp-it-host-" + randomSuffix(t)
	spec := container.NodeSpec(container.NodeSpecInput{Name: name, Image: testImage, ClusterName: "c-" + name,
		Labels: map[string]string{"capdmp.test/run": name}})
	spec.Mounts = nil // the test host may have no /lib/modules, and the bind would create it
	spec.Cmd = []string{"/bin/sleep", "3600"}
	_, err = d.Create(ctx, spec)
	g.Expect(err).ToNot(HaveOccurred())
	t.Cleanup(func() { _ = d.Delete(context.Background(), name) })

	read := func(cmd ...string) string {
		res, err := d.Exec(ctx, name, cmd, nil)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(BeZero(), "%v: %s", cmd, res.Stderr)
		return strings.TrimSpace(string(res.Stdout))
	}
	online, err := cpuset.Parse(read("cat", "/sys/devices/system/cpu/online"))
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(online.Size()).To(Equal(host.CPUs), "CPUs online in the container")
	fields := strings.Fields(read("grep", "^MemTotal:", "/proc/meminfo"))
	g.Expect(fields).To(HaveLen(3))
	g.Expect(fields[2]).To(Equal("kB"))
	kib, err := strconv.ParseInt(fields[1], 10, 64)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(kib*1024).To(Equal(host.MemoryBytes), "MemTotal in the container")
	g.Expect(read("uname", "-m")).To(Equal(host.Architecture))
	g.Expect(host.OSType).To(Equal("linux"))
}
