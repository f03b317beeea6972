// Package version is the version of the CAPDMP manager, set at build time as Cluster API's
// sigs.k8s.io/cluster-api/version is: hack/version.sh prints the -ldflags that set it, and make
// build, make docker-build and hack/images/build.sh pass them.
package version

import (
	"fmt"
	"runtime"
)

// Set with -ldflags "-X github.com/capdmp/capdmp/version.gitVersion=...": hack/version.sh.
var (
	gitVersion   string // semantic version: git describe of a v* tag, else a pseudo-version of the commit
	gitCommit    string // git rev-parse HEAD
	gitTreeState string // "clean" or "dirty"
	buildDate    string // ISO 8601, UTC: the commit's date unless SOURCE_DATE_EPOCH says otherwise
)

// unset is the version of a binary built without hack/version.sh's flags (go build, go test).
const unset = "v0.0.0-unset"

// Info is what the binary knows of its build.
type Info struct {
	GitVersion   string `json:"gitVersion,omitempty"`
	GitCommit    string `json:"gitCommit,omitempty"`
	GitTreeState string `json:"gitTreeState,omitempty"`
	BuildDate    string `json:"buildDate,omitempty"`
	GoVersion    string `json:"goVersion,omitempty"`
	Compiler     string `json:"compiler,omitempty"`
	Platform     string `json:"platform,omitempty"`
}

// Get returns the version of the running binary.
func Get() Info {
	return Info{
		GitVersion:   gitVersion,
		GitCommit:    gitCommit,
		GitTreeState: gitTreeState,
		BuildDate:    buildDate,
		GoVersion:    runtime.Version(),
		Compiler:     runtime.Compiler,
		Platform:     fmt.Sprintf("%s/%s", runtime.GOOS, runtime.GOARCH),
	}
}

// String is the version alone, v0.0.0-unset when the build did not set it.
func (info Info) String() string {
	if info.GitVersion == "" {
		return unset
	}
	return info.GitVersion
}

// Long is the version with what else the build recorded, on one line: what --version prints.
func (info Info) Long() string {
	return fmt.Sprintf("%s (git commit: %s, tree: %s, built: %s, %s %s)", info,
		orUnknown(info.GitCommit), orUnknown(info.GitTreeState), orUnknown(info.BuildDate), info.GoVersion, info.Platform)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
