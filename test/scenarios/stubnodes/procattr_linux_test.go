package stubnodes

import "syscall"

// diesWithTheTest has the kernel kill a process the test starts when the test process goes, as
// envtest's processes do.
func diesWithTheTest() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
