package nodeimage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/skew"
)

// VersionFile is where a kind-style node image records the Kubernetes version it holds, as
// kind's node image build writes it ("v1.36.3").
const VersionFile = "/kind/version"

// ErrNoRecordedVersion is returned for an image whose content does not say which Kubernetes
// version it holds: no VersionFile, or one that is not a version.
var ErrNoRecordedVersion = errors.New("the image records no Kubernetes version")

// ImageReader is what reading an image's version needs of a container engine.
type ImageReader interface {
	ImageID(ctx context.Context, image string) (string, error)
	ReadImageFile(ctx context.Context, image, path string) ([]byte, error)
}

// Image is a node image as its content describes it.
type Image struct {
	// ID is the image's ID on the engine: the content, whatever its tags say.
	ID string
	// Version is the Kubernetes version the image's VersionFile records, in canonical form.
	Version string
}

// Versions reads the Kubernetes version node images hold from their content, once per image ID:
// the content under an ID never changes, so a tag that moves to another image is read again and
// a tag that stays costs one image inspect. It also remembers the images a running Node showed to
// hold another version than their content said. The zero value is ready to use.
type Versions struct {
	mu sync.Mutex
	// read holds each image ID's version, or the ErrNoRecordedVersion error it gave.
	read map[string]readVersion
	// contradicted says, by image ID, which Node contradicted the image.
	contradicted map[string]string
}

type readVersion struct {
	version string
	err     error
}

// Read returns the ID and the recorded Kubernetes version of image (a reference or an ID). An
// absent image is container.ErrImageNotFound; an image that records no version,
// ErrNoRecordedVersion. Nothing is pulled and nothing of the image runs.
func (v *Versions) Read(ctx context.Context, engine ImageReader, image string) (Image, error) {
	id, err := engine.ImageID(ctx, image)
	if err != nil {
		return Image{}, fmt.Errorf("failed to look up image %s: %w", image, err)
	}
	v.mu.Lock()
	cached, ok := v.read[id]
	v.mu.Unlock()
	if !ok {
		cached = readVersionFile(ctx, engine, image, id)
		if cached.err != nil && !errors.Is(cached.err, ErrNoRecordedVersion) {
			return Image{ID: id}, cached.err
		}
		v.mu.Lock()
		if v.read == nil {
			v.read = map[string]readVersion{}
		}
		v.read[id] = cached
		v.mu.Unlock()
	}
	return Image{ID: id, Version: cached.version}, cached.err
}

func readVersionFile(ctx context.Context, engine ImageReader, image, id string) readVersion {
	content, err := engine.ReadImageFile(ctx, id, VersionFile)
	switch {
	case errors.Is(err, container.ErrFileNotFound):
		return readVersion{err: fmt.Errorf("%w: image %s has no %s", ErrNoRecordedVersion, image, VersionFile)}
	case err != nil:
		return readVersion{err: fmt.Errorf("failed to read %s of image %s: %w", VersionFile, image, err)}
	}
	version, err := skew.CanonicalVersion(strings.TrimSpace(string(content)))
	if err != nil {
		return readVersion{err: fmt.Errorf("%w: %s of image %s: %w", ErrNoRecordedVersion, VersionFile, image, err)}
	}
	return readVersion{version: version}
}

// Contradict records that a running Node showed the image of id to hold another version than it
// was used as; why says which Node.
func (v *Versions) Contradict(id, why string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.contradicted == nil {
		v.contradicted = map[string]string{}
	}
	if _, ok := v.contradicted[id]; !ok {
		v.contradicted[id] = why
	}
}

// Contradicted says why the image of id was contradicted by a Node, "" when it was not.
func (v *Versions) Contradicted(id string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.contradicted[id]
}
