package apiserver

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"k8s.io/client-go/rest"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// DieWithParent makes the kube-apiserver and etcd env starts die with the process that starts
// them, however it ends: envtest starts them in a process group of their own, so a test or a
// plane killed outright (or interrupted before its cleanup) left them running, holding ports and
// CPU. Each binary is started through a wrapper that has setpriv (util-linux) set its
// parent-death signal before it execs the binary, keeping its PID for envtest to stop it by.
// Only Linux has a parent-death signal: elsewhere, or without setpriv, it changes nothing and
// says so on standard error.
func DieWithParent(env *crenvtest.Environment) error {
	if runtime.GOOS != "linux" {
		fmt.Fprintf(os.Stderr, "kube-apiserver and etcd outlive a process killed outright on %s (only Linux has a parent-death signal): stop them with kill if one is left\n", runtime.GOOS)
		return nil
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		fmt.Fprintf(os.Stderr, "setpriv (util-linux) not found: kube-apiserver and etcd outlive a process killed outright: %v\n", err)
		return nil
	}
	sum := sha256.Sum256([]byte(env.BinaryAssetsDirectory))
	dir := filepath.Join(os.TempDir(), "capdmp-die-with-parent-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	wrap := func(binary string) (string, error) {
		path := filepath.Join(dir, binary)
		script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, filepath.Join(env.BinaryAssetsDirectory, binary))
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
