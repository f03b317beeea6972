package managementplane

import "syscall"

// managerProcAttr puts the manager in its own process group, so that a Ctrl-C at the terminal
// reaches this process alone, which stops it; and has the kernel stop it when this process goes,
// even killed.
func managerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
