package nodeimage

import (
	"fmt"

	"github.com/distribution/reference"
)

// ParseReference is CAPDMP's one check of an image reference: of customImage (VersionOfImage
// calls it before it reads the tag) and of each preLoadImages entry, in the webhook and again in
// the controller before it hands them to the engine. It accepts what a container engine resolves
// by name, as CAPD and kind take their images: a repository with a tag, a digest or both, Docker
// Hub's domain and "library/" filled in ("nginx" is docker.io/library/nginx, tagged latest when
// the engine looks it up), a registry with a port, a repository path of at most 255 characters, a
// digest of an algorithm the engine verifies (sha256, sha384, sha512) in lower-case hex. It refuses an image ID alone (64 hex digits, with
// or without "sha256:"): an image loaded into a node's containerd, or run as a node, must have a
// name.
func ParseReference(image string) (reference.Named, error) {
	// "sha256:<hex>" would parse as a repository "sha256" tagged <hex>; an engine reads it as the
	// ID it is.
	if ref, err := reference.ParseAnyReference(image); err == nil {
		if _, named := ref.(reference.Named); !named {
			return nil, fmt.Errorf("%q is not a valid image reference: an image ID, not a name", image)
		}
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil, fmt.Errorf("%q is not a valid image reference: %w", image, err)
	}
	return named, nil
}
