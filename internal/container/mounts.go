package container

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// ErrNotBindable is the error of a mount path that cannot be written in a bind, which the engine
// would read otherwise than it is written.
var ErrNotBindable = errors.New("a path with \":\" cannot be mounted")

// hiddenNodePaths are container paths where an extra mount would hide what a node needs: its
// root, its kernel interfaces and kind's files. Nothing may be mounted on them nor below them
// ("/" only itself).
var hiddenNodePaths = []string{"/", "/proc", "/sys", "/dev", "/kind"}

// CheckExtraMountSource returns why hostPath cannot be the source of an extra mount of a node
// container, nil when it can. It checks how the path can be given to the engine, not whether a
// pool may mount it: that is the manager's policy, internal/hostpath.
func CheckExtraMountSource(hostPath string) error {
	return bindablePath("host path", hostPath)
}

// CheckExtraMountTarget returns why containerPath cannot be the target of an extra mount of a
// node container (NodeSpec's ExtraMounts), nil when it can: a path the engine would read otherwise
// than it is written, one that would hide what the node needs, or one where every node mounts
// something of its own. Paths are compared cleaned, as the engine does.
func CheckExtraMountTarget(containerPath string) error {
	if err := bindablePath("container path", containerPath); err != nil {
		return err
	}
	cleaned := path.Clean(containerPath)
	for _, hidden := range hiddenNodePaths {
		switch {
		case cleaned == hidden:
			return fmt.Errorf("container path %q is %s: the node's init, kernel interfaces and kind's files live there", containerPath, hidden)
		case hidden != "/" && strings.HasPrefix(cleaned, hidden+"/"):
			return fmt.Errorf("container path %q is below %s: the node's init, kernel interfaces and kind's files live there", containerPath, hidden)
		}
	}
	if own := nodeMountAt(cleaned); own != "" {
		return fmt.Errorf("container path %q is where every node container mounts %s", containerPath, own)
	}
	return nil
}

// nodeMountAt says what every node container mounts at the clean path p, and what a second mount
// there would do, "" when it mounts nothing there. It reads NodeSpec, so that the answer follows
// what nodes are given.
func nodeMountAt(p string) string {
	node := NodeSpec(NodeSpecInput{})
	if _, ok := node.Tmpfs[p]; ok {
		return "a tmpfs of its own; the engine refuses a second mount on one path"
	}
	for _, m := range node.Mounts {
		if m.Target == p {
			return fmt.Sprintf("the host's %s; the engine refuses a second mount on one path", m.Source)
		}
	}
	if slices.Contains(node.Volumes, p) {
		// The engine lets a bind replace a volume: the node's state would go to the host path,
		// shared by every container of the pool and left behind when they go.
		return "a volume of its own for its state (pods, images, logs), which a mount there would replace"
	}
	return ""
}

// bindablePath returns why p cannot be written in a bind ("source:target[:options]", the form
// with which the engine creates a missing host path), nil when it can. The engine reads the
// first ":" as the end of the path, so no quoting keeps a path with one whole: such a path is
// refused, never rewritten.
func bindablePath(what, p string) error {
	if strings.Contains(p, ":") {
		return fmt.Errorf("%s %q contains \":\", which the engine reads as the end of the path and the start of the next part of the mount: %w", what, p, ErrNotBindable)
	}
	return nil
}
