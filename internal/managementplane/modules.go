package managementplane

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"

	"golang.org/x/mod/module"
)

// Modules whose manifests (CRDs, webhook configurations) the plane installs. Their versions are
// the ones this program was built with.
const (
	clusterAPIModule     = "sigs.k8s.io/cluster-api"
	clusterAPITestModule = "sigs.k8s.io/cluster-api/test"
)

// moduleDir returns where the source of a module this program was built with lives in the Go
// module cache. A built binary knows its dependencies' versions from its build information; a test
// binary does not, and asks the go command of the module it runs in.
func moduleDir(path string) (string, error) {
	if version, ok := builtWith(path); ok {
		escaped, err := module.EscapePath(path)
		if err != nil {
			return "", err
		}
		dir := filepath.Join(moduleCache(), escaped+"@"+version)
		if _, err := os.Stat(dir); err != nil {
			return "", fmt.Errorf("the source of %s@%s is not in the module cache (%w): run `go mod download %s@%s`", path, version, err, path, version)
		}
		return dir, nil
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", path).Output() //nolint:gosec,noctx // a module path of this file's constants; go list -m answers at once
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return "", fmt.Errorf("finding module %s with go list -m: %w: %s", path, err, exitErr.Stderr)
		}
		return "", fmt.Errorf("finding module %s with go list -m: %w", path, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// builtWith returns the version of module path in this program's build information.
func builtWith(path string) (string, bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", false
	}
	for _, dep := range info.Deps {
		if dep.Path != path {
			continue
		}
		if dep.Replace != nil {
			return dep.Replace.Version, dep.Replace.Version != ""
		}
		return dep.Version, true
	}
	return "", false
}

// moduleCache is the Go module cache as the go command finds it, without running it.
func moduleCache() string {
	if dir := os.Getenv("GOMODCACHE"); dir != "" {
		return dir
	}
	if gopath := os.Getenv("GOPATH"); gopath != "" {
		return filepath.Join(filepath.SplitList(gopath)[0], "pkg", "mod")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, "go", "pkg", "mod")
}
