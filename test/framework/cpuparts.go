package framework

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Parts of the machine's CPU time that CPUByPart names: what a comparison's extra work on a
// saturated machine is spent in.
const (
	CPUPartContainers     = "containers"
	CPUPartTestProcess    = "test process"
	CPUPartAPIServers     = "kube-apiserver"
	CPUPartEtcd           = "etcd"
	CPUPartEngine         = "dockerd, containerd"
	CPUPartOther          = "other processes"
	CPUPartExitedOrKernel = "exited processes, kernel"
)

// CPUParts lists the parts in the order they are printed.
func CPUParts() []string {
	return []string{CPUPartContainers, CPUPartTestProcess, CPUPartAPIServers, CPUPartEtcd, CPUPartEngine, CPUPartOther, CPUPartExitedOrKernel}
}

// containersCPUFiles are where the engine's containers' CPU time is kept, every container's
// together, with the engine's cgroupfs driver under its default parent "docker": cgroup v1's
// cpuacct (nanoseconds) or cgroup v2's cpu.stat (usage_usec). Both count a removed container's
// time in the parent.
var containersCPUFiles = []string{
	"/sys/fs/cgroup/cpuacct/docker/cpuacct.usage",
	"/sys/fs/cgroup/cpu,cpuacct/docker/cpuacct.usage",
	"/sys/fs/cgroup/docker/cpu.stat",
}

// cpuSnapshot is the CPU time of the engine's containers and of each process outside them.
type cpuSnapshot struct {
	containers    time.Duration
	containersSet bool
	processes     map[int]processCPU
}

type processCPU struct {
	comm  string
	start uint64 // ticks after boot: a reused PID is another process
	cpu   time.Duration
}

func readCPUSnapshot() (cpuSnapshot, error) {
	s := cpuSnapshot{processes: map[int]processCPU{}}
	for _, f := range containersCPUFiles {
		d, err := readContainersCPU(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return s, err
		}
		s.containers, s.containersSet = d, true
		break
	}
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return s, err
	}
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		p, inContainer, err := readProcessCPU(dir)
		if err != nil || inContainer {
			continue // gone since the listing, or counted with the containers
		}
		s.processes[pid] = p
	}
	return s, nil
}

func readContainersCPU(file string) (time.Duration, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	if filepath.Base(file) == "cpuacct.usage" {
		ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", file, err)
		}
		return time.Duration(ns), nil
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("reading %s: %w", file, err)
			}
			return time.Duration(us) * time.Microsecond, nil
		}
	}
	return 0, fmt.Errorf("reading %s: no usage_usec", file)
}

// readProcessCPU reads a process's own CPU time (user and system, all its threads; not its
// children's) from /proc/<pid>/stat, and whether it runs in one of the engine's containers.
func readProcessCPU(dir string) (_ processCPU, inContainer bool, _ error) {
	cgroups, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		return processCPU{}, false, err
	}
	for line := range strings.Lines(string(cgroups)) {
		if strings.Contains(line, ":/docker/") {
			return processCPU{}, true, nil
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return processCPU{}, false, err
	}
	// The command is in parentheses and may hold spaces and parentheses itself.
	open, closing := strings.IndexByte(string(data), '('), strings.LastIndexByte(string(data), ')')
	if open < 0 || closing < open {
		return processCPU{}, false, fmt.Errorf("unexpected %s/stat", dir)
	}
	fields := strings.Fields(string(data[closing+1:]))
	// fields[0] is stat's third field (state): utime is the 14th, stime the 15th, starttime the 22nd.
	const utime, stime, starttime = 14 - 3, 15 - 3, 22 - 3
	if len(fields) <= starttime {
		return processCPU{}, false, fmt.Errorf("unexpected %s/stat", dir)
	}
	var ticks [2]int64
	for i, f := range []int{utime, stime} {
		if ticks[i], err = strconv.ParseInt(fields[f], 10, 64); err != nil {
			return processCPU{}, false, fmt.Errorf("reading %s/stat: %w", dir, err)
		}
	}
	start, err := strconv.ParseUint(fields[starttime], 10, 64)
	if err != nil {
		return processCPU{}, false, fmt.Errorf("reading %s/stat: %w", dir, err)
	}
	return processCPU{comm: string(data[open+1 : closing]), start: start, cpu: time.Duration(ticks[0]+ticks[1]) * clockTick}, false, nil
}

// clockTick is USER_HZ, the unit of /proc's CPU times.
const clockTick = 10 * time.Millisecond

// cpuPartsBetween splits busy, the machine's CPU time between two snapshots, into CPUParts: the
// containers' from their cgroup, each process's that runs at the end by its name (a process
// started in between counts whole), and what is left: processes that exited in between (whose time
// is nowhere to read) and the kernel's own. Without the containers' cgroup their time is left
// with the rest, and the containers' part is missing from the map rather than zero.
func cpuPartsBetween(before, after cpuSnapshot, busy time.Duration) map[string]time.Duration {
	parts := map[string]time.Duration{}
	if after.containersSet {
		parts[CPUPartContainers] = after.containers - before.containers
	}
	self := os.Getpid()
	for pid, p := range after.processes {
		d := p.cpu
		if b, ok := before.processes[pid]; ok && b.start == p.start {
			d -= b.cpu
		}
		parts[cpuPartOf(pid, self, p.comm)] += d
	}
	rest := busy
	for _, d := range parts {
		rest -= d
	}
	parts[CPUPartExitedOrKernel] = max(rest, 0)
	return parts
}

func cpuPartOf(pid, self int, comm string) string {
	switch {
	case pid == self:
		return CPUPartTestProcess
	case comm == "kube-apiserver":
		return CPUPartAPIServers
	case comm == "etcd":
		return CPUPartEtcd
	case comm == "dockerd", comm == "containerd", strings.HasPrefix(comm, "containerd-shim"):
		return CPUPartEngine
	}
	return CPUPartOther
}
