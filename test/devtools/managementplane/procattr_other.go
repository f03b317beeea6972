//go:build !linux

package managementplane

import "syscall"

// managerProcAttr puts the manager in its own process group, so that a Ctrl-C at the terminal
// reaches this process alone, which stops it. Only Linux stops a child when its parent is killed:
// elsewhere a manager outlives a killed plane until `kill` (its pid is in the plane's log).
func managerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
