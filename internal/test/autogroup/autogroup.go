// Package autogroup gives this process's session, as the kernel's scheduler sees it, a nice
// value, and puts the old one back.
//
// Where tasks run in the root CPU cgroup (cgroup v1 machines such as ours), Linux schedules each
// session as one group (sched(7), "The autogroup feature"), and every Docker container as part of
// the engine's cgroup. Under the real suite's load a test process's session, which asks for
// little CPU, then waited up to a second at a time for a CPU: it shares its group with the
// management API server and etcd it started. A lower nice value raises the group's weight; the
// group still uses only the CPU it asks for.
//
// The value belongs to the session, not to the process: it outlives a process that is killed
// before it restores it, until the session (a terminal, say) ends.
package autogroup

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Self is the autogroup file of the calling process.
const Self = "/proc/self/autogroup"

// ErrDefaultAutogroup says a process is in the kernel's default autogroup, the one init and the
// kernel's threads belong to. A process whose ancestors never began a session of their own
// (setsid) stays in it, as CI's job does. The kernel schedules its tasks one by one beside the
// other groups, and its nice value cannot be set.
var ErrDefaultAutogroup = errors.New("in the kernel's default autogroup, which has no nice value of its own")

// Applies returns nil when the kernel schedules the calling process by its autogroup: autogroups
// are enabled, the process sits in the root CPU cgroup and in an autogroup of its session's own.
// Otherwise an autogroup's nice value changes nothing or cannot be set, and the error says why.
func Applies() error {
	enabled, err := os.ReadFile("/proc/sys/kernel/sched_autogroup_enabled")
	if err != nil {
		return fmt.Errorf("this kernel has no scheduler autogroups: %w", err)
	}
	if strings.TrimSpace(string(enabled)) != "1" {
		return fmt.Errorf("scheduler autogroups are disabled (kernel.sched_autogroup_enabled=%s)", strings.TrimSpace(string(enabled)))
	}
	cgroups, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return fmt.Errorf("reading this process's cgroups: %w", err)
	}
	if path := cpuCgroup(string(cgroups)); path != "/" {
		return fmt.Errorf("this process is in CPU cgroup %s, which the kernel schedules instead of its autogroup", path)
	}
	if _, err := (Group{File: Self}).Nice(); err != nil {
		return fmt.Errorf("this process's session: %w", err)
	}
	return nil
}

// cpuCgroup returns the cgroup, from /proc/<pid>/cgroup, whose CPU controller holds the process:
// the cgroup v1 hierarchy with the cpu controller, else the cgroup v2 one.
func cpuCgroup(procCgroup string) string {
	unified := ""
	for line := range strings.Lines(procCgroup) {
		// "hierarchy-ID:controller-list:cgroup-path"
		fields := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(fields) != 3 {
			continue
		}
		if fields[0] == "0" && fields[1] == "" {
			unified = fields[2]
			continue
		}
		for controller := range strings.SplitSeq(fields[1], ",") {
			if controller == "cpu" {
				return fields[2]
			}
		}
	}
	return unified
}

// Group is a process's autogroup file, /proc/<pid>/autogroup.
type Group struct {
	// File is the path of the autogroup file; tests point it at a file of their own.
	File string
}

// Nice returns the group's nice value, or an error wrapping ErrDefaultAutogroup.
func (g Group) Nice() (int, error) {
	b, err := os.ReadFile(g.File)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", g.File, err)
	}
	content := strings.TrimSpace(string(b))
	// The kernel shows nothing for the default autogroup.
	if content == "" {
		return 0, fmt.Errorf("%s is empty: %w", g.File, ErrDefaultAutogroup)
	}
	// "/autogroup-42 nice 0"
	fields := strings.Fields(content)
	if len(fields) != 3 || fields[1] != "nice" {
		return 0, fmt.Errorf("%s holds %q, not \"/autogroup-<id> nice <n>\"", g.File, content)
	}
	nice, err := strconv.Atoi(fields[2])
	if err != nil {
		return 0, fmt.Errorf("%s holds %q: %w", g.File, content, err)
	}
	return nice, nil
}

// SetNice sets the group's nice value and returns a func that sets the value found before. A
// value below the current one needs CAP_SYS_NICE; without it SetNice changes nothing and returns
// an error wrapping os.ErrPermission. In the default autogroup it changes nothing and returns an
// error wrapping ErrDefaultAutogroup.
func (g Group) SetNice(nice int) (restore func() error, err error) {
	before, err := g.Nice()
	if err != nil {
		return nil, err
	}
	if err := g.write(nice); err != nil {
		return nil, err
	}
	return func() error { return g.write(before) }, nil
}

func (g Group) write(nice int) error {
	if err := os.WriteFile(g.File, []byte(strconv.Itoa(nice)), 0o644); err != nil {
		return fmt.Errorf("setting the scheduler autogroup's nice value to %d: %w", nice, err)
	}
	return nil
}
