//go:build linux

package apiserver

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
)

// init turns a wrapper DieWithParent wrote into the binary it names, with SIGKILL as its
// parent-death signal, before anything else of this executable runs.
func init() {
	binary := os.Getenv(execWithParentDeathSignal)
	if binary == "" {
		return
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "starting %s with a parent-death signal: %s\n", binary, fmt.Sprintf(format, args...))
		os.Exit(127)
	}
	parent, err := strconv.Atoi(os.Getenv(expectedParent))
	if err != nil {
		fail("%s=%q is no PID", expectedParent, os.Getenv(expectedParent))
	}
	for _, name := range []string{execWithParentDeathSignal, expectedParent} {
		if err := os.Unsetenv(name); err != nil {
			fail("%v", err)
		}
	}
	// The signal belongs to the thread that sets it, which must be the one that execs.
	runtime.LockOSThread()
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); errno != 0 {
		fail("prctl(PR_SET_PDEATHSIG): %v", errno)
	}
	// A parent gone before the signal was set never sends it.
	if os.Getppid() != parent {
		fail("its parent %d is gone", parent)
	}
	fail("%v", syscall.Exec(binary, append([]string{binary}, os.Args[1:]...), os.Environ())) //nolint:gosec // the binary the wrapper DieWithParent wrote names
}
