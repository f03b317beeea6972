package framework

import (
	"os"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestCPUPartsBetween(t *testing.T) {
	s := time.Second
	self := os.Getpid()
	tests := []struct {
		name          string
		before, after cpuSnapshot
		busy          time.Duration
		want          map[string]time.Duration
	}{
		{
			name: "each process's time since the first snapshot, by its part, and the rest",
			before: cpuSnapshot{containers: 10 * s, containersSet: true, processes: map[int]processCPU{
				self: {comm: "stubnodes.test", start: 5, cpu: 1 * s},
				100:  {comm: "kube-apiserver", start: 7, cpu: 3 * s},
				101:  {comm: "etcd", start: 7, cpu: 1 * s},
			}},
			after: cpuSnapshot{containers: 14 * s, containersSet: true, processes: map[int]processCPU{
				self: {comm: "stubnodes.test", start: 5, cpu: 3 * s},
				100:  {comm: "kube-apiserver", start: 7, cpu: 6 * s},
				101:  {comm: "etcd", start: 7, cpu: 2 * s},
				102:  {comm: "containerd-shim-runc-v2", start: 9, cpu: 1 * s},
				103:  {comm: "sh", start: 9, cpu: 1 * s},
			}},
			busy: 15 * s,
			want: map[string]time.Duration{
				CPUPartContainers: 4 * s, CPUPartTestProcess: 2 * s, CPUPartAPIServers: 3 * s, CPUPartEtcd: 1 * s,
				CPUPartEngine: 1 * s, CPUPartOther: 1 * s, CPUPartExitedOrKernel: 3 * s,
			},
		},
		{
			name:   "a reused PID is another process, counted whole",
			before: cpuSnapshot{processes: map[int]processCPU{100: {comm: "etcd", start: 7, cpu: 5 * s}}},
			after:  cpuSnapshot{processes: map[int]processCPU{100: {comm: "etcd", start: 8, cpu: 2 * s}}},
			busy:   2 * s,
			want:   map[string]time.Duration{CPUPartEtcd: 2 * s, CPUPartExitedOrKernel: 0},
		},
		{
			name:   "without the containers' cgroup their part is missing, not zero",
			before: cpuSnapshot{processes: map[int]processCPU{}},
			after:  cpuSnapshot{processes: map[int]processCPU{100: {comm: "dockerd", start: 1, cpu: 1 * s}}},
			busy:   4 * s,
			want:   map[string]time.Duration{CPUPartEngine: 1 * s, CPUPartExitedOrKernel: 3 * s},
		},
		{
			name:   "the rest is never negative (the two reads are not at the same instant)",
			before: cpuSnapshot{processes: map[int]processCPU{}},
			after:  cpuSnapshot{processes: map[int]processCPU{100: {comm: "etcd", start: 1, cpu: 2 * s}}},
			busy:   1 * s,
			want:   map[string]time.Duration{CPUPartEtcd: 2 * s, CPUPartExitedOrKernel: 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(cpuPartsBetween(tt.before, tt.after, tt.busy)).To(Equal(tt.want))
		})
	}
}

// TestReadCPUSnapshotSeesThisProcess reads /proc for real: CPU this test burns shows in the test
// process's part.
func TestReadCPUSnapshotSeesThisProcess(t *testing.T) {
	g := NewWithT(t)
	before, err := readCPUSnapshot()
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(before.processes).To(HaveKey(os.Getpid()))
	// Burn 300 ms of CPU by the kernel's own count for this process (getrusage), however busy
	// the machine is.
	start, spins := rusageCPU(g), 0
	for rusageCPU(g)-start < 300*time.Millisecond {
		spins++
	}
	g.Expect(spins).To(BeNumerically(">", 0))
	after, err := readCPUSnapshot()
	g.Expect(err).ToNot(HaveOccurred())
	parts := cpuPartsBetween(before, after, time.Hour)
	g.Expect(parts[CPUPartTestProcess]).To(BeNumerically(">=", 200*time.Millisecond))
	g.Expect(after.processes[os.Getpid()].start).To(Equal(before.processes[os.Getpid()].start))
}

func rusageCPU(g Gomega) time.Duration {
	var ru syscall.Rusage
	g.Expect(syscall.Getrusage(syscall.RUSAGE_SELF, &ru)).To(Succeed())
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
