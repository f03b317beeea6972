package nodeimage

import (
	"strings"
	"testing"

	"github.com/distribution/reference"
	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/pkg/skew"
)

func TestImageForVersion(t *testing.T) {
	tests := []struct {
		name        string
		version     string
		customImage string
		want        string
		wantErr     string
	}{
		{name: "a version kind published, by tag: a loaded image has no registry digest", version: "v1.37.0", want: "kindest/node:v1.37.0"},
		{name: "another published one", version: "v1.36.4", want: "kindest/node:v1.36.4"},
		{name: "an unpublished patch", version: "v1.36.3", want: "kindest/node:v1.36.3"},
		{name: "a version without v", version: "1.37.2", want: "kindest/node:v1.37.2"},
		{name: "pre-release", version: "v1.38.0-alpha.1", want: "kindest/node:v1.38.0-alpha.1"},
		{name: "build metadata is written with _", version: "v1.36.3+capdmp.1", want: "kindest/node:v1.36.3_capdmp.1"},
		{name: "a custom image wins", version: "v1.36.3", customImage: "capdmp.local/node:v1.36.3", want: "capdmp.local/node:v1.36.3"},
		{name: "a custom image needs no version", version: "", customImage: "capdmp.local/node:v1.36.3", want: "capdmp.local/node:v1.36.3"},
		{name: "a custom image with a registry port", version: "v1.36.3", customImage: "localhost:5000/node:v1.36.3", want: "localhost:5000/node:v1.36.3"},
		{name: "an invalid version", version: "one.two", wantErr: `invalid Kubernetes version "one.two"`},
		{name: "major.minor only: no guessed patch", version: "v1.37", wantErr: `invalid Kubernetes version "v1.37"`},
		{name: "a version with spaces", version: " v1.37.0", wantErr: "invalid Kubernetes version"},
		{name: "no version", version: "", wantErr: "invalid Kubernetes version"},
		{name: "a custom image is checked by VersionOfImage, not here", version: "v1.36.3", customImage: "Not/Valid:v1", want: "Not/Valid:v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ImageForVersion(tt.version, tt.customImage)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestPinnedImageForVersion(t *testing.T) {
	tests := []struct {
		version string
		want    string
		wantErr string
	}{
		{version: "v1.37.0", want: "kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"},
		{version: "1.36.4", want: "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"},
		{version: "v1.36.3", want: "kindest/node:v1.36.3"},
		{version: "x", wantErr: `invalid Kubernetes version "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			g := NewWithT(t)
			got, err := PinnedImageForVersion(tt.version)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
			// Both references name the same version.
			byTag, err := ImageForVersion(tt.version, "")
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got).To(HavePrefix(byTag))
		})
	}
}

func TestVersionOfImage(t *testing.T) {
	const digest = "@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"
	tests := []struct {
		image   string
		want    string
		wantErr string
	}{
		{image: "kindest/node:v1.36.3", want: "v1.36.3"},
		{image: "kindest/node:v1.37.0" + digest, want: "v1.37.0"},
		{image: "docker.io/kindest/node:v1.31.14", want: "v1.31.14"},
		{image: "localhost:5000/kindest/node:v1.36.3", want: "v1.36.3"},
		{image: "registry.example.com:443/team/nodes/node:v1.35.0-rc.1" + digest, want: "v1.35.0-rc.1"},
		{image: "capdmp.local/node:v1.36.3_capdmp.1", want: "v1.36.3+capdmp.1"},
		{image: "node:v1.36.3", want: "v1.36.3"},
		{image: "kindest/node", wantErr: "has no tag"},
		{image: "kindest/node" + digest, wantErr: "has no tag"},
		{image: "localhost:5000/node", wantErr: "has no tag"},
		{image: "kindest/node:latest", wantErr: `tag "latest" of image "kindest/node:latest" is not a Kubernetes version: expected v<major>.<minor>.<patch>`},
		{image: "kindest/node:1.36.3", wantErr: "expected v<major>.<minor>.<patch>"},
		{image: "kindest/node:v1.36", wantErr: "not a Kubernetes version"},
		{image: "kindest/node:v1.36.3.4", wantErr: "not a Kubernetes version"},
		{image: "kindest/node:vnext", wantErr: "not a Kubernetes version"},
		{image: "Kindest/Node:v1.36.3", wantErr: "not a valid image reference"},
		{image: "kindest/node:v1.36.3@md5:0123456789abcdef0123456789abcdef", wantErr: "not a valid image reference: unsupported digest algorithm"},
		{image: "sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5", wantErr: "an image ID, not a name"},
		{image: "capdmp.local/node:v1.36.3_" + strings.Repeat("a", 60), wantErr: "longer than the 63 characters a label value may have"},
		{image: "", wantErr: "no node image"},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			g := NewWithT(t)
			got, err := VersionOfImage(tt.image)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				if tt.image != "" {
					g.Expect(err.Error()).To(ContainSubstring(tt.image), "the error names the image")
				}
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestRoundTrip(t *testing.T) {
	for _, v := range []string{"v1.31.14", "v1.36.3", "v1.36.4", "v1.37.0", "v1.37.2", "v1.38.0-beta.0", "v1.36.3+capdmp.1"} {
		t.Run(v, func(t *testing.T) {
			g := NewWithT(t)
			image, err := ImageForVersion(v, "")
			g.Expect(err).ToNot(HaveOccurred())
			got, err := VersionOfImage(image)
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got).To(Equal(v))
		})
	}
}

// FuzzVersionOfImageMatchesEngine checks that pkg/skew's grammar, written out so that other
// providers need no container library, accepts exactly the references a container engine parses
// (github.com/distribution/reference) among those tagged with a version: an image the webhook
// admits is one Docker can run, and an image Docker can run is not refused for its spelling.
func FuzzVersionOfImageMatchesEngine(f *testing.F) {
	const digest = "@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"
	for _, image := range []string{
		"kindest/node:v1.36.3", "kindest/node:v1.37.0" + digest, "docker.io/kindest/node:v1.31.14",
		"index.docker.io/node:v1.31.14", "localhost:5000/kindest/node:v1.36.3", "localhost/node:v1.36.3",
		"[::1]:5000/kindest/node:v1.36.3", "127.0.0.1:5000/node:v1.36.3", "Registry.Example/node:v1.36.3",
		"registry.example.com:443/team/nodes/node:v1.35.0-rc.1" + digest, "capdmp.local/node:v1.36.3_capdmp.1",
		"node:v1.36.3", "kindest/node", "kindest/node" + digest, "localhost:5000", "kindest/node:1.36.3",
		"Kindest/Node:v1.36.3", "kindest/node:v1.36.3@md5:0123456789abcdef0123456789abcdef",
		"kindest/node:v1.36.3@sha256:" + strings.Repeat("AB", 32), "kindest/node:v1.36.3@sha384:" + strings.Repeat("ab", 48),
		"kindest/node:v1.36.3@sha512:" + strings.Repeat("ab", 64), "kindest/node:v1.36.3@sha512:" + strings.Repeat("ab", 32),
		strings.Repeat("a", 247) + ":v1.36.3", strings.Repeat("a", 248) + ":v1.36.3",
		"example.com/" + strings.Repeat("a", 255) + ":v1.36.3", "example.com/" + strings.Repeat("a", 256) + ":v1.36.3",
		"docker.io/" + strings.Repeat("a", 248) + ":v1.36.3", "a/" + strings.Repeat("b", 253) + ":v1.36.3",
		"kindest/node:v1.36.3_" + strings.Repeat("a", 60), "kindest//node:v1.36.3", "kindest/node:v1.36.3\n",
	} {
		f.Add(image)
	}
	f.Fuzz(func(t *testing.T, image string) {
		got, err := VersionOfImage(image)
		want, engineAccepts := engineVersion(image)
		if (err == nil) != engineAccepts || got != want {
			t.Fatalf("VersionOfImage(%q) = %q, %v; the engine's reference parser reads %q (accepted: %v)", image, got, err, want, engineAccepts)
		}
	})
}

// engineVersion reads image as a container engine does, and its tag as the version rule does.
func engineVersion(image string) (string, bool) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", false
	}
	tagged, ok := named.(reference.Tagged)
	if !ok || !strings.HasPrefix(tagged.Tag(), "v") {
		return "", false
	}
	version, err := skew.CanonicalVersion(strings.ReplaceAll(tagged.Tag(), "_", "+"))
	if err != nil {
		return "", false
	}
	if _, err := skew.VersionLabelValue(version); err != nil {
		return "", false
	}
	return version, true
}
