//go:build linux

package dockerengine

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// unmountUnder detaches what a stopped dockerd left mounted under dir (the default network
// namespace in its exec root), so that dir can be removed.
func unmountUnder(dir string) error {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(string(mounts), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 1 && strings.HasPrefix(fields[1], dir+"/") {
			if err := syscall.Unmount(fields[1], syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", fields[1], err))
			}
		}
	}
	return errors.Join(errs...)
}
