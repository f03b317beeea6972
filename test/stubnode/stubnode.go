// Package stubnode builds CAPDMP's stub node image, a 30 MB stand-in for kindest/node on
// machines where no image can be pulled: FROM scratch, Debian's static busybox, a tiny init and a
// stub kubeadm whose `join` proves the bootstrap token against a real kube-apiserver and registers
// the Node. It is tagged kindest/node:<version> for each Kubernetes version a test needs, and
// records the version in /kind/version as kindest/node does. See README.md.
package stubnode

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capdmp/capdmp/internal/test/dockerengine"
	"github.com/capdmp/capdmp/internal/test/testenv"
)

const (
	// Repository is the repository the images are tagged in, kind's.
	Repository = "kindest/node"
	// BuiltLabel marks the images built here: an image without it is never overwritten.
	BuiltLabel = "test.capdmp.dev/stub-node"
	// VersionLabel holds the Kubernetes version the image stands for.
	VersionLabel = "test.capdmp.dev/nodeimage-version"
)

// DefaultVersions are the versions build.sh tags when given none: one patch release per minor,
// each one a kindest/node image of sigs.k8s.io/cluster-api/test v1.14.2's kind mapping. The
// versions of the real node images (internal/kubeversions) are deliberately not among them, and
// v1.37 has no other patch release there.
var DefaultVersions = []string{
	"v1.29.14", "v1.30.13", "v1.31.9", "v1.32.5", "v1.33.1",
	"v1.34.0", "v1.35.0", "v1.36.1",
}

// Image is the reference of the stub image for a Kubernetes version, e.g. kindest/node:v1.33.1.
func Image(version string) string {
	return Repository + ":" + normalize(version)
}

func normalize(version string) string {
	if !strings.HasPrefix(version, "v") {
		return "v" + version
	}
	return version
}

// Options configure Build.
type Options struct {
	// Versions to tag; DefaultVersions when empty.
	Versions []string
	// DockerHost of the engine; dockerengine.Host when empty.
	DockerHost string
	// Busybox is a static busybox binary; found or downloaded from Debian when empty.
	Busybox string
	// Log receives progress lines; discarded when nil.
	Log io.Writer
}

// dockerfile builds the image of one version from the folder Build lays out: rootfs/ and
// versions/<version>. Every version shares the rootfs layer.
const dockerfile = `FROM scratch
COPY rootfs/ /
ARG VERSION
COPY versions/${VERSION} /kind/version
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin container=docker
ENTRYPOINT ["/sbin/init"]
STOPSIGNAL SIGRTMIN+3
`

// Build builds the stub binaries and, with `docker build`, the image of each version. The
// engine's build cache keeps an unchanged image as it is. It refuses to replace an image of the
// same tag that it did not build, such as a real node image built by hack/node-images.
func Build(ctx context.Context, o Options) error {
	start := time.Now()
	logf := func(format string, args ...any) {
		if o.Log != nil {
			_, _ = fmt.Fprintf(o.Log, "[nodeimage] "+format+"\n", args...)
		}
	}
	versions := o.Versions
	if len(versions) == 0 {
		versions = DefaultVersions
	}
	host := o.DockerHost
	if host == "" {
		var err error
		if host, err = dockerengine.Host(ctx); err != nil {
			return err
		}
	}

	// The binaries run in the engine's containers: built for its architecture, not the host's.
	arch, err := dockerengine.Docker(ctx, host, nil, "version", "--format", "{{.Server.Arch}}")
	if err != nil {
		return fmt.Errorf("reading the Docker engine's architecture: %w", err)
	}
	dir, err := os.MkdirTemp("", "capdmp-nodeimage-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := populateRootfs(ctx, filepath.Join(dir, "rootfs"), o.Busybox, strings.TrimSpace(arch), logf); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "versions"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil { // world-readable by design
		return err
	}
	logf("binaries and busybox ready in %s", time.Since(start).Round(time.Millisecond))

	for _, v := range versions {
		v = normalize(v)
		image := Image(v)
		builtHere, err := dockerengine.Docker(ctx, host, nil, "image", "inspect", "--format", "{{index .Config.Labels \""+BuiltLabel+"\"}}", image)
		if err == nil && strings.TrimSpace(builtHere) != "true" {
			return fmt.Errorf("%s exists without the label %s (a real node image, or a stub image of an older build); not replacing it: remove it or use another version", image, BuiltLabel)
		}
		if err := os.WriteFile(filepath.Join(dir, "versions", v), []byte(v+"\n"), 0o644); err != nil { // world-readable by design
			return err
		}
		t := time.Now()
		if _, err := dockerengine.Docker(ctx, host, nil, "build", "--quiet", "--build-arg", "VERSION="+v,
			"--label", BuiltLabel+"=true", "--label", VersionLabel+"="+v, "--tag", image, dir); err != nil {
			return err
		}
		logf("%s built in %s", image, time.Since(t).Round(time.Millisecond))
	}
	logf("done in %s", time.Since(start).Round(time.Millisecond))
	// An image rebuilt from changed binaries took the tag from the older one: remove the untagged
	// images built here that no container uses.
	if _, err := dockerengine.Docker(ctx, host, nil, "image", "prune", "--force", "--filter", "label="+BuiltLabel); err != nil {
		logf("warning: could not remove the untagged images of older builds: %v", err)
	}
	return nil
}

var (
	ensureMu    sync.Mutex
	ensuredTags = map[string]bool{}
)

// EnsureImages builds the images of versions that are missing or stale, once per process and
// version; tests call it before starting containers.
func EnsureImages(ctx context.Context, log io.Writer, versions ...string) error {
	ensureMu.Lock()
	defer ensureMu.Unlock()
	var missing []string
	for _, v := range versions {
		if !ensuredTags[normalize(v)] {
			missing = append(missing, normalize(v))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := Build(ctx, Options{Versions: missing, Log: log}); err != nil {
		return err
	}
	for _, v := range missing {
		ensuredTags[v] = true
	}
	return nil
}

// populateRootfs lays out the image's files: busybox and its applet links in /bin, the stub
// kubeadm in /usr/bin, the init in /sbin, root's passwd and group entries, empty folders.
func populateRootfs(ctx context.Context, rootfs, busybox, arch string, logf func(string, ...any)) error {
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/local/bin", "etc/kubernetes", "kind", "root", "tmp", "run", "var/lib", "var/log", "proc", "sys", "dev", "lib/modules"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(rootfs, "tmp"), 0o777|os.ModeSticky); err != nil { // /tmp is world-writable
		return err
	}
	files := map[string]string{
		"etc/passwd":        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":         "root:x:0:\nnogroup:x:65534:\n",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
		"etc/os-release":    "NAME=\"CAPDMP test node\"\nID=capdmp-test-node\nPRETTY_NAME=\"CAPDMP test node image (busybox, stub kubeadm)\"\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(rootfs, name), []byte(content), 0o644); err != nil { // world-readable by design
			return err
		}
	}

	bb, err := findBusybox(ctx, busybox, logf)
	if err != nil {
		return err
	}
	if err := copyFile(bb, filepath.Join(rootfs, "bin", "busybox"), 0o755); err != nil {
		return err
	}
	list, err := exec.CommandContext(ctx, bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("%s --list: %w", bb, err)
	}
	for applet := range strings.FieldsSeq(string(list)) {
		// init is ours; busybox's would shadow nothing in /bin, but keep one init in the image.
		if applet == "busybox" || applet == "init" || applet == "linuxrc" || strings.Contains(applet, "/") {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", applet)); err != nil {
			return err
		}
	}

	// One go build for both binaries: they share most packages.
	out, err := goBuild(ctx, rootfs, arch, "./stubnode/cmd/kubeadm", "./stubnode/cmd/init")
	if err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(out, "kubeadm"), filepath.Join(rootfs, "usr", "bin", "kubeadm")); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(out, "init"), filepath.Join(rootfs, "sbin", "init")); err != nil {
		return err
	}
	return os.Remove(out)
}

// goBuild builds static linux/arch binaries of pkgs, packages of the harness module (test/), into
// a new folder beside rootfs and returns the folder.
func goBuild(ctx context.Context, rootfs, arch string, pkgs ...string) (string, error) {
	out := filepath.Join(filepath.Dir(rootfs), "gobin")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	args := append([]string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out + "/"}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Join(testenv.RepoRoot(), "test")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %v: %w: %s", pkgs, err, b)
	}
	return out, nil
}

// hostBusyboxPaths are where Debian installs busybox-static.
var hostBusyboxPaths = []string{"/bin/busybox", "/usr/bin/busybox"}

// findBusybox returns a static busybox: the given path, BUSYBOX, the host's, or one extracted from
// Debian's busybox-static package into the cache.
func findBusybox(ctx context.Context, given string, logf func(string, ...any)) (string, error) {
	candidates := append([]string{given, os.Getenv("BUSYBOX")}, hostBusyboxPaths...)
	cache := filepath.Join(cacheDir(), "nodeimage", "busybox-static")
	candidates = append(candidates, filepath.Join(cache, "bin", "busybox"))
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if err := checkStatic(c); err == nil {
			return c, nil
		} else if c == given {
			return "", err
		}
	}
	logf("no static busybox on this machine: extracting Debian's busybox-static into %s", cache)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp("", "busybox-static-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	download := exec.CommandContext(ctx, "apt-get", "download", "busybox-static")
	download.Dir = tmp
	if out, err := download.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download busybox-static: %w: %s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "busybox-static_*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download busybox-static left %v", debs)
	}
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], cache).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb -x: %w: %s", err, out)
	}
	bb := filepath.Join(cache, "bin", "busybox")
	return bb, checkStatic(bb)
}

// checkStatic fails unless path is a statically linked ELF executable (no interpreter).
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("busybox %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("busybox %s is dynamically linked; the image needs Debian's busybox-static", path)
		}
	}
	return nil
}

func cacheDir() string {
	if d := os.Getenv("CAPDMP_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return os.TempDir()
	}
	return filepath.Join(home, ".cache", "capdmp")
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// Versions parses a list of versions separated by spaces or commas.
func Versions(s string) []string {
	var out []string
	for f := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		out = append(out, normalize(f))
	}
	return slices.Compact(out)
}
