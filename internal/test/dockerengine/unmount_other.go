//go:build !linux

package dockerengine

// unmountUnder has nothing to detach where no private engine runs (StartPrivate refuses).
func unmountUnder(string) error { return nil }
