package nodeimage

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestParseReference(t *testing.T) {
	const hex = "a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"
	tests := []struct {
		name    string
		image   string
		want    string // the reference as the engine resolves it
		wantErr string
	}{
		{name: "a Docker Hub name alone", image: "nginx", want: "docker.io/library/nginx"},
		{name: "a tag", image: "nginx:1.27", want: "docker.io/library/nginx:1.27"},
		{name: "a Docker Hub organisation", image: "kindest/node:v1.36.3", want: "docker.io/kindest/node:v1.36.3"},
		{name: "a registry", image: "registry.k8s.io/pause:3.10", want: "registry.k8s.io/pause:3.10"},
		{name: "a registry with a port and no tag", image: "localhost:5000/app", want: "localhost:5000/app"},
		{name: "an IPv6 registry", image: "[::1]:5000/app:v1", want: "[::1]:5000/app:v1"},
		{name: "a digest", image: "busybox@sha256:" + hex, want: "docker.io/library/busybox@sha256:" + hex},
		{name: "a tag and a digest, as Cluster API pins kind's images", image: "kindest/node:v1.37.0@sha256:" + hex,
			want: "docker.io/kindest/node:v1.37.0@sha256:" + hex},
		{name: "a sha512 digest", image: "app@sha512:" + strings.Repeat("ab", 64), want: "docker.io/library/app@sha512:" + strings.Repeat("ab", 64)},
		{name: "empty", image: "", wantErr: "invalid reference format"},
		{name: "upper case in the repository", image: "Registry/UPPER:1", wantErr: "must be lowercase"},
		{name: "a space in the tag", image: "nginx:bad tag", wantErr: "invalid reference format"},
		{name: "an empty tag", image: "nginx:", wantErr: "invalid reference format"},
		{name: "a tag of 129 characters", image: "nginx:" + strings.Repeat("a", 129), wantErr: "invalid reference format"},
		{name: "an empty path component", image: "kindest//node:v1.36.3", wantErr: "invalid reference format"},
		{name: "a trailing newline", image: "nginx:1.27\n", wantErr: "invalid reference format"},
		{name: "an image ID alone", image: hex, wantErr: "an image ID, not a name"},
		{name: "an image ID with its algorithm", image: "sha256:" + hex, wantErr: "an image ID, not a name"},
		{name: "a digest algorithm the engine does not verify", image: "app@md5:0123456789abcdef0123456789abcdef", wantErr: "unsupported digest algorithm"},
		{name: "a sha256 digest of the wrong length", image: "app@sha256:" + hex[:63], wantErr: "invalid checksum digest length"},
		{name: "upper-case digest hex", image: "app@sha256:" + strings.ToUpper(hex), wantErr: "invalid checksum digest format"},
		{name: "a repository path of 255 characters", image: "example.com/" + strings.Repeat("a", 255), want: "example.com/" + strings.Repeat("a", 255)},
		{name: "a repository path of 256 characters", image: "example.com/" + strings.Repeat("a", 256), wantErr: "must not be more than 255 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ParseReference(tt.image)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(err.Error()).To(HavePrefix("%q is not a valid image reference", tt.image), "the error names the image")
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got.String()).To(Equal(tt.want))
		})
	}
}
