//go:build published

package published

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container/containertest"
	"github.com/capdmp/capdmp/internal/kubeversions"
	"github.com/capdmp/capdmp/internal/test/dockerengine"
	"github.com/capdmp/capdmp/internal/test/testenv"
)

var (
	nodeVersion  = kubeversions.Older
	otherVersion = kubeversions.Newer
)

const (
	// runLabel marks every image the test builds, so that the end can prove none is left.
	runLabel = "test.capdmp.dev/published-run"
	// inputsLabel is what hack/images/build.sh labels the images it builds with.
	inputsLabel = "io.capdmp.images.inputs"
	// fallbackTimeout bounds the node script reaching its fallback message once the registry is
	// gone: a refused connection fails the pull at once.
	fallbackTimeout = 5 * time.Minute
)

// TestPublishedImages: hack/node-images/build.sh and hack/images/build.sh pull the images a list
// pins by digest from a registry on loopback, say so, build nothing and keep what they pulled on
// the next run; a pinned node image of another release is refused; with the registry gone, both
// say the pull failed and fall back to a build.
func TestPublishedImages(t *testing.T) {
	d := containertest.Engine(t) // fails without a Docker CLI or engine
	host := os.Getenv("DOCKER_HOST")
	containertest.EnsureBusyboxImage(t, d)
	reg := startRegistry(t, registryBinary(t))

	w := newWorld(t, host, reg.Addr)
	node := w.publish(t, "node", nodeVersion, map[string]string{"kind/version": nodeVersion + "\n"})
	otherNode := w.publish(t, "node", otherVersion, map[string]string{"kind/version": otherVersion + "\n"})
	lb := w.publish(t, "haproxy", "fake", map[string]string{"usr/local/etc/haproxy/haproxy.cfg": "# fake\n"})
	controller := w.publish(t, "capdmp-controller", "fake", map[string]string{"manager": "#!/bin/sh\necho fake manager\n"})

	dir := t.TempDir()
	nodeList := w.list(t, filepath.Join(dir, "node-images.txt"), nodeVersion, node, "load-balancer", lb)
	refusedList := w.list(t, filepath.Join(dir, "node-images-other-version.txt"), nodeVersion, otherNode, "load-balancer", lb)
	imagesList := w.list(t, filepath.Join(dir, "images.txt"), "capdmp", controller)

	nodeRepo := w.repo + "/node"
	nodeTag := nodeRepo + ":" + nodeVersion
	lbTag := w.repo + "/haproxy:published"
	nodeScript := w.script(filepath.Join("hack", "node-images", "build.sh"),
		"NODE_IMAGES_REPOSITORY="+nodeRepo, "NODE_IMAGES_LB_IMAGE="+lbTag,
		"NODE_IMAGES_PUBLISHED="+nodeList, "NODE_IMAGES_CACHE="+t.TempDir())
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow() // every step builds on the one before
		}
	}

	step("node and load balancer images are pulled by the pinned digests, nothing built", func(t *testing.T) {
		g := NewWithT(t)
		out, err := nodeScript.run(t, nodeVersion)
		g.Expect(err).NotTo(HaveOccurred())
		w.track(nodeTag, lbTag)
		g.Expect(out).To(ContainSubstring(fmt.Sprintf("%s: pulled %s (pinned in %s), image %s", nodeTag, node.ref, nodeList, strings.TrimPrefix(node.id, "sha256:"))))
		g.Expect(out).To(ContainSubstring(fmt.Sprintf("%s: pulled %s (pinned in %s), image %s", lbTag, lb.ref, nodeList, strings.TrimPrefix(lb.id, "sha256:"))))
		g.Expect(w.imageID(t, nodeTag)).To(Equal(node.id))
		g.Expect(w.imageID(t, lbTag)).To(Equal(lb.id))
		g.Expect(builtNothing(out)).To(Succeed())
	})

	step("a second node run uses the pulled images as they are, pulling nothing", func(t *testing.T) {
		g := NewWithT(t)
		out, err := nodeScript.run(t, nodeVersion)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(nodeTag + ": present, not built here (no recipe label): used as it is; version read from /kind/version: " + nodeVersion))
		g.Expect(out).To(ContainSubstring(lbTag + ": present, not built here (no recipe label): used as it is"))
		g.Expect(out).NotTo(ContainSubstring("pulling"))
		g.Expect(builtNothing(out)).To(Succeed())
		g.Expect(w.imageID(t, nodeTag)).To(Equal(node.id))
	})

	step("a pinned node image of another release is refused and not tagged", func(t *testing.T) {
		g := NewWithT(t)
		refusedTag := w.repo + "/refused:" + nodeVersion
		w.track(refusedTag)
		out, err := w.script(filepath.Join("hack", "node-images", "build.sh"),
			"NODE_IMAGES_REPOSITORY="+w.repo+"/refused", "NODE_IMAGES_LB_IMAGE="+lbTag,
			"NODE_IMAGES_PUBLISHED="+refusedList, "NODE_IMAGES_CACHE="+t.TempDir()).run(t, nodeVersion)
		g.Expect(err).To(HaveOccurred(), "the script must fail on a node image of another release")
		g.Expect(out).To(ContainSubstring(fmt.Sprintf("==> %s: pulling %s (pinned in %s)", refusedTag, otherNode.ref, refusedList)))
		g.Expect(out).To(ContainSubstring(fmt.Sprintf("pulled %s: its /kind/version names %s, not %s; not tagged", otherNode.ref, otherVersion, nodeVersion)))
		g.Expect(w.exists(t, refusedTag)).To(BeFalse(), "%s must not be tagged", refusedTag)
		g.Expect(builtNothing(out)).To(Succeed())
	})

	controllerTag := w.repo + "/capdmp-controller:published"
	imagesScript := w.script(filepath.Join("hack", "images", "build.sh"),
		"CAPDMP_IMG="+controllerTag, "IMAGES_PUBLISHED="+imagesList, "IMAGES_CACHE="+t.TempDir())
	step("a controller image is pulled by its pinned digest, nothing built", func(t *testing.T) {
		g := NewWithT(t)
		out, err := imagesScript.run(t, "capdmp")
		g.Expect(err).NotTo(HaveOccurred())
		w.track(controllerTag)
		g.Expect(out).To(ContainSubstring(fmt.Sprintf("%s: pulled %s (pinned in %s), image %s", controllerTag, controller.ref, imagesList, strings.TrimPrefix(controller.id, "sha256:"))))
		g.Expect(out).To(MatchRegexp(`(?m)^\[images\] +%s +\S+ +pulled %s$`, regexp.QuoteMeta(controllerTag), regexp.QuoteMeta(controller.ref)))
		g.Expect(w.imageID(t, controllerTag)).To(Equal(controller.id))
		g.Expect(builtNothing(out)).To(Succeed())
	})

	step("a second controller run uses the pulled image as it is, pulling nothing", func(t *testing.T) {
		g := NewWithT(t)
		out, err := imagesScript.run(t, "capdmp")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(controllerTag + ": present, not built here (no " + inputsLabel + " label): used as it is"))
		g.Expect(out).NotTo(ContainSubstring("pulling"))
		g.Expect(builtNothing(out)).To(Succeed())
	})

	reg.Stop(t)

	step("with the registry gone, the node script says the pull failed and goes on to build", func(t *testing.T) {
		g := NewWithT(t)
		fallbackTag := w.repo + "/fallback:" + nodeVersion
		w.track(fallbackTag)
		fallback := regexp.MustCompile(fmt.Sprintf(`%s: pull of %s failed after \d+s \(.+\): building it`, regexp.QuoteMeta(fallbackTag), regexp.QuoteMeta(node.ref)))
		// The build would take 20 minutes and more: the run is stopped at the message, before
		// any build step starts (a "==> " line that is no pull would be one).
		out, matched := w.script(filepath.Join("hack", "node-images", "build.sh"),
			"NODE_IMAGES_REPOSITORY="+w.repo+"/fallback", "NODE_IMAGES_LB_IMAGE="+lbTag,
			"NODE_IMAGES_PUBLISHED="+nodeList, "NODE_IMAGES_CACHE="+t.TempDir()).runUntil(t, fallback, nodeVersion)
		g.Expect(matched).To(BeTrue(), "the node script must say the pull failed and that it builds")
		g.Expect(out).To(ContainSubstring(fmt.Sprintf("==> %s: pulling %s (pinned in %s)", fallbackTag, node.ref, nodeList)))
		g.Expect(noBuildStep(out)).To(Succeed(), "stopped before any build step")
		g.Expect(w.exists(t, fallbackTag)).To(BeFalse())
	})

	step("with the registry gone, the controller script says the pull failed and builds the image", func(t *testing.T) {
		g := NewWithT(t)
		builtTag := w.repo + "/capdmp-controller:built"
		w.track(builtTag)
		out, err := w.script(filepath.Join("hack", "images", "build.sh"),
			"CAPDMP_IMG="+builtTag, "IMAGES_PUBLISHED="+imagesList, "IMAGES_CACHE="+t.TempDir()).run(t, "capdmp")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(MatchRegexp(`%s: pull of %s failed after \d+s \(.+\): building it`, regexp.QuoteMeta(builtTag), regexp.QuoteMeta(controller.ref)))
		g.Expect(out).To(ContainSubstring("==> " + builtTag + ": docker build"))
		g.Expect(out).To(ContainSubstring("==> " + builtTag + ": smoke test (--help)"))
		g.Expect(out).To(MatchRegexp(`(?m)^\[images\] +%s +\S+ +built in \d+s$`, regexp.QuoteMeta(builtTag)))
		g.Expect(w.label(t, builtTag, inputsLabel)).NotTo(BeEmpty(), "a built image carries its inputs label")
	})
}

// world is what one run of the test makes in the engine, all under names of its own: the
// loopback registry's repositories and capdmp.test/registry/<run>/..., removed at the end.
type world struct {
	host, registry, run string
	// repo is the prefix of the tags the scripts make: capdmp.test/registry/<run>.
	repo string
	// ids are the images the test built (each with runLabel); tags what the scripts tagged.
	ids, tags []string
}

// published is an image pushed to the loopback registry: its digest reference and image ID.
type published struct{ ref, id string }

func newWorld(t *testing.T, host, registryAddr string) *world {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	run := hex.EncodeToString(b)
	w := &world{host: host, registry: registryAddr, run: run, repo: "capdmp.test/registry/" + run}
	t.Cleanup(func() { w.clean(t) })
	return w
}

// docker runs the docker CLI on the engine; the test fails when it fails. Not on the test's
// context: the cleanup uses it too, after that context is canceled.
func (w *world) docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := dockerengine.Docker(context.Background(), w.host, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func (w *world) exists(t *testing.T, ref string) bool {
	t.Helper()
	_, err := dockerengine.Docker(context.Background(), w.host, nil, "image", "inspect", ref)
	return err == nil
}

func (w *world) imageID(t *testing.T, ref string) string {
	t.Helper()
	return w.docker(t, "image", "inspect", "-f", "{{.Id}}", ref)
}

func (w *world) label(t *testing.T, ref, label string) string {
	t.Helper()
	return w.docker(t, "image", "inspect", "-f", fmt.Sprintf("{{index .Config.Labels %q}}", label), ref)
}

// publish builds a published-style image (FROM the busybox test image, FILES added, no label of
// the scripts), pushes it as <registry>/capdmp-test/NAME:TAG, reads its digest and removes the
// local copy, so that the scripts must pull it.
func (w *world) publish(t *testing.T, name, tag string, files map[string]string) published {
	t.Helper()
	ctx := t.TempDir()
	dockerfile := []string{"FROM " + containertest.BusyboxImage}
	for path, content := range files {
		local := strings.ReplaceAll(path, "/", "_")
		if err := os.WriteFile(filepath.Join(ctx, local), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		dockerfile = append(dockerfile, fmt.Sprintf("COPY %s /%s", local, path))
	}
	dockerfile = append(dockerfile, fmt.Sprintf("LABEL %s=%s", runLabel, w.run))
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte(strings.Join(dockerfile, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	repo := w.registry + "/capdmp-test/" + name
	pushed := repo + ":" + tag
	w.docker(t, "build", "--pull=false", "-q", "-t", pushed, ctx)
	id := w.imageID(t, pushed)
	w.ids = append(w.ids, id)
	w.docker(t, "push", pushed)
	var ref string
	for _, digest := range strings.Fields(w.docker(t, "image", "inspect", "-f", "{{range .RepoDigests}}{{println .}}{{end}}", pushed)) {
		if strings.HasPrefix(digest, repo+"@sha256:") {
			ref = digest
		}
	}
	if ref == "" {
		t.Fatalf("no digest of %s after docker push", pushed)
	}
	w.docker(t, "rmi", pushed)
	if w.exists(t, id) {
		t.Fatalf("%s (%s) is still in the engine after docker rmi: the scripts would not need to pull it", pushed, id)
	}
	t.Logf("published %s as %s (image %s)", pushed, ref, id)
	return published{ref: ref, id: id}
}

// list writes a published list, KEY REFERENCE lines, as hack/node-images/published.txt has them.
func (w *world) list(t *testing.T, path string, pairs ...any) string {
	t.Helper()
	lines := []string{"# written by test/published for run " + w.run}
	for i := 0; i+1 < len(pairs); i += 2 {
		lines = append(lines, fmt.Sprintf("%s %s", pairs[i], pairs[i+1].(published).ref))
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// track records tags the scripts made, to be removed at the end.
func (w *world) track(tags ...string) { w.tags = append(w.tags, tags...) }

// clean removes the tags the scripts made and every image the test built, then fails when an
// image of this run is left.
func (w *world) clean(t *testing.T) {
	t.Helper()
	for _, tag := range w.tags {
		if w.exists(t, tag) {
			w.docker(t, "rmi", tag)
		}
	}
	for _, id := range w.ids {
		if w.exists(t, id) {
			w.docker(t, "rmi", "-f", id) // its digest references, pulled by the scripts
		}
	}
	if left := w.docker(t, "images", "-q", "--filter", "label="+runLabel+"="+w.run); left != "" {
		t.Errorf("images of run %s left in the engine: %s", w.run, left)
	}
	var left []string
	for _, ref := range strings.Fields(w.docker(t, "images", "--format", "{{.Repository}}:{{.Tag}}")) {
		if strings.HasPrefix(ref, w.repo+"/") || strings.HasPrefix(ref, w.registry+"/") {
			left = append(left, ref)
		}
	}
	if len(left) > 0 {
		t.Errorf("tags of run %s left in the engine: %v", w.run, left)
	}
}

// script is one of the repository's scripts with the environment the test gives it.
type script struct {
	path string
	env  []string
}

// script: PATH (relative to the repository) on the test's engine, pulling allowed, with ENV.
func (w *world) script(path string, env ...string) script {
	return script{
		path: filepath.Join(testenv.RepoRoot(), path),
		env:  append(os.Environ(), append([]string{"DOCKER_HOST=" + w.host, "CAPDMP_PULL=try", "CAPDMP_PULL_TIMEOUT=120"}, env...)...),
	}
}

func (s script) command(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), s.path, args...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = s.env
	// lib.sh's heartbeat leaves a `sleep` behind when its step ends, holding the output pipe for
	// up to a minute after the script exits; the script's own exit status is what counts.
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// run runs the script to its end and returns its output (logged too).
func (s script) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	start := time.Now()
	out, err := s.command(t, args...).CombinedOutput()
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // exit 0; only the heartbeat's sleep still held the pipe
	}
	t.Logf("%s %s: %v in %s; output:\n%s", s.rel(), strings.Join(args, " "), exitStatus(err), time.Since(start).Round(time.Millisecond), out)
	return string(out), err
}

// runUntil runs the script until a line of its output matches want, then kills its process group
// by the script's PID; also when a build step starts first or fallbackTimeout passes. It returns
// the output and whether want was seen.
func (s script) runUntil(t *testing.T, want *regexp.Regexp, args ...string) (string, bool) {
	t.Helper()
	start := time.Now()
	cmd := s.command(t, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = wr, wr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = wr.Close()
	pgid := cmd.Process.Pid
	stop := func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }
	timer := time.AfterFunc(fallbackTimeout, stop)
	defer timer.Stop()
	var out strings.Builder
	matched := false
	scanner := bufio.NewScanner(r)
	for scanner.Scan() {
		line := scanner.Text()
		out.WriteString(line + "\n")
		if matched {
			continue
		}
		switch {
		case want.MatchString(line):
			matched = true
			stop()
		case buildStep(line):
			stop()
		}
	}
	_ = r.Close()
	err = cmd.Wait()
	t.Logf("%s %s: %v in %s (stopped at the fallback message: %t); output:\n%s", s.rel(), strings.Join(args, " "), exitStatus(err), time.Since(start).Round(time.Millisecond), matched, out.String())
	return out.String(), matched
}

func (s script) rel() string {
	rel, err := filepath.Rel(testenv.RepoRoot(), s.path)
	if err != nil {
		return s.path
	}
	return rel
}

func exitStatus(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// buildStep: LINE starts a step of the scripts (lib.sh's step, "==> NAME") that is no pull.
func buildStep(line string) bool {
	return strings.Contains(line, "] ==> ") && !strings.Contains(line, ": pulling ")
}

// noBuildStep: the output has no build step.
func noBuildStep(out string) error {
	for line := range strings.SplitSeq(out, "\n") {
		if buildStep(line) {
			return fmt.Errorf("the script started a build step: %q", line)
		}
	}
	return nil
}

// builtNothing: the output has no build step and no fallback to a build.
func builtNothing(out string) error {
	if err := noBuildStep(out); err != nil {
		return err
	}
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasSuffix(line, ": building it") {
			return fmt.Errorf("the script set out to build: %q", line)
		}
	}
	return nil
}
