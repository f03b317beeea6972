// Command kubeadm is the stub kubeadm of CAPDMP's test node image (see test/stubnode/README.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/capdmp/capdmp/test/stubnode/internal/kubeadm"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kubeadm.Main(ctx, os.Args[1:], kubeadm.DefaultEnv())
	cancel()
	os.Exit(code)
}
