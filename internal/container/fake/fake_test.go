package fake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
		g.Expect(r.EnsureNetwork(ctx, "kind")).To(Equal(container.Network{Name: "kind", Subnets: []string{FakeSubnet}}))
		g.Expect(r.EnsureNetwork(ctx, "host")).To(Equal(container.Network{Name: "host"}))
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

	t.Run("Host reports the default machine until a test sets another", func(t *testing.T) {
		g := NewWithT(t)
		r := New()
		h, err := r.Host(ctx)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(h).To(Equal(DefaultHost))
		arm := container.Host{CPUs: 8, MemoryBytes: 16 << 30, Architecture: "aarch64", OSType: "linux"}
		r.SetHost(arm)
		h, err = r.Host(ctx)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(h).To(Equal(arm))
		boom := errors.New("engine down")
		r.SetError("Host", boom)
		_, err = r.Host(ctx)
		g.Expect(err).To(MatchError(boom))
		g.Expect(r.Calls()).To(Equal(container.CallCounts{"Host": 3}))
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

func TestImages(t *testing.T) {
	ctx := context.Background()
	const (
		node    = "kindest/node:v1.36.3"
		latest  = "kindest/node:latest"
		older   = "kindest/node:v1.35.1"
		version = "/kind/version"
	)
	defaultID := func(ref string) string {
		sum := sha256.Sum256([]byte(ref))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	// setup gives node a /kind/version, older another one, and tags latest as node.
	setup := func(g Gomega) *Runtime {
		r := New()
		r.SetImageFile(node, version, []byte("v1.36.3\n"))
		r.SetImageFile(older, version, []byte("v1.35.1\n"))
		r.AddImage("scratch:v1")
		g.Expect(r.TagImage(node, latest)).To(Succeed())
		return r
	}

	t.Run("ImageID", func(t *testing.T) {
		tests := []struct {
			name    string
			image   string
			want    string
			wantErr error
		}{
			{name: "by reference, deterministic", image: node, want: defaultID(node)},
			{name: "an image added without files", image: "scratch:v1", want: defaultID("scratch:v1")},
			{name: "a tag has the ID of its source", image: latest, want: defaultID(node)},
			{name: "by ID", image: defaultID(older), want: defaultID(older)},
			{name: "missing image", image: "kindest/node:v9.9.9", wantErr: container.ErrImageNotFound},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := NewWithT(t)
				r := setup(g)
				got, err := r.ImageID(ctx, tt.image)
				if tt.wantErr != nil {
					g.Expect(err).To(MatchError(tt.wantErr))
					g.Expect(err.Error()).To(ContainSubstring(tt.image))
					return
				}
				g.Expect(err).ToNot(HaveOccurred())
				g.Expect(got).To(Equal(tt.want))
			})
		}
	})

	t.Run("ReadImageFile", func(t *testing.T) {
		tests := []struct {
			name    string
			image   string
			path    string
			want    string
			wantErr error
		}{
			{name: "found", image: node, path: version, want: "v1.36.3\n"},
			{name: "found through a tag", image: latest, path: version, want: "v1.36.3\n"},
			{name: "found by ID", image: defaultID(older), path: version, want: "v1.35.1\n"},
			{name: "path cleaned as the engine does", image: node, path: "/kind//./version", want: "v1.36.3\n"},
			{name: "file missing", image: node, path: "/kind/missing", wantErr: container.ErrFileNotFound},
			{name: "image without files", image: "scratch:v1", path: version, wantErr: container.ErrFileNotFound},
			{name: "image missing", image: "kindest/node:v9.9.9", path: version, wantErr: container.ErrImageNotFound},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := NewWithT(t)
				r := setup(g)
				got, err := r.ReadImageFile(ctx, tt.image, tt.path)
				if tt.wantErr != nil {
					g.Expect(err).To(MatchError(tt.wantErr))
					return
				}
				g.Expect(err).ToNot(HaveOccurred())
				g.Expect(string(got)).To(Equal(tt.want))
			})
		}
	})

	t.Run("ReadImageFile refuses a relative path and a file over MaxImageFile", func(t *testing.T) {
		g := NewWithT(t)
		r := setup(g)
		_, err := r.ReadImageFile(ctx, node, "kind/version")
		g.Expect(err).To(MatchError(ContainSubstring("absolute path")))
		r.SetImageFile(node, "/big", make([]byte, container.MaxImageFile+1))
		_, err = r.ReadImageFile(ctx, node, "/big")
		g.Expect(err).To(MatchError(ContainSubstring("more than")))
		g.Expect(err).ToNot(MatchError(container.ErrFileNotFound))
	})

	t.Run("ReadImageFile returns a copy", func(t *testing.T) {
		g := NewWithT(t)
		r := setup(g)
		got, err := r.ReadImageFile(ctx, node, version)
		g.Expect(err).ToNot(HaveOccurred())
		got[0] = 'x'
		again, err := r.ReadImageFile(ctx, node, version)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(string(again)).To(Equal("v1.36.3\n"))
	})

	t.Run("TagImage moves a tag to another image, its files follow", func(t *testing.T) {
		g := NewWithT(t)
		r := setup(g)
		g.Expect(r.TagImage(older, latest)).To(Succeed())
		id, err := r.ImageID(ctx, latest)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(id).To(Equal(defaultID(older)))
		got, err := r.ReadImageFile(ctx, latest, version)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(string(got)).To(Equal("v1.35.1\n"))
		// The source keeps its own.
		id, err = r.ImageID(ctx, node)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(id).To(Equal(defaultID(node)))

		g.Expect(r.TagImage("kindest/node:v9.9.9", latest)).To(MatchError(container.ErrImageNotFound))
		// Removing a tag leaves the image under its other references.
		r.RemoveImage(latest)
		_, err = r.ImageID(ctx, latest)
		g.Expect(err).To(MatchError(container.ErrImageNotFound))
		_, err = r.ImageID(ctx, older)
		g.Expect(err).ToNot(HaveOccurred())
	})

	t.Run("SetImageID changes the ID of every reference to the image", func(t *testing.T) {
		g := NewWithT(t)
		r := setup(g)
		r.SetImageID(node, "sha256:1234")
		for _, ref := range []string{node, latest, "sha256:1234"} {
			id, err := r.ImageID(ctx, ref)
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(id).To(Equal("sha256:1234"))
		}
	})

	t.Run("Created containers carry the ID of their image, whatever its tag becomes", func(t *testing.T) {
		g := NewWithT(t)
		r := setup(g)
		c, err := r.Create(ctx, container.Spec{Name: "n1", Image: latest, Labels: map[string]string{"pool": "p1"}})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(c.ImageID).To(Equal(defaultID(node)))
		g.Expect(r.TagImage(older, latest)).To(Succeed())

		inspected, err := r.Inspect(ctx, "n1")
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(inspected.Image).To(Equal(latest))
		g.Expect(inspected.ImageID).To(Equal(defaultID(node)))
		listed, err := r.List(ctx, map[string]string{"pool": "p1"})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(listed).To(HaveLen(1))
		g.Expect(listed[0].ImageID).To(Equal(defaultID(node)))

		byID, err := r.Create(ctx, container.Spec{Name: "n2", Image: defaultID(older)})
		g.Expect(err).ToNot(HaveOccurred(), "the engine creates containers of an image given by ID")
		g.Expect(byID.ImageID).To(Equal(defaultID(older)))
	})

	t.Run("Calls are counted by method and errors injected by method", func(t *testing.T) {
		g := NewWithT(t)
		r := setup(g)
		r.ResetCalls()
		_, _ = r.ImageID(ctx, node)
		_, _ = r.ReadImageFile(ctx, node, version)
		g.Expect(r.Calls()).To(Equal(container.CallCounts{"ImageID": 1, "ReadImageFile": 1}))
		boom := errors.New("engine down")
		r.SetError("ReadImageFile", boom)
		_, err := r.ReadImageFile(ctx, node, version)
		g.Expect(err).To(MatchError(boom))
		r.SetError("ImageID", boom)
		_, err = r.ImageID(ctx, node)
		g.Expect(err).To(MatchError(boom))
	})
}

func names(cs []container.Container) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}
