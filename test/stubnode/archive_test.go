package stubnode

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestLayerFromDirIsReproducible(t *testing.T) {
	g := NewWithT(t)
	mk := func(mtime time.Time) layer {
		dir := t.TempDir()
		g.Expect(os.MkdirAll(filepath.Join(dir, "bin"), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(dir, "bin", "busybox"), []byte("elf"), 0o755)).To(Succeed())
		g.Expect(os.Symlink("busybox", filepath.Join(dir, "bin", "sh"))).To(Succeed())
		g.Expect(os.Chtimes(filepath.Join(dir, "bin", "busybox"), mtime, mtime)).To(Succeed())
		l, err := layerFromDir(dir)
		g.Expect(err).ToNot(HaveOccurred())
		return l
	}
	a, b := mk(time.Now()), mk(time.Now().Add(-time.Hour))
	g.Expect(a.diffID).To(Equal(b.diffID), "times and folder names do not change the layer")
	g.Expect(recipeOf(a)).To(HaveLen(16))
}

func TestImageArchive(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)).To(Succeed())
	base, err := layerFromDir(dir)
	g.Expect(err).ToNot(HaveOccurred())
	archive, err := imageArchive(base, "r", []imageSpec{{tag: Image("v1.30.13"), version: "v1.30.13"}, {tag: Image("1.31.9"), version: "v1.31.9"}})
	g.Expect(err).ToNot(HaveOccurred())

	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		g.Expect(err).ToNot(HaveOccurred())
		b, _ := io.ReadAll(tr)
		files[hdr.Name] = b
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	g.Expect(json.Unmarshal(files["manifest.json"], &manifest)).To(Succeed())
	g.Expect(manifest).To(HaveLen(2))
	g.Expect(manifest[1].RepoTags).To(Equal([]string{"kindest/node:v1.31.9"}))
	g.Expect(manifest[0].Layers[0]).To(Equal(manifest[1].Layers[0]), "the base layer is shared")
	var config struct {
		Config struct {
			Entrypoint []string
			StopSignal string
			Labels     map[string]string
		} `json:"config"`
	}
	g.Expect(json.Unmarshal(files[manifest[0].Config], &config)).To(Succeed())
	g.Expect(config.Config.Entrypoint).To(Equal([]string{"/sbin/init"}))
	g.Expect(config.Config.StopSignal).To(Equal("SIGRTMIN+3"))
	g.Expect(config.Config.Labels).To(HaveKeyWithValue(VersionLabel, "v1.30.13"))

	versionLayer := tar.NewReader(bytes.NewReader(files[manifest[0].Layers[1]]))
	var version []byte
	for {
		hdr, err := versionLayer.Next()
		if err == io.EOF {
			break
		}
		if hdr.Name == "kind/version" {
			version, _ = io.ReadAll(versionLayer)
		}
	}
	g.Expect(string(version)).To(Equal("v1.30.13\n"))
}
