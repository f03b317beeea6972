package version

import (
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
)

func TestInfo(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	tests := []struct {
		name     string
		info     Info
		wantLong string
		wantStr  string
	}{
		{
			name:     "set by hack/version.sh",
			info:     Info{GitVersion: "v0.1.0", GitCommit: "0123abc", GitTreeState: "clean", BuildDate: "2026-12-02T11:45:00Z", GoVersion: "go1.26.0", Platform: platform},
			wantStr:  "v0.1.0",
			wantLong: "v0.1.0 (git commit: 0123abc, tree: clean, built: 2026-12-02T11:45:00Z, go1.26.0 " + platform + ")",
		},
		{
			name:     "plain go build",
			info:     Info{GoVersion: "go1.26.0", Platform: platform},
			wantStr:  "v0.0.0-unset",
			wantLong: "v0.0.0-unset (git commit: unknown, tree: unknown, built: unknown, go1.26.0 " + platform + ")",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tt.info.String()).To(Equal(tt.wantStr))
			g.Expect(tt.info.Long()).To(Equal(tt.wantLong))
		})
	}
}

func TestGet(t *testing.T) {
	g := NewWithT(t)
	info := Get()
	// go test sets no -ldflags.
	g.Expect(info.GitVersion).To(BeEmpty())
	g.Expect(info.GoVersion).To(Equal(runtime.Version()))
	g.Expect(info.Platform).To(Equal(runtime.GOOS + "/" + runtime.GOARCH))
}
