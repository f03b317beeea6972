package fake

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container"
)

func TestRuntime(t *testing.T) {
	ctx := context.Background()
	const image = "kindest/node:v1.36.3"
	pool := map[string]string{"pool": "p1"}

	t.Run("Create requires the image and never pulls", func(t *testing.T) {
		g := NewWithT(t)
		r := New()
		_, err := r.Create(ctx, container.Spec{Name: "n1", Image: image})
		g.Expect(err).To(MatchError(container.ErrImageNotFound))
		g.Expect(err.Error()).To(ContainSubstring(image))
		r.AddImage(image)
		c, err := r.Create(ctx, container.Spec{Name: "n1", Image: image, Labels: pool})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(c.Running).To(BeTrue())
		g.Expect(c.ID).To(HaveLen(64))
		g.Expect(c.IPv4).ToNot(BeEmpty())
	})

	t.Run("Create twice with one name is ErrAlreadyExists", func(t *testing.T) {
		g := NewWithT(t)
		r := New(image)
		_, err := r.Create(ctx, container.Spec{Name: "n1", Image: image})
		g.Expect(err).ToNot(HaveOccurred())
		_, err = r.Create(ctx, container.Spec{Name: "n1", Image: image})
		g.Expect(err).To(MatchError(container.ErrAlreadyExists))
	})

	t.Run("Create needs an ensured network, host rejects a hostname", func(t *testing.T) {
		g := NewWithT(t)
		r := New(image)
		_, err := r.Create(ctx, container.Spec{Name: "n1", Image: image, Network: "kind"})
		g.Expect(err).To(MatchError(ContainSubstring(`network "kind" not found`)))
		g.Expect(r.EnsureNetwork(ctx, "kind")).To(Succeed())
		g.Expect(r.EnsureNetwork(ctx, "host")).To(Succeed())
		g.Expect(r.Networks()).To(Equal([]string{"kind"}))
		_, err = r.Create(ctx, container.Spec{Name: "n1", Image: image, Network: "kind"})
		g.Expect(err).ToNot(HaveOccurred())

		_, err = r.Create(ctx, container.Spec{Name: "n2", Image: image, Network: "host", Hostname: "n2"})
		g.Expect(err).To(HaveOccurred())
		c, err := r.Create(ctx, container.NodeSpec(container.NodeSpecInput{Name: "n2", Image: image, Network: "host"}))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(c.IPv4).To(BeEmpty())
	})

	t.Run("List matches all labels, sorted by name, and needs labels", func(t *testing.T) {
		g := NewWithT(t)
		r := New(image)
		for _, s := range []container.Spec{
			{Name: "b", Image: image, Labels: map[string]string{"pool": "p1", "cluster": "c1"}},
			{Name: "a", Image: image, Labels: map[string]string{"pool": "p1", "cluster": "c1", "x": "y"}},
			{Name: "c", Image: image, Labels: map[string]string{"pool": "p2", "cluster": "c1"}},
			{Name: "d", Image: image, Labels: map[string]string{"pool": "p1"}},
		} {
			_, err := r.Create(ctx, s)
			g.Expect(err).ToNot(HaveOccurred())
		}
		got, err := r.List(ctx, map[string]string{"pool": "p1", "cluster": "c1"})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(names(got)).To(Equal([]string{"a", "b"}))
		_, err = r.List(ctx, map[string]string{})
		g.Expect(err).To(HaveOccurred())

		// Returned containers are copies.
		got[0].Labels["pool"] = "changed"
		again, _ := r.List(ctx, map[string]string{"pool": "p1", "cluster": "c1"})
		g.Expect(names(again)).To(Equal([]string{"a", "b"}))
	})

	t.Run("Exec records calls and stdin, honours the handler and the running state", func(t *testing.T) {
		g := NewWithT(t)
		r := New(image)
		_, err := r.Create(ctx, container.Spec{Name: "n1", Image: image})
		g.Expect(err).ToNot(HaveOccurred())

		res, err := r.Exec(ctx, "n1", []string{"/bin/sh", "-c", "cat > /x"}, strings.NewReader("data"))
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(BeZero())

		r.ExecHandler = func(c container.Container, cmd []string, stdin []byte) (container.ExecResult, error) {
			if cmd[0] == "false" {
				return container.ExecResult{ExitCode: 1, Stderr: []byte("failed in " + c.Name)}, nil
			}
			return container.ExecResult{Stdout: stdin}, nil
		}
		res, err = r.Exec(ctx, "n1", []string{"false"}, nil)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(res.ExitCode).To(Equal(1))
		g.Expect(string(res.Stderr)).To(Equal("failed in n1"))

		g.Expect(r.Execs()).To(Equal([]ExecCall{
			{Container: "n1", Cmd: []string{"/bin/sh", "-c", "cat > /x"}, Stdin: []byte("data")},
			{Container: "n1", Cmd: []string{"false"}},
		}))

		_, err = r.Exec(ctx, "missing", []string{"true"}, nil)
		g.Expect(err).To(MatchError(container.ErrNotFound))
		g.Expect(r.SetRunning("n1", false)).To(Succeed())
		_, err = r.Exec(ctx, "n1", []string{"true"}, nil)
		g.Expect(err).To(MatchError(container.ErrNotRunning))
	})

	t.Run("Delete is idempotent and works by ID", func(t *testing.T) {
		g := NewWithT(t)
		r := New(image)
		c, err := r.Create(ctx, container.Spec{Name: "n1", Image: image})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(r.Delete(ctx, c.ID)).To(Succeed())
		g.Expect(r.Delete(ctx, "n1")).To(Succeed())
		g.Expect(r.Containers()).To(BeEmpty())
		_, err = r.Inspect(ctx, "n1")
		g.Expect(err).To(MatchError(container.ErrNotFound))
	})

	t.Run("Injected errors fail calls until cleared; calls are counted", func(t *testing.T) {
		g := NewWithT(t)
		r := New(image)
		boom := errors.New("engine down")
		r.SetError("List", boom)
		_, err := r.List(ctx, pool)
		g.Expect(err).To(MatchError(boom))
		r.SetError("List", nil)
		_, err = r.List(ctx, pool)
		g.Expect(err).ToNot(HaveOccurred())
		_, _ = r.ImageExists(ctx, image)
		g.Expect(r.Calls()).To(Equal(container.CallCounts{"List": 2, "ImageExists": 1}))
		r.ResetCalls()
		g.Expect(r.Calls().Total()).To(BeZero())
	})

	t.Run("Add and Spec expose state to tests", func(t *testing.T) {
		g := NewWithT(t)
		r := New(image)
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		r.Now = func() time.Time { return now }
		r.Add(container.Container{Name: "foreign", Labels: pool})
		got, err := r.List(ctx, pool)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(got).To(HaveLen(1))
		g.Expect(got[0].CreatedAt).To(Equal(now))

		spec := container.NodeSpec(container.NodeSpecInput{Name: "n1", Image: image, Labels: pool})
		_, err = r.Create(ctx, spec)
		g.Expect(err).ToNot(HaveOccurred())
		stored, ok := r.Spec("n1")
		g.Expect(ok).To(BeTrue())
		g.Expect(stored).To(Equal(spec))
	})

	t.Run("SaveImages needs every image", func(t *testing.T) {
		g := NewWithT(t)
		r := New(image)
		_, err := r.SaveImages(ctx, []string{image, "other:v1"})
		g.Expect(err).To(MatchError(container.ErrImageNotFound))
		rc, err := r.SaveImages(ctx, []string{image})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(rc.Close()).To(Succeed())
	})
}

func names(cs []container.Container) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}
