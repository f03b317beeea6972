package container_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/container/containertest"
)

// buildImage builds tag FROM the busybox test image, which has no CMD, with a kind-style
// /kind/version, a symlink to it, a directory and a file one byte over MaxImageFile.
func buildImage(t *testing.T, tag, version string) {
	t.Helper()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	for p, content := range map[string]string{
		"kind/version":   version,
		"kind/dir/empty": "",
		"big":            strings.Repeat("x", container.MaxImageFile+1),
	} {
		if err := os.MkdirAll(filepath.Join(rootfs, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rootfs, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("version", filepath.Join(rootfs, "kind", "link")); err != nil {
		t.Fatal(err)
	}
	dockerfile := "FROM " + testImage + "\nCOPY rootfs/ /\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("docker", "build", "--pull=false", "-t", tag, dir)
	// The classic builder, as containertest does: BuildKit may be missing from Debian's docker.io.
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v: %s", tag, err, out)
	}
}

func dockerImageID(t *testing.T, image string) string {
	t.Helper()
	out, err := exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", image).CombinedOutput()
	if err != nil {
		t.Fatalf("docker image inspect %s: %v: %s", image, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestDockerImageIntegration(t *testing.T) {
	d := containertest.Engine(t)
	containertest.EnsureBusyboxImage(t, d)
	ctx := context.Background()

	run := randomSuffix(t)
	runLabel := map[string]string{"capdmp.test/run": run}
	image := "capdmp.local/image-reader:it-" + run
	other := "capdmp.local/image-reader:it-" + run + "-other"
	missing := "capdmp.local/does-not-exist:v0.0.0-" + run
	buildImage(t, image, "v1.36.3\n")
	buildImage(t, other, "v1.35.1\n")
	imageID, otherID := dockerImageID(t, image), dockerImageID(t, other)
	t.Cleanup(func() {
		// Leave nothing behind on a shared engine, whatever failed.
		if cs, err := d.List(ctx, runLabel); err == nil {
			for _, c := range cs {
				_ = d.Delete(ctx, c.Name)
			}
		}
		_ = exec.Command("docker", "rmi", "-f", image, other, imageID, otherID).Run()
	})

	// readersLeft lists the reader containers of this test's images still on the engine; other
	// tests may read images of their own at the same time.
	readersLeft := func(g Gomega) []string {
		readers, err := d.List(ctx, map[string]string{container.ImageReaderLabel: "true"})
		g.Expect(err).ToNot(HaveOccurred())
		var left []string
		for _, c := range readers {
			if c.ImageID == imageID || c.ImageID == otherID || strings.Contains(c.Image, run) {
				left = append(left, c.Name)
			}
		}
		return left
	}
	// A read first lists the readers left behind (none here).
	readCalls := container.CallCounts{"ContainerList": 1, "ContainerCreate": 1, "CopyFromContainer": 1, "ContainerRemove": 1}

	t.Run("ImageID", func(t *testing.T) {
		tests := []struct {
			name    string
			image   string
			want    string
			wantErr error
		}{
			{name: "by reference", image: image, want: imageID},
			{name: "of another image", image: other, want: otherID},
			{name: "by ID", image: imageID, want: imageID},
			{name: "missing image, not pulled", image: missing, wantErr: container.ErrImageNotFound},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := NewWithT(t)
				d.ResetCalls()
				got, err := d.ImageID(ctx, tt.image)
				g.Expect(d.Calls()).To(Equal(container.CallCounts{"ImageInspect": 1}))
				if tt.wantErr != nil {
					g.Expect(err).To(MatchError(tt.wantErr))
					g.Expect(err.Error()).To(ContainSubstring(tt.image))
					return
				}
				g.Expect(err).ToNot(HaveOccurred())
				g.Expect(got).To(Equal(tt.want))
				g.Expect(got).To(HavePrefix("sha256:"))
			})
		}
	})

	t.Run("ReadImageFile", func(t *testing.T) {
		// A first read removes what earlier runs on this engine left behind, which the counts
		// below do not expect.
		_, err := d.ReadImageFile(ctx, image, "/kind/version")
		NewWithT(t).Expect(err).ToNot(HaveOccurred())
		tests := []struct {
			name string
			// image is the reference to read; empty means the ID of the test image.
			image     string
			path      string
			want      string
			wantErr   error
			wantMsg   string
			wantCalls container.CallCounts
		}{
			{name: "kind's version file", image: image, path: "/kind/version", want: "v1.36.3\n", wantCalls: readCalls},
			{name: "by image ID", path: "/kind/version", want: "v1.36.3\n", wantCalls: readCalls},
			{name: "of another image", image: other, path: "/kind/version", want: "v1.35.1\n", wantCalls: readCalls},
			{name: "an empty file", image: image, path: "/kind/dir/empty", want: "", wantCalls: readCalls},
			{name: "a path to clean", image: image, path: "/kind/dir/../version", want: "v1.36.3\n", wantCalls: readCalls},
			{name: "missing file", image: image, path: "/kind/nope", wantErr: container.ErrFileNotFound, wantCalls: readCalls},
			{name: "missing directory", image: image, path: "/nope/version", wantErr: container.ErrFileNotFound, wantCalls: readCalls},
			{name: "missing image, not pulled", image: missing, path: "/kind/version", wantErr: container.ErrImageNotFound,
				wantCalls: container.CallCounts{"ContainerList": 1, "ContainerCreate": 1, "ContainerRemove": 1}},
			{name: "a symlink is not followed", image: image, path: "/kind/link", wantMsg: `symbolic link to "version"`, wantCalls: readCalls},
			{name: "a directory", image: image, path: "/kind/dir", wantMsg: "not a regular file", wantCalls: readCalls},
			{name: "a file over MaxImageFile", image: image, path: "/big", wantMsg: "more than", wantCalls: readCalls},
			{name: "a relative path", image: image, path: "kind/version", wantMsg: "absolute path", wantCalls: container.CallCounts{}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := NewWithT(t)
				ref := tt.image
				if ref == "" {
					ref = imageID
				}
				d.ResetCalls()
				got, err := d.ReadImageFile(ctx, ref, tt.path)
				g.Expect(d.Calls()).To(Equal(tt.wantCalls))
				g.Expect(readersLeft(g)).To(BeEmpty(), "the reader container is removed")
				switch {
				case tt.wantErr != nil:
					g.Expect(err).To(MatchError(tt.wantErr))
				case tt.wantMsg != "":
					g.Expect(err).To(MatchError(ContainSubstring(tt.wantMsg)))
					g.Expect(err).ToNot(MatchError(container.ErrFileNotFound))
				default:
					g.Expect(err).ToNot(HaveOccurred())
					g.Expect(string(got)).To(Equal(tt.want))
				}
			})
		}

		g := NewWithT(t)
		exists, err := d.ImageExists(ctx, missing)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(exists).To(BeFalse(), "the image must not have been pulled")
	})

	t.Run("ReadImageFile with a cancelled context leaves no container behind", func(t *testing.T) {
		g := NewWithT(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := d.ReadImageFile(cctx, image, "/kind/version")
		g.Expect(err).To(MatchError(context.Canceled))
		g.Expect(readersLeft(g)).To(BeEmpty())
	})

	t.Run("a reader container left behind is removed by a later read", func(t *testing.T) {
		g := NewWithT(t)
		// As a read whose removal failed with the engine leaves it: created, never started.
		leftover := "capdmp-image-reader-leftover-" + run
		out, err := exec.Command("docker", "create", "--name", leftover, "--network", "none",
			"--label", container.ImageReaderLabel+"=true", "--label", "capdmp.test/run="+run,
			"--entrypoint", "/nonexistent", image).CombinedOutput()
		g.Expect(err).ToNot(HaveOccurred(), string(out))
		// Long enough that no read of another test sharing the engine is taken for one left behind.
		const staleAge = 10 * time.Second
		d.StaleImageReaderAge = staleAge
		t.Cleanup(func() { d.StaleImageReaderAge = 0 })

		_, err = d.ReadImageFile(ctx, image, "/kind/version")
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(readersLeft(g)).To(ConsistOf(leftover), "younger than the stale age: kept")

		g.Eventually(func(g Gomega) {
			_, err := d.ReadImageFile(ctx, image, "/kind/version")
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(readersLeft(g)).To(BeEmpty())
		}, 3*staleAge, time.Second).Should(Succeed())
	})

	t.Run("ReadImageFile in parallel", func(t *testing.T) {
		g := NewWithT(t)
		var wg sync.WaitGroup
		got := make([]string, 4)
		errs := make([]error, len(got))
		for i := range got {
			wg.Go(func() {
				content, err := d.ReadImageFile(ctx, image, "/kind/version")
				got[i], errs[i] = string(content), err
			})
		}
		wg.Wait()
		for i := range got {
			g.Expect(errs[i]).ToNot(HaveOccurred())
			g.Expect(got[i]).To(Equal("v1.36.3\n"))
		}
		g.Expect(readersLeft(g)).To(BeEmpty())
	})

	t.Run("List and Inspect report the image ID of a container, also after its tag moved", func(t *testing.T) {
		g := NewWithT(t)
		created, err := d.Create(ctx, container.Spec{Name: "capdmp-it-" + run + "-image", Image: image, Labels: runLabel, Cmd: []string{"/bin/sleep", "3600"}})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(created.ImageID).To(Equal(imageID))

		out, err := exec.Command("docker", "tag", other, image).CombinedOutput()
		g.Expect(err).ToNot(HaveOccurred(), string(out))
		moved, err := d.ImageID(ctx, image)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(moved).To(Equal(otherID), "the tag moved to the other image")

		listed, err := d.List(ctx, runLabel)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(listed).To(HaveLen(1))
		g.Expect(listed[0].ImageID).To(Equal(imageID))
		inspected, err := d.Inspect(ctx, created.Name)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(inspected.Image).To(Equal(image))
		g.Expect(inspected.ImageID).To(Equal(imageID))

		// The image the container runs is still read by its ID.
		content, err := d.ReadImageFile(ctx, listed[0].ImageID, "/kind/version")
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(string(content)).To(Equal("v1.36.3\n"))
		content, err = d.ReadImageFile(ctx, image, "/kind/version")
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(string(content)).To(Equal("v1.35.1\n"))
		g.Expect(d.Delete(ctx, created.Name)).To(Succeed())
	})
}
