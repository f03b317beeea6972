// Package kubeversions holds the Kubernetes versions CAPDMP runs by default, read from
// versions.txt beside it, which the Makefile and the scripts read too: one place for all of them.
package kubeversions

import (
	_ "embed"
	"fmt"
	"strings"
)

//go:embed versions.txt
var versionsFile string

var (
	// Older is the blocking tier's and make run's first version, a pool's version before an
	// upgrade.
	Older = version("older")
	// Newer is the version the control plane and the pools are upgraded to.
	Newer = version("newer")
	// Oldest is the full tier's third version, one minor below Older.
	Oldest = version("oldest")
	// Envtest is the version of the envtest kube-apiserver.
	Envtest = version("envtest")
)

// Nodes are the node image versions, oldest first.
func Nodes() []string { return []string{Oldest, Older, Newer} }

// version returns the version versions.txt gives name; the file is part of the build, so a name
// missing there is a programming error.
func version(name string) string {
	for line := range strings.Lines(versionsFile) {
		fields := strings.Fields(line)
		if len(fields) == 2 && fields[0] == name {
			return fields[1]
		}
	}
	panic(fmt.Sprintf("internal/kubeversions/versions.txt names no %q version", name))
}
