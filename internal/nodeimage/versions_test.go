package nodeimage_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/internal/nodeimage"
)

func TestVersionsRead(t *testing.T) {
	const ref = "kindest/node:v1.36.3"
	tests := []struct {
		name        string
		setup       func(rt *fakeruntime.Runtime)
		wantVersion string
		wantErr     error
		// wantCached is true when a second read reads no file again.
		wantCached bool
	}{
		{name: "kind's file, with its newline", setup: func(rt *fakeruntime.Runtime) { rt.SetImageFile(ref, nodeimage.VersionFile, []byte("v1.36.3\n")) },
			wantVersion: "v1.36.3", wantCached: true},
		{name: "another version than the tag: read as it is", setup: func(rt *fakeruntime.Runtime) { rt.SetImageFile(ref, nodeimage.VersionFile, []byte("v1.37.2")) },
			wantVersion: "v1.37.2", wantCached: true},
		{name: "no file", setup: func(rt *fakeruntime.Runtime) { rt.AddImage(ref) }, wantErr: nodeimage.ErrNoRecordedVersion, wantCached: true},
		{name: "not a version", setup: func(rt *fakeruntime.Runtime) { rt.SetImageFile(ref, nodeimage.VersionFile, []byte("latest")) },
			wantErr: nodeimage.ErrNoRecordedVersion, wantCached: true},
		{name: "no image", setup: func(*fakeruntime.Runtime) {}, wantErr: container.ErrImageNotFound},
		{name: "an engine error is not remembered", setup: func(rt *fakeruntime.Runtime) {
			rt.AddNodeImage(ref)
			rt.SetError("ReadImageFile", container.ErrEngineUnavailable)
		}, wantErr: container.ErrEngineUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rt := fakeruntime.New()
			tt.setup(rt)
			var versions nodeimage.Versions
			for range 2 {
				img, err := versions.Read(context.Background(), rt, ref)
				if tt.wantErr != nil {
					g.Expect(errors.Is(err, tt.wantErr)).To(BeTrue(), "%v", err)
				} else {
					g.Expect(err).ToNot(HaveOccurred())
					g.Expect(img.Version).To(Equal(tt.wantVersion))
					g.Expect(img.ID).To(HavePrefix("sha256:"))
				}
			}
			reads := rt.Calls()["ReadImageFile"]
			switch {
			case tt.wantErr == container.ErrImageNotFound:
				g.Expect(reads).To(BeZero())
			case tt.wantCached:
				g.Expect(reads).To(BeNumerically("==", 1))
			default:
				g.Expect(reads).To(BeNumerically("==", 2))
			}
		})
	}
}

func TestVersionsContradicted(t *testing.T) {
	g := NewWithT(t)
	var versions nodeimage.Versions
	g.Expect(versions.Contradicted("sha256:a")).To(BeEmpty())
	versions.Contradict("sha256:a", "Node n1 runs kubelet v1.37.2")
	versions.Contradict("sha256:a", "Node n2 runs kubelet v1.37.2")
	g.Expect(versions.Contradicted("sha256:a")).To(Equal("Node n1 runs kubelet v1.37.2"), "the first Node is the one named")
	g.Expect(versions.Contradicted("sha256:b")).To(BeEmpty())
}
