//go:build !linux

package stubnodes

import "syscall"

// diesWithTheTest: only Linux kills a child with its parent; elsewhere the test's cleanup stops it.
func diesWithTheTest() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
