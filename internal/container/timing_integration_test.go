package container_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/container/containertest"
)

// TestTiming measures the adapter's operations on a real engine. It runs only with
// CAPDMP_TIMING=1: its numbers depend on the machine's load, not on the code.
func TestTiming(t *testing.T) {
	if os.Getenv("CAPDMP_TIMING") != "1" {
		t.Skip("set CAPDMP_TIMING=1 to measure create, exec, list and delete")
	}
	d := containertest.Engine(t)
	containertest.EnsureBusyboxImage(t, d)
	ctx := context.Background()
	label := map[string]string{"capdmp.test/run": "timing-" + randomSuffix(t)}
	const nodes, execsPerNode = 5, 4

	var creates, execs, lists, deletes []time.Duration
	measure := func(into *[]time.Duration, f func() error) {
		t.Helper()
		start := time.Now()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		*into = append(*into, time.Since(start))
	}
	name := func(i int) string { return fmt.Sprintf("capdmp-timing-%s-%d", label["capdmp.test/run"], i) }
	t.Cleanup(func() {
		for i := range nodes {
			_ = d.Delete(ctx, name(i))
		}
	})
	for i := range nodes {
		spec := container.NodeSpec(container.NodeSpecInput{Name: name(i), Image: containertest.BusyboxImage, Labels: label})
		spec.Mounts = nil
		spec.Cmd = []string{"sleep", "600"}
		measure(&creates, func() error { _, err := d.Create(ctx, spec); return err })
		for range execsPerNode {
			measure(&execs, func() error { _, err := d.Exec(ctx, name(i), []string{"true"}, nil); return err })
		}
		measure(&lists, func() error { _, err := d.List(ctx, label); return err })
	}
	for i := range nodes {
		measure(&deletes, func() error { return d.Delete(ctx, name(i)) })
	}
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	t.Logf("median of %d: create (privileged kind node spec) %v, exec %v, list %v, delete %v",
		nodes, median(creates), median(execs), median(lists), median(deletes))
}
