package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"runtime/debug"
	"strings"
)

// Modules whose manifests (CRDs, webhook configurations) the plane installs. Their versions are
// the ones this program was built with.
const (
	clusterAPIModule     = "sigs.k8s.io/cluster-api"
	clusterAPITestModule = "sigs.k8s.io/cluster-api/test"
)

// moduleDir returns where the source of a module this program was built with lives in the Go
// module cache. A built binary knows its dependencies' versions from its build information and
// asks the go command for that version (downloading it when the cache lacks it); a test binary
// does not, and asks the go command of the module it runs in.
func moduleDir(path string) (string, error) {
	args := []string{"list", "-m", "-f", "{{.Dir}}", path}
	if version, ok := builtWith(path); ok {
		args = []string{"mod", "download", "-json", path + "@" + version}
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return "", fmt.Errorf("finding module %s with go %s: %w: %s", path, strings.Join(args, " "), err, exitErr.Stderr)
		}
		return "", fmt.Errorf("finding module %s with go %s: %w", path, strings.Join(args, " "), err)
	}
	if args[0] == "list" {
		return strings.TrimSpace(string(out)), nil
	}
	var downloaded struct{ Dir, Error string }
	if err := json.Unmarshal(out, &downloaded); err != nil {
		return "", fmt.Errorf("reading go mod download's answer for %s: %w", path, err)
	}
	if downloaded.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", path, downloaded.Error)
	}
	return downloaded.Dir, nil
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
