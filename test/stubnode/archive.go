package stubnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"
)

// archiveFormat changes whenever the image configuration written below changes: it is part of
// the recipe.
const archiveFormat = "capdmp-nodeimage/1"

// epoch is the modification time of every file and the creation time of every image, so that the
// same inputs give the same layers and image IDs.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// layer is an uncompressed layer tarball and its digest (the diff ID).
type layer struct {
	tar    []byte
	diffID string // "sha256:<hex>"
}

func newLayer(b []byte) layer {
	sum := sha256.Sum256(b)
	return layer{tar: b, diffID: "sha256:" + hex.EncodeToString(sum[:])}
}

func (l layer) hex() string { return l.diffID[len("sha256:"):] }

// recipeOf is the recipe label's value: what the image holds besides its version.
func recipeOf(base layer) string {
	sum := sha256.Sum256([]byte(archiveFormat + "\n" + base.diffID))
	return hex.EncodeToString(sum[:])[:16]
}

// layerFromDir tars dir's tree (folders, regular files, symlinks) with root ownership and fixed
// times, in name order.
func layerFromDir(dir string) (layer, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return layer{}, err
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return layer{}, err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Mode: int64(fi.Mode().Perm()), Format: tar.FormatPAX}
		if fi.Mode()&os.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		var content []byte
		switch {
		case fi.IsDir():
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case fi.Mode()&os.ModeSymlink != 0:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return layer{}, err
			}
		case fi.Mode().IsRegular():
			hdr.Typeflag = tar.TypeReg
			if content, err = os.ReadFile(p); err != nil {
				return layer{}, err
			}
			hdr.Size = int64(len(content))
		default:
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return layer{}, err
		}
		if _, err := tw.Write(content); err != nil {
			return layer{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return layer{}, err
	}
	return newLayer(buf.Bytes()), nil
}

// versionLayer holds /kind/version, as kindest/node records its Kubernetes version.
func versionLayer(version string) (layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	content := []byte(version + "\n")
	for _, hdr := range []*tar.Header{
		{Name: "kind/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX},
		{Name: "kind/version", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content)), ModTime: epoch, Format: tar.FormatPAX},
	} {
		if err := tw.WriteHeader(hdr); err != nil {
			return layer{}, err
		}
	}
	if _, err := tw.Write(content); err != nil {
		return layer{}, err
	}
	if err := tw.Close(); err != nil {
		return layer{}, err
	}
	return newLayer(buf.Bytes()), nil
}

type imageSpec struct {
	tag     string
	version string
}

// imageArchive assembles a `docker save`-format archive holding one image per spec: the shared
// base layer, then the version layer; the configuration mirrors kindest/node's entrypoint and
// stop signal.
func imageArchive(base layer, recipe string, images []imageSpec) ([]byte, error) {
	type manifestEntry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := add(base.hex()+"/layer.tar", base.tar); err != nil {
		return nil, err
	}
	var manifest []manifestEntry
	for _, img := range images {
		vl, err := versionLayer(img.version)
		if err != nil {
			return nil, err
		}
		config := map[string]any{
			"architecture": runtime.GOARCH,
			"os":           "linux",
			"created":      epoch.Format(time.RFC3339),
			"config": map[string]any{
				"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "container=docker"},
				"Entrypoint": []string{"/sbin/init"},
				"StopSignal": "SIGRTMIN+3",
				"Labels":     map[string]string{RecipeLabel: recipe, VersionLabel: img.version},
			},
			"rootfs": map[string]any{"type": "layers", "diff_ids": []string{base.diffID, vl.diffID}},
			"history": []map[string]string{
				{"created": epoch.Format(time.RFC3339), "created_by": "test/stubnode: busybox-static, stub kubeadm, init"},
				{"created": epoch.Format(time.RFC3339), "created_by": "test/stubnode: /kind/version " + img.version},
			},
		}
		cb, err := json.Marshal(config)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(cb)
		configName := hex.EncodeToString(sum[:]) + ".json"
		if err := add(configName, cb); err != nil {
			return nil, err
		}
		if err := add(vl.hex()+"/layer.tar", vl.tar); err != nil {
			return nil, err
		}
		manifest = append(manifest, manifestEntry{Config: configName, RepoTags: []string{img.tag}, Layers: []string{base.hex() + "/layer.tar", vl.hex() + "/layer.tar"}})
	}
	mb, err := json.Marshal(manifest)
	if err != nil {
		return nil, err
	}
	if err := add("manifest.json", mb); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
