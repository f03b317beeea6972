package framework

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
	corev1 "k8s.io/api/core/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

// NodeTimeline follows node containers through the hops from their creation to their Node, as
// the engine and the workload cluster see them, whoever makes the nodes (a controller or the
// engine alone): the container's create and start events, the first exec in it (the first look at
// its bootstrap status), the exec that starts its bootstrap, and its Node's registration. The
// same watch for both systems of a comparison says which hop one of them spends its time in.
type NodeTimeline struct {
	mu    sync.Mutex
	nodes map[string]*nodeHops
	err   error
	// cpu is the machine's CPU time over the watch: busy (all but idle and iowait) and total, on
	// every core, and busy split by cpuPartsBetween.
	cpuBusy, cpuTotal time.Duration
	cpuParts          map[string]time.Duration
}

type nodeHops struct {
	created, started, firstExec, bootstrapStarted, registered time.Time
}

// Hops of a node, in order; each is measured from the one before it.
var timelineHops = []string{"create->start", "start->first exec", "first exec->bootstrap start", "bootstrap start->Node registered"}

// bootstrapStartMark is in the command of the one exec that stages and starts a bootstrap
// (internal/bootstrap's Start unpacks its staging archive), and in no other exec of a node.
const bootstrapStartMark = "tar -x -C"

// WatchNodeTimeline follows the containers with labels from now, and their Nodes in workload (a
// poll every interval), until stop is called; stop returns the timeline, or why it is incomplete.
func WatchNodeTimeline(ctx context.Context, engine *client.Client, workload ctrlclient.Client, labels map[string]string, interval time.Duration) (stop func() (*NodeTimeline, error)) {
	ctx, cancel := context.WithCancel(ctx)
	t := &NodeTimeline{nodes: map[string]*nodeHops{}}
	busy0, total0, cpuErr := machineCPU()
	if cpuErr != nil {
		t.fail(cpuErr)
	}
	parts0, partsErr := readCPUSnapshot()
	if partsErr != nil {
		t.fail(partsErr)
	}
	filters := client.Filters{}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		filters.Add("label", k+"="+labels[k])
	}
	filters.Add("type", string(events.ContainerEventType))
	for _, a := range []string{"create", "start", "exec_create"} {
		filters.Add("event", a)
	}
	stream := engine.Events(ctx, client.EventsListOptions{Since: strconv.FormatInt(time.Now().Add(-time.Second).Unix(), 10), Filters: filters})
	var done sync.WaitGroup
	done.Go(func() {
		for {
			select {
			case m := <-stream.Messages:
				t.record(m)
			case err := <-stream.Err:
				if ctx.Err() == nil {
					t.fail(fmt.Errorf("watching the engine's events: %w", err))
				}
				return
			}
		}
	})
	done.Go(func() {
		for ctx.Err() == nil {
			nodes := &corev1.NodeList{}
			if err := workload.List(ctx, nodes); err != nil {
				if ctx.Err() == nil {
					t.fail(fmt.Errorf("listing Nodes: %w", err))
				}
				return
			}
			now := time.Now()
			t.mu.Lock()
			for _, n := range nodes.Items {
				if h, ok := t.nodes[n.Name]; ok && h.registered.IsZero() {
					h.registered = now
				}
			}
			t.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	})
	return func() (*NodeTimeline, error) {
		cancel()
		done.Wait()
		parts1, partsErr := readCPUSnapshot()
		if partsErr != nil {
			t.fail(partsErr)
		}
		busy1, total1, err := machineCPU()
		if err != nil {
			t.fail(err)
		}
		t.cpuBusy, t.cpuTotal = busy1-busy0, total1-total0
		t.cpuParts = cpuPartsBetween(parts0, parts1, t.cpuBusy)
		return t, t.err
	}
}

// CPU is how busy the machine was over the watch: the CPU time spent on all cores but idle, and
// its share of all the cores' time. A system that waits on a machine kept busy by something else
// (API servers, controllers) is slower in every hop, not in one.
func (t *NodeTimeline) CPU() (busy time.Duration, share float64) {
	if t.cpuTotal <= 0 {
		return t.cpuBusy, 0
	}
	return t.cpuBusy, float64(t.cpuBusy) / float64(t.cpuTotal)
}

// CPUByPart splits the CPU time CPU reports by where it was spent (CPUParts): the part that
// differs between two systems on a saturated machine is the work one does beyond the other. A
// part that could not be read (the containers' cgroup of an engine with another cgroup driver) is
// missing, its time left in CPUPartExitedOrKernel.
func (t *NodeTimeline) CPUByPart() map[string]time.Duration { return maps.Clone(t.cpuParts) }

// machineCPU reads the machine's CPU time from /proc/stat, all cores: busy (user, nice, system,
// irq, softirq, steal) and total (with idle and iowait), in clock ticks of 1/100 s (USER_HZ).
func machineCPU() (busy, total time.Duration, _ error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("reading the machine's CPU time: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("reading the machine's CPU time: unexpected /proc/stat line %q", line)
	}
	var ticks [8]int64
	for i := range ticks {
		if ticks[i], err = strconv.ParseInt(fields[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("reading the machine's CPU time: %w", err)
		}
	}
	const user, nice, system, idle, iowait, irq, softirq, steal = 0, 1, 2, 3, 4, 5, 6, 7
	busyTicks := ticks[user] + ticks[nice] + ticks[system] + ticks[irq] + ticks[softirq] + ticks[steal]
	return time.Duration(busyTicks) * clockTick, time.Duration(busyTicks+ticks[idle]+ticks[iowait]) * clockTick, nil
}

func (t *NodeTimeline) record(m events.Message) {
	name := m.Actor.Attributes["name"]
	if name == "" {
		return
	}
	at := time.Unix(0, m.TimeNano)
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.nodes[name]
	if h == nil {
		h = &nodeHops{}
		t.nodes[name] = h
	}
	action := string(m.Action)
	setOnce := func(field *time.Time) {
		if field.IsZero() {
			*field = at
		}
	}
	switch {
	case action == "create":
		setOnce(&h.created)
	case action == "start":
		setOnce(&h.started)
	case strings.HasPrefix(action, "exec_create:"):
		setOnce(&h.firstExec)
		if strings.Contains(action, bootstrapStartMark) {
			setOnce(&h.bootstrapStarted)
		}
	}
}

func (t *NodeTimeline) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
	}
}

// Hops are the durations of each hop of the nodes created while the timeline watched, by hop;
// the error names a node that did not go through all of them, so that a figure never stands on
// part of the nodes. Nodes that existed before (a rollout's old ones) are not counted.
func (t *NodeTimeline) Hops() (map[string][]time.Duration, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string][]time.Duration{}
	for _, name := range slices.Sorted(maps.Keys(t.nodes)) {
		h := t.nodes[name]
		if h.created.IsZero() {
			continue
		}
		times := []time.Time{h.created, h.started, h.firstExec, h.bootstrapStarted, h.registered}
		for i, at := range times {
			if at.IsZero() {
				return nil, fmt.Errorf("node %s: no %s seen", name, []string{"create", "start", "exec", "bootstrap start", "Node"}[i])
			}
		}
		for i, hop := range timelineHops {
			out[hop] = append(out[hop], times[i+1].Sub(times[i]))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no node seen")
	}
	return out, nil
}

// HopNames are the hops Hops measures, in order.
func HopNames() []string { return slices.Clone(timelineHops) }
