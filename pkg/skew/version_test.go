package skew

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

const sha256Digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseVersion(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string // canonical form; empty when an error is expected
		wantErr bool
	}{
		{name: "with v", in: "v1.33.1", want: "v1.33.1"},
		{name: "without v", in: "1.33.1", want: "v1.33.1"},
		{name: "pre-release", in: "v1.37.0-beta.0", want: "v1.37.0-beta.0"},
		{name: "build metadata", in: "v1.33.1+k3s1", want: "v1.33.1+k3s1"},
		{name: "pre-release and build metadata", in: "1.34.0-rc.1+abc.2", want: "v1.34.0-rc.1+abc.2"},
		{name: "zero version", in: "v0.0.0", want: "v0.0.0"},
		{name: "empty", in: "", wantErr: true},
		{name: "only v", in: "v", wantErr: true},
		{name: "major.minor only", in: "v1.33", wantErr: true},
		{name: "major only", in: "1", wantErr: true},
		{name: "two v", in: "vv1.33.1", wantErr: true},
		{name: "capital V", in: "V1.33.1", wantErr: true},
		{name: "leading space", in: " v1.33.1", wantErr: true},
		{name: "trailing newline", in: "v1.33.1\n", wantErr: true},
		{name: "leading zero", in: "v1.033.1", wantErr: true},
		{name: "four parts", in: "v1.33.1.2", wantErr: true},
		{name: "empty pre-release", in: "v1.33.1-", wantErr: true},
		{name: "empty build metadata", in: "v1.33.1+", wantErr: true},
		{name: "underscore for build metadata", in: "v1.33.1_k3s1", wantErr: true},
		{name: "numeric pre-release with leading zero", in: "v1.33.1-01", wantErr: true},
		{name: "overflowing minor", in: "v1.99999999999999999999.0", wantErr: true},
		{name: "negative minor", in: "v1.-1.0", wantErr: true},
		{name: "latest", in: "latest", wantErr: true},
		{name: "stable label", in: "stable-1.33", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			v, err := ParseVersion(tt.in)
			canonical, canonicalErr := CanonicalVersion(tt.in)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				g.Expect(canonicalErr).To(HaveOccurred())
				g.Expect(canonical).To(BeEmpty())
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(canonicalErr).ToNot(HaveOccurred())
			g.Expect("v" + v.String()).To(Equal(tt.want))
			g.Expect(canonical).To(Equal(tt.want))
		})
	}
}

func TestVersionLabelValue(t *testing.T) {
	tests := []struct {
		name    string
		version string
		want    string
		wantErr bool
	}{
		{name: "plain", version: "v1.33.1", want: "v1.33.1"},
		{name: "adds the v", version: "1.33.1", want: "v1.33.1"},
		{name: "pre-release", version: "v1.37.0-beta.0", want: "v1.37.0-beta.0"},
		{name: "build metadata joined with underscore", version: "v1.33.1+k3s1", want: "v1.33.1_k3s1"},
		{name: "63 characters", version: "v1.33.1-" + strings.Repeat("a", 55), want: "v1.33.1-" + strings.Repeat("a", 55)},
		{name: "64 characters", version: "v1.33.1-" + strings.Repeat("a", 56), wantErr: true},
		{name: "not a version", version: "v1.33", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			got, err := VersionLabelValue(tt.version)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))

			back, err := VersionFromLabelValue(got)
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(back).To(Equal(mustCanonical(tt.version)))
		})
	}
}

func TestVersionFromLabelValue(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    string
		wantErr bool
	}{
		{name: "plain", value: "v1.33.1", want: "v1.33.1"},
		{name: "without v", value: "1.33.1", want: "v1.33.1"},
		{name: "build metadata", value: "v1.33.1_k3s1", want: "v1.33.1+k3s1"},
		{name: "plus is not a label character", value: "v1.33.1+k3s1", wantErr: true},
		{name: "two underscores", value: "v1.33.1_a_b", wantErr: true},
		{name: "empty", value: "", wantErr: true},
		{name: "too long", value: "v1.33.1-" + strings.Repeat("a", 56), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			got, err := VersionFromLabelValue(tt.value)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestVersionFromImageTag(t *testing.T) {
	tests := []struct {
		name    string
		image   string
		want    string
		wantErr string // substring of the error; empty when none is expected
	}{
		{name: "docker hub short name", image: "kindest/node:v1.33.1", want: "v1.33.1"},
		{name: "single path component", image: "node:v1.33.1", want: "v1.33.1"},
		{name: "registry host", image: "registry.k8s.io/kindest/node:v1.34.0", want: "v1.34.0"},
		{name: "registry with port", image: "localhost:5000/kindest/node:v1.33.1", want: "v1.33.1"},
		{name: "IP registry with port", image: "127.0.0.1:5000/kindest/node:v1.33.1", want: "v1.33.1"},
		{name: "IPv6 registry with port", image: "[::1]:5000/kindest/node:v1.33.1", want: "v1.33.1"},
		{name: "tag and digest", image: "kindest/node:v1.33.1@" + sha256Digest, want: "v1.33.1"},
		{name: "port, tag and digest", image: "localhost:5000/kindest/node:v1.33.1@" + sha256Digest, want: "v1.33.1"},
		{name: "pre-release tag", image: "kindest/node:v1.37.0-beta.0", want: "v1.37.0-beta.0"},
		{name: "build metadata after underscore", image: "example.com/k3s:v1.33.1_k3s1", want: "v1.33.1+k3s1"},
		{name: "separators in path", image: "my-registry.example/team__x/node.image-x:v1.33.1", want: "v1.33.1"},
		{name: "sha512 digest", image: "kindest/node:v1.33.1@sha512:" + strings.Repeat("ab", 64), want: "v1.33.1"},
		{name: "sha384 digest", image: "kindest/node:v1.33.1@sha384:" + strings.Repeat("ab", 48), want: "v1.33.1"},
		{name: "upper-case registry host", image: "Registry.Example/node:v1.33.1", want: "v1.33.1"},
		{name: "path of 255 characters under a registry", image: "example.com/" + strings.Repeat("a", 255) + ":v1.33.1", want: "v1.33.1"},

		{name: "no tag", image: "kindest/node", wantErr: "has no tag"},
		{name: "port is not a tag", image: "localhost:5000/kindest/node", wantErr: "has no tag"},
		{name: "digest only", image: "kindest/node@" + sha256Digest, wantErr: "has no tag"},
		{name: "tag without v", image: "example.com/node:1.33.1", wantErr: `tag "1.33.1" of image "example.com/node:1.33.1" is not a Kubernetes version: expected v<major>.<minor>.<patch>`},
		{name: "tag with capital V", image: "kindest/node:V1.33.1", wantErr: "not a Kubernetes version"},
		{name: "two v", image: "kindest/node:vv1.33.1", wantErr: "not a Kubernetes version"},
		{name: "latest", image: "kindest/node:latest", wantErr: "not a Kubernetes version"},
		{name: "major.minor tag", image: "kindest/node:v1.33", wantErr: "not a Kubernetes version"},
		{name: "bare port-like tag", image: "localhost:5000", wantErr: "not a Kubernetes version"},
		{name: "empty", image: "", wantErr: "not a valid image reference"},
		{name: "empty tag", image: "kindest/node:", wantErr: "not a valid image reference"},
		{name: "upper-case repository", image: "kindest/Node:v1.33.1", wantErr: "not a valid image reference"},
		{name: "space", image: "kindest/node :v1.33.1", wantErr: "not a valid image reference"},
		{name: "trailing newline", image: "kindest/node:v1.33.1\n", wantErr: "not a valid image reference"},
		{name: "two tags", image: "kindest/node:v1.33.1:v1.34.0", wantErr: "not a valid image reference"},
		{name: "scheme", image: "https://registry.example/node:v1.33.1", wantErr: "not a valid image reference"},
		{name: "double slash", image: "registry.example//node:v1.33.1", wantErr: "not a valid image reference"},
		{name: "short digest", image: "kindest/node:v1.33.1@sha256:0123456789abcdef0123456789abcdef", wantErr: "expected 64"},
		{name: "short sha384 digest", image: "kindest/node:v1.33.1@sha384:" + strings.Repeat("ab", 32), wantErr: "expected 96"},
		{name: "upper-case hex digest", image: "kindest/node:v1.33.1@sha256:" + strings.Repeat("AB", 32), wantErr: "lower-case hex"},
		{name: "digest algorithm an engine cannot verify", image: "kindest/node:v1.33.1@md5:" + strings.Repeat("ab", 16), wantErr: `digest algorithm "md5"`},
		{name: "Docker Hub path over 255 with library/", image: strings.Repeat("a", 250) + ":v1.33.1", wantErr: "longer than 255"},
		{name: "non-hex digest", image: "kindest/node:v1.33.1@sha256:" + strings.Repeat("z", 64), wantErr: "not a valid image reference"},
		{name: "empty digest", image: "kindest/node:v1.33.1@", wantErr: "not a valid image reference"},
		{name: "plus in tag", image: "kindest/node:v1.33.1+k3s1", wantErr: "not a valid image reference"},
		{name: "tag longer than 128", image: "node:v1.33.1-" + strings.Repeat("a", 121), wantErr: "not a valid image reference"},
		{name: "path longer than 255", image: "example.com/" + strings.Repeat("a", 256) + ":v1.33.1", wantErr: "longer than 255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			got, err := VersionFromImageTag(tt.image)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(got).To(BeEmpty())
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

// versionSeeds are the fuzz seeds shared by the parsing fuzz tests; they run under plain go test.
var versionSeeds = []string{
	"v1.33.1", "1.33.1", "v1.37.0-beta.0", "v1.33.1+k3s1", "v1.34.0-rc.1+abc.2", "v0.0.0",
	"", "v", "v1.33", "vv1.33.1", "V1.33.1", " v1.33.1", "v1.033.1", "v1.33.1-", "v1.33.1+",
	"v1.33.1_k3s1", "v1.33.1-01", "v1.99999999999999999999.0", "v1.33.1-a..b", "v1.33.1+a+b",
	"v1.33.1-\x00", "v1.33.1-é", "latest",
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range versionSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		canonical, canonicalErr := CanonicalVersion(s)
		if (err == nil) != (canonicalErr == nil) {
			t.Fatalf("ParseVersion and CanonicalVersion disagree on %q: %v, %v", s, err, canonicalErr)
		}
		if err != nil {
			return
		}
		// Nothing is normalised away: an accepted version is exactly its canonical form, with or
		// without the "v". This is what rejects whitespace, leading zeros and short versions.
		if canonical != "v"+strings.TrimPrefix(s, "v") {
			t.Fatalf("%q accepted as %q: not a round trip", s, canonical)
		}
		if "v"+v.String() != canonical {
			t.Fatalf("ParseVersion(%q) = %q, CanonicalVersion = %q", s, v.String(), canonical)
		}
		again, err := ParseVersion(canonical)
		if err != nil || !again.Equals(v) {
			t.Fatalf("canonical %q does not parse back to %q: %v", canonical, v, err)
		}
		if strings.ContainsAny(s, "_ \t\n") {
			t.Fatalf("%q accepted with a character no version has", s)
		}

		label, err := VersionLabelValue(s)
		if err != nil {
			if len(strings.ReplaceAll(canonical, "+", "_")) <= maxLabelValueLength {
				t.Fatalf("VersionLabelValue(%q) failed on a short version: %v", s, err)
			}
			return
		}
		if strings.Contains(label, "+") || len(label) > maxLabelValueLength {
			t.Fatalf("VersionLabelValue(%q) = %q is not a label value", s, label)
		}
		back, err := VersionFromLabelValue(label)
		if err != nil || back != canonical {
			t.Fatalf("label %q of %q reads back as %q, %v", label, canonical, back, err)
		}
	})
}

func FuzzVersionFromImageTag(f *testing.F) {
	for _, image := range []string{
		"kindest/node:v1.33.1", "node:1.33.1", "localhost:5000/kindest/node:v1.33.1",
		"[::1]:5000/kindest/node:v1.33.1", "kindest/node:v1.33.1@" + sha256Digest,
		"example.com/k3s:v1.33.1_k3s1", "kindest/node:v1.37.0-beta.0", "kindest/node",
		"localhost:5000/kindest/node", "kindest/node@" + sha256Digest, "kindest/node:latest",
		"localhost:5000", "kindest/node:", "kindest/Node:v1.33.1", "kindest/node:v1.33.1:v1.34.0",
		"kindest/node:v1.33.1@sha256:0123", "a/b:v1.33.1_a_b", "a:v1.33.1\n", "",
	} {
		f.Add(image)
	}
	for _, s := range versionSeeds {
		f.Add("kindest/node:" + s)
	}
	f.Fuzz(func(t *testing.T, image string) {
		version, err := VersionFromImageTag(image)
		if err != nil {
			if version != "" {
				t.Fatalf("VersionFromImageTag(%q) returned %q with error %v", image, version, err)
			}
			return
		}
		// The result is a canonical version that came from the tag, written the way image tags
		// write it: "v" first, "_" for "+".
		if canonical, err := CanonicalVersion(version); err != nil || canonical != version {
			t.Fatalf("VersionFromImageTag(%q) = %q is not canonical (%q, %v)", image, version, canonical, err)
		}
		tag := strings.ReplaceAll(version, "+", "_")
		name, _, _ := strings.Cut(image, "@")
		if !strings.HasSuffix(name, ":"+tag) {
			t.Fatalf("VersionFromImageTag(%q) = %q, which is not its tag", image, version)
		}
		if strings.ContainsAny(image, " \t\n\r\x00") || strings.Contains(name, "+") {
			t.Fatalf("VersionFromImageTag accepted %q, which no image reference contains", image)
		}
		// The same tag on another valid name reads the same.
		if again, err := VersionFromImageTag("example.com:5000/node:" + tag); err != nil || again != version {
			t.Fatalf("tag %q reads as %q, %v on another image", tag, again, err)
		}
	})
}

func mustCanonical(s string) string {
	c, err := CanonicalVersion(s)
	if err != nil {
		panic(err)
	}
	return c
}

func TestSameRelease(t *testing.T) {
	tests := []struct {
		name    string
		a, b    string
		want    bool
		wantErr bool
	}{
		{name: "equal", a: "v1.37.0", b: "v1.37.0", want: true},
		{name: "v prefix", a: "1.37.0", b: "v1.37.0", want: true},
		{name: "build metadata is ignored", a: "v1.37.0+build.1", b: "v1.37.0", want: true},
		{name: "two builds of one release", a: "v1.33.1+k3s1", b: "v1.33.1+k3s2", want: true},
		{name: "pre-release counts", a: "v1.37.0-rc.1", b: "v1.37.0"},
		{name: "patch counts", a: "v1.37.1", b: "v1.37.0"},
		{name: "invalid", a: "v1.37", b: "v1.37.0", wantErr: true},
		{name: "empty", a: "v1.37.0", b: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := SameRelease(tt.a, tt.b)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}
