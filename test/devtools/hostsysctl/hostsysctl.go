// Package hostsysctl records the host's kernel settings that real Kubernetes nodes in containers
// change or need, and puts them back. The kubelet writes a few sysctls no container namespace
// isolates, and many nodes on one host need more inotify instances than Debian's default.
//
// A run that is killed cannot restore what it changed. The values first recorded are therefore
// also written to a state file, removed on Restore; the next run that finds it takes the values
// from there instead of reading settings the killed run left behind. While the run that wrote the
// file is alive, a second run leaves the file to it.
package hostsysctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// KubeletChanged are the kernel settings the kubelet sets that no container namespace isolates.
var KubeletChanged = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

// InotifyForManyNodes are the inotify limits raised while many nodes run, as kind's known-issues
// page asks: the limits are per user across the host, and every node's systemd, kubelet and
// containerd take instances. With 128 instances a dozen nodes exhaust them, and a kubelet that
// cannot watch /etc/kubernetes/manifests starts its static pods minutes late.
var InotifyForManyNodes = map[string]int{
	"fs/inotify/max_user_instances": 8192,
	"fs/inotify/max_user_watches":   524288,
}

// Host is where the settings live; tests point Root at a folder of their own.
type Host struct {
	// Root is the sysctl tree, /proc/sys on a real host.
	Root string
	// StateFile keeps the recorded values until Restore; empty keeps them in memory only.
	StateFile string
	// Logf reports each change; nil is silent.
	Logf func(format string, args ...any)
}

// Snapshot is what Record found, to be put back by Restore.
type Snapshot struct {
	host   Host
	values map[string]string
	// ownsState is false when another live run owns the state file.
	ownsState bool
}

// state is the state file's content.
type state struct {
	PID    int               `json:"pid"`
	Values map[string]string `json:"values"`
}

// DefaultStateFile is the state file under the user's cache folder (CAPDMP_CACHE if set).
func DefaultStateFile() string {
	dir := os.Getenv("CAPDMP_CACHE")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(cache, "capdmp")
	}
	return filepath.Join(dir, "host-sysctls.json")
}

// Record reads the settings in keep and raises each setting of raise that is lower than asked.
// Restore puts back both. Values a killed earlier run recorded in the state file win over what
// the host shows now.
func (h Host) Record(keep []string, raise map[string]int) (*Snapshot, error) {
	s := &Snapshot{host: h, values: map[string]string{}, ownsState: h.StateFile != ""}
	left, err := h.readState()
	if err != nil {
		return nil, err
	}
	if left != nil && left.PID != os.Getpid() && processAlive(left.PID) {
		h.logf("Sysctls are recorded by process %d, which still runs; it restores them", left.PID)
		s.ownsState = false
		left = nil
	}
	for _, name := range keep {
		v, err := h.read(name)
		if err != nil {
			return nil, err
		}
		s.values[name] = v
	}
	// From here on the host may change: a setting that cannot be read or raised is reported and
	// skipped, so that what was changed is always recorded.
	for _, name := range slices.Sorted(maps.Keys(raise)) {
		current, err := h.read(name)
		if err != nil {
			h.logf("Not raising sysctl %s: %v", dotted(name), err)
			continue
		}
		if n, err := strconv.Atoi(current); err == nil && n >= raise[name] {
			continue
		}
		if err := h.write(name, strconv.Itoa(raise[name])); err != nil {
			h.logf("Raising sysctl %s to %d: %v (nodes may start slowly)", dotted(name), raise[name], err)
			continue
		}
		s.values[name] = current
		h.logf("Raised sysctl %s from %s to %d while running", dotted(name), current, raise[name])
	}
	if left != nil {
		for _, name := range slices.Sorted(maps.Keys(left.Values)) {
			h.logf("Sysctl %s=%s was recorded by a run that did not restore it", dotted(name), left.Values[name])
			s.values[name] = left.Values[name]
		}
	}
	if s.ownsState {
		if err := h.writeState(state{PID: os.Getpid(), Values: s.values}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Restore writes back every recorded value that differs from the host's and removes the state
// file once all are back.
func (s *Snapshot) Restore() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(s.values)) {
		want := s.values[name]
		if current, err := s.host.read(name); err == nil && current == want {
			continue
		}
		if err := s.host.write(name, want); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", dotted(name), want, err))
			continue
		}
		s.host.logf("Restored sysctl %s=%s", dotted(name), want)
	}
	if len(errs) == 0 && s.ownsState {
		if err := os.Remove(s.host.StateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (h Host) read(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(h.root(), name))
	if err != nil {
		return "", fmt.Errorf("reading sysctl %s: %w", dotted(name), err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (h Host) write(name, value string) error {
	return os.WriteFile(filepath.Join(h.root(), name), []byte(value+"\n"), 0o644)
}

func (h Host) readState() (*state, error) {
	if h.StateFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(h.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", h.StateFile, err)
	}
	st := &state{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("reading %s: %w", h.StateFile, err)
	}
	return st, nil
}

func (h Host) writeState(st state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(h.StateFile), 0o750); err != nil {
		return fmt.Errorf("writing %s: %w", h.StateFile, err)
	}
	if err := os.WriteFile(h.StateFile, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", h.StateFile, err)
	}
	return nil
}

func (h Host) root() string {
	if h.Root == "" {
		return "/proc/sys"
	}
	return h.Root
}

func (h Host) logf(format string, args ...any) {
	if h.Logf != nil {
		h.Logf(format, args...)
	}
}

// processAlive is true when a process with this PID exists; signal 0 checks without sending,
// and a process of another user answers EPERM.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func dotted(name string) string { return strings.ReplaceAll(name, "/", ".") }
