package webhooks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/hostpath"
)

// hostileInput is a spec a user can type wrong, and the field the refusal must name.
type hostileInput struct {
	name string
	// pool changes a valid DockerMachinePool's machine template; template, when set, a valid
	// DockerMachinePoolTemplate; machine a DockerMachinePoolMachine.
	pool      func(*infrav1.DockerMachinePool)
	template  func(*infrav1.DockerMachinePoolTemplate)
	machine   func(*infrav1.DockerMachinePoolMachine)
	wantField string
}

func mounts(m ...infrav1.Mount) func(*infrav1.DockerMachinePool) {
	return func(p *infrav1.DockerMachinePool) { p.Spec.Template.ExtraMounts = m }
}

func image(i string) func(*infrav1.DockerMachinePool) {
	return func(p *infrav1.DockerMachinePool) { p.Spec.Template.CustomImage = i }
}

func timeout(d time.Duration) func(*infrav1.DockerMachinePool) {
	return func(p *infrav1.DockerMachinePool) { p.Spec.Template.BootstrapTimeout = &metav1.Duration{Duration: d} }
}

func preload(images ...string) func(*infrav1.DockerMachinePool) {
	return func(p *infrav1.DockerMachinePool) { p.Spec.Template.PreLoadImages = images }
}

// testHostPaths is the --allowed-host-paths the tests' webhooks run with: /srv, as an operator
// would allow a directory of data for nodes. Paths outside it are refused.
var testHostPaths = func() hostpath.Policy {
	p, err := hostpath.NewPolicy([]string{"/srv"})
	if err != nil {
		panic(err)
	}
	return p
}()

// hostileInputs are every input docs/webhooks.md lists as refused, each checked on a real API
// server by TestWebhooksOnAPIServer (whose webhooks allow testHostPaths): refused as Invalid,
// naming its field.
var hostileInputs = []hostileInput{
	// customImage: the gate must be able to read the version from the tag.
	{name: "customImage latest", pool: image("kindest/node:latest"), wantField: "spec.template.customImage"},
	{name: "customImage without a tag", pool: image("kindest/node"), wantField: "spec.template.customImage"},
	{name: "customImage with a digest and no tag", pool: image("kindest/node@sha256:" + strings.Repeat("a", 64)), wantField: "spec.template.customImage"},
	{name: "customImage tag without v", pool: image("kindest/node:1.36.3"), wantField: "spec.template.customImage"},
	{name: "customImage without a patch version", pool: image("kindest/node:v1.36"), wantField: "spec.template.customImage"},
	{name: "customImage with semver build metadata (+ is not a tag character)", pool: image("kindest/node:v1.36.3+k3s1"), wantField: "spec.template.customImage"},
	{name: "customImage with an upper-case repository path", pool: image("kindest/Node:v1.36.3"), wantField: "spec.template.customImage"},
	{name: "customImage without a repository", pool: image(":v1.36.3"), wantField: "spec.template.customImage"},
	{name: "customImage with a space", pool: image("kindest/node :v1.36.3"), wantField: "spec.template.customImage"},
	{name: "customImage with a short digest", pool: image("kindest/node:v1.36.3@sha256:abc"), wantField: "spec.template.customImage"},
	{name: "customImage whose version is longer than a label value", pool: image("kindest/node:v1.36.3-" + strings.Repeat("a", 60)), wantField: "spec.template.customImage"},
	{name: "customImage longer than 512 characters", pool: image(strings.Repeat("a", 513)), wantField: "spec.template.customImage"},
	// bootstrapTimeout.
	{name: "bootstrapTimeout zero", pool: timeout(0), wantField: "bootstrapTimeout must be greater than zero"},
	{name: "bootstrapTimeout negative", pool: timeout(-time.Minute), wantField: "bootstrapTimeout must be greater than zero"},
	{name: "bootstrapTimeout over an hour", pool: timeout(time.Hour + time.Second), wantField: "bootstrapTimeout must be at most 1h"},
	{name: "bootstrapTimeout of a century", pool: timeout(876000 * time.Hour), wantField: "bootstrapTimeout must be at most 1h"},
	// preLoadImages.
	{name: "preLoadImages entry not an image reference", pool: preload("nginx:bad tag"), wantField: "spec.template.preLoadImages[0]"},
	{name: "preLoadImages entry with an upper-case repository", pool: preload("Registry/UPPER:1"), wantField: "spec.template.preLoadImages[0]"},
	{name: "preLoadImages entry an image ID", pool: preload("sha256:" + strings.Repeat("ab", 32)), wantField: "spec.template.preLoadImages[0]"},
	{name: "preLoadImages entry empty", pool: preload(""), wantField: "spec.template.preLoadImages[0]"},
	{name: "preLoadImages entry longer than 512 characters", pool: preload(strings.Repeat("a", 513)), wantField: "spec.template.preLoadImages[0]"},
	{name: "preLoadImages with 33 entries", pool: preload(strings.Split(strings.TrimSuffix(strings.Repeat("nginx:1.27,", 33), ","), ",")...), wantField: "spec.template.preLoadImages"},
	// extraMounts: paths, and host paths that make a pool's author root on the host.
	{name: "extraMounts container path relative", pool: mounts(infrav1.Mount{ContainerPath: "data", HostPath: "/srv/data"}), wantField: "spec.template.extraMounts[0].containerPath"},
	{name: "extraMounts host path relative", pool: mounts(infrav1.Mount{ContainerPath: "/data", HostPath: "srv"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts host path empty", pool: mounts(infrav1.Mount{ContainerPath: "/data", HostPath: ""}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts host path longer than 4096", pool: mounts(infrav1.Mount{ContainerPath: "/data", HostPath: "/" + strings.Repeat("a", 4096)}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts two on one container path", pool: mounts(infrav1.Mount{ContainerPath: "/a", HostPath: "/srv/x"}, infrav1.Mount{ContainerPath: "/a/", HostPath: "/srv/y"}), wantField: "spec.template.extraMounts[1].containerPath"},
	{name: "extraMounts with 33 entries", pool: func(p *infrav1.DockerMachinePool) {
		for i := range 33 {
			p.Spec.Template.ExtraMounts = append(p.Spec.Template.ExtraMounts, infrav1.Mount{ContainerPath: fmt.Sprintf("/m%d", i), HostPath: fmt.Sprintf("/srv/m%d", i)})
		}
	}, wantField: "spec.template.extraMounts"},
	{name: "extraMounts of a host path the manager does not allow", pool: mounts(infrav1.Mount{ContainerPath: "/etc/host", HostPath: "/etc"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of a sibling of an allowed path with a common prefix", pool: mounts(infrav1.Mount{ContainerPath: "/data", HostPath: "/srvx/data"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts host path with a .. element", pool: mounts(infrav1.Mount{ContainerPath: "/data", HostPath: "/srv/../etc"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of a directory that contains the engine's state", pool: mounts(infrav1.Mount{ContainerPath: "/d", HostPath: "/var/lib"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of the host's root", pool: mounts(infrav1.Mount{ContainerPath: "/host", HostPath: "/"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of the host's root spelled //", pool: mounts(infrav1.Mount{ContainerPath: "/host", HostPath: "//."}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of the Docker socket", pool: mounts(infrav1.Mount{ContainerPath: "/var/run/docker.sock", HostPath: "/var/run/docker.sock"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of the Docker socket under /run", pool: mounts(infrav1.Mount{ContainerPath: "/docker.sock", HostPath: "/run/docker.sock"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of containerd's socket", pool: mounts(infrav1.Mount{ContainerPath: "/c.sock", HostPath: "/run/containerd/containerd.sock"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of the engine's state", pool: mounts(infrav1.Mount{ContainerPath: "/d", HostPath: "/var/lib/docker"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of /proc", pool: mounts(infrav1.Mount{ContainerPath: "/hostproc", HostPath: "/proc"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of a process's root under /proc", pool: mounts(infrav1.Mount{ContainerPath: "/init", HostPath: "/proc/1/root"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of /sys", pool: mounts(infrav1.Mount{ContainerPath: "/hostsys", HostPath: "/sys"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of /dev", pool: mounts(infrav1.Mount{ContainerPath: "/hostdev", HostPath: "/dev/sda"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts of /boot", pool: mounts(infrav1.Mount{ContainerPath: "/b", HostPath: "/boot"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts over the node's root", pool: mounts(infrav1.Mount{ContainerPath: "/", HostPath: "/srv/root"}), wantField: "spec.template.extraMounts[0].containerPath"},
	{name: "extraMounts over the node's /proc", pool: mounts(infrav1.Mount{ContainerPath: "/proc", HostPath: "/srv/proc"}), wantField: "spec.template.extraMounts[0].containerPath"},
	{name: "extraMounts over kind's files", pool: mounts(infrav1.Mount{ContainerPath: "/kind/version", HostPath: "/srv/version"}), wantField: "spec.template.extraMounts[0].containerPath"},
	// extraMounts that Docker reads otherwise than written (a ":" ends a bind's path) or refuses.
	{name: "extraMounts container path with a : and bind options", pool: mounts(infrav1.Mount{ContainerPath: "/proc:ro", HostPath: "/srv/proc"}), wantField: "spec.template.extraMounts[0].containerPath"},
	{name: "extraMounts container path with a : and a propagation mode", pool: mounts(infrav1.Mount{ContainerPath: "/data:rshared", HostPath: "/srv/data"}), wantField: "spec.template.extraMounts[0].containerPath"},
	{name: "extraMounts host path with a : and another path", pool: mounts(infrav1.Mount{ContainerPath: "/data", HostPath: "/srv/a:/b"}), wantField: "spec.template.extraMounts[0].hostPath"},
	{name: "extraMounts over the node's /tmp", pool: mounts(infrav1.Mount{ContainerPath: "/tmp", HostPath: "/srv/tmp"}), wantField: "spec.template.extraMounts[0].containerPath"},
	{name: "extraMounts over the node's /run", pool: mounts(infrav1.Mount{ContainerPath: "/run/", HostPath: "/srv/run"}), wantField: "spec.template.extraMounts[0].containerPath"},
	{name: "extraMounts over the node's /var", pool: mounts(infrav1.Mount{ContainerPath: "/var", HostPath: "/srv/var"}), wantField: "spec.template.extraMounts[0].containerPath"},
	{name: "extraMounts over the node's /lib/modules", pool: mounts(infrav1.Mount{ContainerPath: "/lib/modules", HostPath: "/srv/modules"}), wantField: "spec.template.extraMounts[0].containerPath"},
	// The pool's own fields.
	{name: "providerIDList entry empty", pool: func(p *infrav1.DockerMachinePool) { p.Spec.ProviderIDList = []string{""} }, wantField: "spec.providerIDList[0]"},
	{name: "providerID longer than 512", pool: func(p *infrav1.DockerMachinePool) { p.Spec.ProviderID = strings.Repeat("a", 513) }, wantField: "spec.providerID"},
	// DockerMachinePoolTemplate.
	{name: "template with a provider ID", template: func(t *infrav1.DockerMachinePoolTemplate) {
		t.Spec.Template.Spec.ProviderID = "docker:////pool"
	}, wantField: "spec.template.spec.providerID"},
	{name: "template with an invalid label key", template: func(t *infrav1.DockerMachinePoolTemplate) {
		t.Spec.Template.ObjectMeta.Labels = map[string]string{"/invalid-key": "x"}
	}, wantField: "spec.template.metadata.labels"},
	{name: "template with a label value over 63 characters", template: func(t *infrav1.DockerMachinePoolTemplate) {
		t.Spec.Template.ObjectMeta.Labels = map[string]string{"team": strings.Repeat("a", 64)}
	}, wantField: "spec.template.metadata.labels"},
	{name: "template mounting the Docker socket", template: func(t *infrav1.DockerMachinePoolTemplate) {
		t.Spec.Template.Spec.Template.ExtraMounts = []infrav1.Mount{{ContainerPath: "/s", HostPath: "/var/run/docker.sock"}}
	}, wantField: "spec.template.spec.template.extraMounts[0].hostPath"},
	{name: "template mounting a host path the manager does not allow", template: func(t *infrav1.DockerMachinePoolTemplate) {
		t.Spec.Template.Spec.Template.ExtraMounts = []infrav1.Mount{{ContainerPath: "/root-home", HostPath: "/root"}}
	}, wantField: "spec.template.spec.template.extraMounts[0].hostPath"},
	{name: "template mounting a container path with a :", template: func(t *infrav1.DockerMachinePoolTemplate) {
		t.Spec.Template.Spec.Template.ExtraMounts = []infrav1.Mount{{ContainerPath: "/data:rshared", HostPath: "/srv/data"}}
	}, wantField: "spec.template.spec.template.extraMounts[0].containerPath"},
	// DockerMachinePoolMachine.
	{name: "machine with another provider's ID", machine: func(m *infrav1.DockerMachinePoolMachine) { m.Spec.ProviderID = "aws:///us-east-1a/i-0123" }, wantField: "spec.providerID"},
	{name: "machine with a provider ID and no container name", machine: func(m *infrav1.DockerMachinePoolMachine) { m.Spec.ProviderID = "docker:////" }, wantField: "spec.providerID"},
}

// createHostile creates in namespace the object input describes, named name.
func createHostile(ctx context.Context, c client.Client, namespace, name string, input hostileInput) error {
	meta := metav1.ObjectMeta{Namespace: namespace, Name: name}
	switch {
	case input.template != nil:
		t := &infrav1.DockerMachinePoolTemplate{ObjectMeta: meta}
		input.template(t)
		return c.Create(ctx, t)
	case input.machine != nil:
		m := &infrav1.DockerMachinePoolMachine{ObjectMeta: meta}
		input.machine(m)
		return c.Create(ctx, m)
	default:
		p := &infrav1.DockerMachinePool{ObjectMeta: meta}
		input.pool(p)
		return c.Create(ctx, p)
	}
}

// expectRefused checks err is the API server's refusal naming field.
func expectRefused(g Gomega, err error, field string) {
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring(field))
}

func TestHostileInputsDocumented(t *testing.T) {
	g := NewWithT(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "webhooks.md"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, input := range hostileInputs {
		g.Expect(string(doc)).To(ContainSubstring("| "+input.name+" | `"+input.wantField+"` |"), "docs/webhooks.md lists %q", input.name)
	}
}
