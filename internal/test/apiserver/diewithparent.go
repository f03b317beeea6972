package apiserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// DieWithParent makes the kube-apiserver and etcd env starts die with the process that starts
// them, however it ends: envtest starts them in a process group of their own, so a test or a
// plane killed outright (or interrupted before its cleanup) left them running, holding ports and
// CPU. Each binary is started through a wrapper script that runs this very executable with
// execWithParentDeathSignal set; its init (diewithparent_linux.go) sets the parent-death signal
// and execs the binary, keeping the PID for envtest to stop it by. Only Linux has a parent-death
// signal: elsewhere it changes nothing and says so on standard error.
func DieWithParent(env *crenvtest.Environment) error {
	if runtime.GOOS != "linux" {
		fmt.Fprintf(os.Stderr, "kube-apiserver and etcd outlive a process killed outright on %s (only Linux has a parent-death signal): stop them with kill if one is left\n", runtime.GOOS)
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this executable, which the wrappers run: %w", err)
	}
	// The wrappers name this executable, which go test removes after its package ran: one folder
	// per process, and those of processes gone are removed.
	removeWrappersOfGoneProcesses()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d", wrapperDirPrefix, os.Getpid()))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	wrap := func(binary string) (string, error) {
		path := filepath.Join(dir, binary)
		// $PPID is the process that starts the wrapper: the one whose death must kill the binary.
		script := fmt.Sprintf("#!/bin/sh\n%s=%s %s=$PPID\nexport %s %s\nexec %s \"$@\"\n",
			execWithParentDeathSignal, shellQuote(filepath.Join(env.BinaryAssetsDirectory, binary)), expectedParent,
			execWithParentDeathSignal, expectedParent, shellQuote(self))
		// Written whole and renamed, so that a process starting beside another never runs half a file.
		tmp, err := os.CreateTemp(dir, binary+".*")
		if err != nil {
			return "", err
		}
		defer os.Remove(tmp.Name())
		if _, err := tmp.WriteString(script); err != nil {
			_ = tmp.Close()
			return "", err
		}
		if err := tmp.Close(); err != nil {
			return "", err
		}
		if err := os.Chmod(tmp.Name(), 0o700); err != nil {
			return "", err
		}
		return path, os.Rename(tmp.Name(), path)
	}
	apiServer, err := wrap("kube-apiserver")
	if err != nil {
		return fmt.Errorf("writing kube-apiserver's wrapper: %w", err)
	}
	etcd, err := wrap("etcd")
	if err != nil {
		return fmt.Errorf("writing etcd's wrapper: %w", err)
	}
	env.ControlPlane.GetAPIServer().Path = apiServer
	if env.ControlPlane.Etcd == nil {
		env.ControlPlane.Etcd = &crenvtest.Etcd{}
	}
	env.ControlPlane.Etcd.Path = etcd
	return nil
}

const (
	// execWithParentDeathSignal, in a wrapper's environment, names the binary it becomes.
	execWithParentDeathSignal = "CAPDMP_EXEC_WITH_PARENT_DEATH_SIGNAL"
	// expectedParent is the PID of the process whose death the binary follows: a wrapper whose
	// parent is already another (it died before the signal was set) exits instead.
	expectedParent = "CAPDMP_EXPECTED_PARENT"
	// wrapperDirPrefix and a PID name a process's wrapper folder in the temporary folder.
	wrapperDirPrefix = "capdmp-die-with-parent-"
)

// removeWrappersOfGoneProcesses removes the wrapper folders of processes that no longer run.
func removeWrappersOfGoneProcesses() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), wrapperDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), wrapperDirPrefix))
		if err != nil || pid <= 0 {
			continue
		}
		// Signal 0 checks without sending; a process of another user answers EPERM.
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// envtestStartAttempts is how often StartEnvtest tries: envtest gives the API server a fixed 5 s
// to show its default namespace, which a loaded 2-core machine sometimes misses.
const envtestStartAttempts = 3

// StartEnvtest starts env as env.Start does, with two minutes for each of etcd and kube-apiserver
// to answer unless env says otherwise, and tries again after stopping what a failed start left.
func StartEnvtest(env *crenvtest.Environment) (*rest.Config, error) {
	if env.ControlPlaneStartTimeout == 0 {
		env.ControlPlaneStartTimeout = 2 * time.Minute
	}
	var errs []error
	for range envtestStartAttempts {
		cfg, err := env.Start()
		if err == nil {
			return cfg, nil
		}
		errs = append(errs, err)
		if err := env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping what the failed start left: %w", err))
			break
		}
	}
	return nil, errors.Join(errs...)
}
