// Command init is PID 1 of CAPDMP's test node image: it keeps the container running, reaps the
// processes `docker exec` leaves behind, and exits on SIGTERM, SIGINT or SIGRTMIN+3 (the stop
// signal of kind nodes, whose PID 1 is systemd). On SIGRTMIN+3 it exits 130 as kindest/node's
// systemd does when it halts, so that a restart policy `on-failure` brings the node back after
// the engine restarts, as it brings a kind node back.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// sigRTMin3 is SIGRTMIN+3 on Linux (SIGRTMIN is 34 for the kernel; Go does not reserve it).
const sigRTMin3 = syscall.Signal(37)

// haltExitCode is the exit code of a kindest/node container stopped with its stop signal.
const haltExitCode = 130

func main() {
	version := "unknown"
	if b, err := os.ReadFile("/kind/version"); err == nil {
		version = strings.TrimSpace(string(b))
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, sigRTMin3, syscall.SIGCHLD)
	hostname, _ := os.Hostname()
	fmt.Printf("CAPDMP test node %s (Kubernetes %s, stub kubeadm, no kubelet) is up as pid %d\n", hostname, version, os.Getpid())
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		name, code := sig.String(), 0
		if sig == sigRTMin3 {
			name, code = "SIGRTMIN+3", haltExitCode
		}
		fmt.Printf("Received %s, shutting down\n", name)
		reap()
		os.Exit(code)
	}
}

// reap collects every exited child so that none stays a zombie.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
