// Package hostpath decides which host paths a DockerMachinePool may mount into its containers.
//
// A node container is privileged, so a mount of the wrong host path makes whoever may create a
// pool root on the Docker host. The manager's operator lists the host paths pools may mount
// (the --allowed-host-paths flag); the host's root, its kernel interfaces and devices, and the
// container engines' sockets and state are never allowed, whatever the list says. The webhooks
// check a pool's extraMounts at admission and the controller again before it creates a container,
// both with one Policy.
package hostpath

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Flag is the manager flag that lists the host paths pools may mount. Errors name it so that the
// user who reads them knows what the operator would have to change.
const Flag = "allowed-host-paths"

// DefaultAllowed is what pools may mount when the operator lists nothing: no host path.
//
// No directory is safe on every host. The check is lexical (the manager runs beside the engine,
// not on the host's file system, and cannot resolve the host's symbolic links), and a pool that
// may write to an allowed directory, from a privileged container where it is root, can leave a
// symbolic link there to / and mount that link next. Which directories no pool can write to, or
// hold nothing worth protecting, only the host's operator knows.
var DefaultAllowed []string

// neverAllowed are host paths no pool may mount, nor anything below them ("/" only itself), nor
// any directory that contains them: the host's root, its kernel interfaces and devices, and the
// container engines' sockets and state. The Docker sockets are below /run and /var/run already;
// they are listed so that a refusal names them.
var neverAllowed = []string{
	"/", "/var/run/docker.sock", "/run/docker.sock",
	"/proc", "/sys", "/dev", "/boot", "/run", "/var/run", "/var/lib/docker", "/var/lib/containerd", "/var/lib/kubelet",
}

// Policy says which host paths pools may mount. The zero Policy is the default one
// (DefaultAllowed).
type Policy struct {
	allowed []string
}

// NewPolicy returns the policy that allows the host paths in allowed and everything below them,
// except what is never allowed. Each entry must be absolute and clean (as path.Clean writes it),
// and neither be nor be below a path that is never allowed.
func NewPolicy(allowed []string) (Policy, error) {
	var errs []error
	for _, entry := range allowed {
		switch {
		case !path.IsAbs(entry):
			errs = append(errs, fmt.Errorf("--%s entry %q is not an absolute path", Flag, entry))
		case path.Clean(entry) != entry:
			errs = append(errs, fmt.Errorf("--%s entry %q is not clean: write it %q", Flag, entry, path.Clean(entry)))
		default:
			if never, below := underNeverAllowed(entry); never != "" {
				errs = append(errs, fmt.Errorf("--%s entry %q %s, which no pool may mount: a node container is privileged, so this mount would give whoever may create a pool root on the Docker host",
					Flag, entry, relation(below, never)))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Policy{}, err
	}
	return Policy{allowed: slices.Clone(allowed)}, nil
}

// Allowed returns the host paths the policy allows, with everything below them.
func (p Policy) Allowed() []string {
	if p.allowed == nil {
		return slices.Clone(DefaultAllowed)
	}
	return slices.Clone(p.allowed)
}

// Check returns nil when a pool may mount hostPath, else an error that says why and, when the
// operator could allow it, which flag to change. hostPath is compared cleaned, as Docker does,
// after a path with a ".." element has been refused: a host's symbolic links could make one lead
// elsewhere than it reads.
func (p Policy) Check(hostPath string) error {
	if !path.IsAbs(hostPath) {
		return fmt.Errorf("host path %q is not an absolute path", hostPath)
	}
	if slices.Contains(strings.Split(hostPath, "/"), "..") {
		return fmt.Errorf("host path %q has a \"..\" element: write the path it means without one", hostPath)
	}
	cleaned := path.Clean(hostPath)
	if never, below := underNeverAllowed(cleaned); never != "" {
		return fmt.Errorf("host path %q %s, which no pool may mount whatever --%s says: a node container is privileged, so this mount would give whoever may create a pool root on the Docker host",
			hostPath, relation(below, never), Flag)
	}
	if never := containedNeverAllowed(cleaned); never != "" {
		return fmt.Errorf("host path %q contains %s, which no pool may mount whatever --%s says: a node container is privileged, so this mount would give whoever may create a pool root on the Docker host",
			hostPath, never, Flag)
	}
	allowed := p.Allowed()
	for _, a := range allowed {
		if atOrBelow(cleaned, a) {
			return nil
		}
	}
	if len(allowed) == 0 {
		return fmt.Errorf("host path %q is not allowed: the manager allows no host path (--%s is empty); a node container is privileged, so only the manager's operator may allow a host path, by adding it to --%s", hostPath, Flag, Flag)
	}
	return fmt.Errorf("host path %q is not at or below any of --%s=%s; a node container is privileged, so only the manager's operator may allow a host path, by adding it to --%s",
		hostPath, Flag, strings.Join(allowed, ","), Flag)
}

// underNeverAllowed returns the never-allowed path that p is or is below, "" when none, and
// whether p is below it rather than it.
func underNeverAllowed(p string) (never string, below bool) {
	for _, n := range neverAllowed {
		switch {
		case p == n:
			return n, false
		case n != "/" && atOrBelow(p, n):
			return n, true
		}
	}
	return "", false
}

// containedNeverAllowed returns a never-allowed path below p, "" when none: mounting p would
// mount it too.
func containedNeverAllowed(p string) string {
	for _, n := range neverAllowed {
		if n != p && atOrBelow(n, p) {
			return n
		}
	}
	return ""
}

// atOrBelow says whether the clean absolute path p is dir or below it.
func atOrBelow(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func relation(below bool, never string) string {
	if below {
		return "is below " + never
	}
	return "is " + never
}
