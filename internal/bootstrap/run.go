package bootstrap

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/capdmp/capdmp/internal/container"
)

// Execer runs a command in a node container; container.Runtime is one.
type Execer interface {
	Exec(ctx context.Context, containerName string, cmd []string, stdin io.Reader) (container.ExecResult, error)
}

// runDir holds a node's staged bootstrap: the runner script, each step's stdin and output, and
// what the runner reports (its PID, its start, its failure). It is in the node's /var volume, so a
// restarted node still tells what became of its bootstrap.
const runDir = "/var/lib/capdmp/bootstrap"

// outputLimit is how much of a failed step's output the node keeps for the controller: the end,
// where errors are, within a condition's size.
const outputLimit = 1024

// State is how far the bootstrap of a node went, as Check finds it.
type State string

const (
	// StateNotStarted means no bootstrap step ran in the node.
	StateNotStarted State = "NotStarted"
	// StateBooting means no bootstrap step ran and the node is not ready for one: its systemd has
	// not reached multi-user.target or its container runtime does not answer yet. Nodes without
	// systemd (the stub image) are never Booting.
	StateBooting State = "Booting"
	// StateRunning means the bootstrap started by Start still runs in the node.
	StateRunning State = "Running"
	// StateSucceeded means the bootstrap finished and wrote the sentinel.
	StateSucceeded State = "Succeeded"
	// StateFailed means a step exited non-zero, or Stop ended the bootstrap.
	StateFailed State = "Failed"
	// StateInterrupted means the bootstrap started and its runner is gone without a result: the
	// node restarted under it. Running it again is unsafe (kubeadm join is not idempotent);
	// replace the node instead.
	StateInterrupted State = "Interrupted"
)

// Status is what Check finds in a node.
type Status struct {
	State State
	// Elapsed is how long a Running bootstrap has run, or how long a Succeeded one ran when Timed,
	// by the node's clock, in whole seconds.
	Elapsed time.Duration
	// Timed says a Succeeded bootstrap's Elapsed was measured: the node kept its start.
	Timed bool
	// Step names the step that failed (Failed) or was running when Stop ended it.
	Step string
	// ExitCode is the failed step's exit code; 0 when Stop ended it.
	ExitCode int
	// Stopped says Stop ended the bootstrap.
	Stopped bool
	// Output is the end of the step's output (stdout and stderr), as the node kept it. It may hold
	// what a user's command printed; Step never holds bootstrap data.
	Output []byte
}

// The exit codes of the status and await commands are unusual on purpose: a shell that cannot
// run one must not be read as an answer.
const (
	statusExitSucceeded   = 0
	statusExitNotStarted  = 80
	statusExitInterrupted = 81
	statusExitBooting     = 82
	statusExitRunning     = 83
	statusExitFailed      = 84
	awaitExitLimit        = 85
)

// stoppedMark is the exit code line Stop writes in place of a step's exit code.
const stoppedMark = "stopped"

// StatusCommand is the command that tells how far the bootstrap of a node went; read its result
// with ParseStatus. A controller runs it before anything else, so that a restarted controller
// never bootstraps a node twice and finds a bootstrap that still runs. On a node that has not
// bootstrapped it also tells whether the node finished booting, as CAPD waits for before running
// kubeadm: systemd (PID 1) reached multi-user.target and containerd answers crictl.
func StatusCommand() Command {
	// The runner is alive while its PID runs run.sh; a PID not yet recorded is a runner that is
	// starting. A zombie has an empty cmdline and counts as gone.
	script := fmt.Sprintf(`d=%[1]s
if [ -f %[2]s ] || [ -f %[3]s ]; then
  if [ -f "$d/started-at" ]; then echo $(( $(cat "$d/finished-at" 2>/dev/null || date +%%s) - $(cat "$d/started-at") )); fi
  exit %[4]d
fi
if [ -f "$d/failed" ]; then cat "$d/failed"; exit %[5]d; fi
if [ -f "$d/started-at" ]; then
  p=$(cat "$d/pid" 2>/dev/null)
  if [ -z "$p" ] || grep -q run.sh "/proc/$p/cmdline" 2>/dev/null; then echo $(( $(date +%%s) - $(cat "$d/started-at") )); exit %[6]d; fi
  exit %[7]d
fi
if [ -f %[8]s ]; then exit %[7]d; fi
if [ -x /lib/systemd/systemd ]; then
  [ "$(cat /proc/1/comm)" = systemd ] && systemctl is-active --quiet multi-user.target && crictl ps >/dev/null 2>&1 || exit %[9]d
fi
exit %[10]d`,
		runDir, SentinelPath, persistentCompletePath, statusExitSucceeded, statusExitFailed, statusExitRunning,
		statusExitInterrupted, persistentStartedPath, statusExitBooting, statusExitNotStarted)
	return Command{Argv: []string{"/bin/sh", "-c", script}, Step: "check bootstrap status"}
}

// ParseStatus reads the result of StatusCommand.
func ParseStatus(res container.ExecResult) (Status, error) {
	switch res.ExitCode {
	case statusExitSucceeded:
		// How long it ran, when the node still has its start: a node that rebooted may not.
		s := Status{State: StateSucceeded}
		if out := strings.TrimSpace(string(res.Stdout)); out != "" {
			seconds, err := strconv.Atoi(out)
			if err != nil {
				return Status{}, fmt.Errorf("failed to read the bootstrap's running time %q: %w", res.Stdout, err)
			}
			s.Elapsed, s.Timed = time.Duration(seconds)*time.Second, true
		}
		return s, nil
	case statusExitNotStarted:
		return Status{State: StateNotStarted}, nil
	case statusExitBooting:
		return Status{State: StateBooting}, nil
	case statusExitInterrupted:
		return Status{State: StateInterrupted}, nil
	case statusExitRunning:
		seconds, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
		if err != nil {
			return Status{}, fmt.Errorf("failed to read the bootstrap's running time %q: %w", res.Stdout, err)
		}
		return Status{State: StateRunning, Elapsed: time.Duration(seconds) * time.Second}, nil
	case statusExitFailed:
		// The runner's report: the exit code (or stoppedMark), the step's name, its output.
		code, rest, _ := bytes.Cut(res.Stdout, []byte("\n"))
		step, output, _ := bytes.Cut(rest, []byte("\n"))
		s := Status{State: StateFailed, Step: Redact(string(step)), Output: []byte(Redact(string(bytes.TrimSpace(output))))}
		if string(code) == stoppedMark {
			s.Stopped = true
			return s, nil
		}
		n, err := strconv.Atoi(string(code))
		if err != nil {
			return Status{}, fmt.Errorf("failed to read the bootstrap's exit code %q: %w", code, err)
		}
		s.ExitCode = n
		return s, nil
	}
	return Status{}, fmt.Errorf("bootstrap status check failed with exit code %d: %s", res.ExitCode, Redact(string(bytes.TrimSpace(res.Stderr))))
}

// Check runs StatusCommand in the node and returns how far its bootstrap went.
func Check(ctx context.Context, e Execer, node string) (Status, error) {
	res, err := e.Exec(ctx, node, StatusCommand().Argv, nil)
	if err != nil {
		return Status{}, fmt.Errorf("failed to check the bootstrap of %s: %w", node, err)
	}
	s, err := ParseStatus(res)
	if err != nil {
		return Status{}, fmt.Errorf("failed to check the bootstrap of %s: %w", node, err)
	}
	return s, nil
}

// Start stages the commands in the node and starts them there, detached: it returns once they
// run, and Check follows them. A bootstrap takes minutes; it must not hold a controller worker
// that long, nor die with the controller. Call it only on a node that Check finds NotStarted:
// staging wipes an earlier staging that was never started. It is one exec: the runner and each
// step's stdin arrive as an archive on its stdin.
func Start(ctx context.Context, e Execer, node string, cmds []Command) error {
	archive, err := stagingArchive(cmds)
	if err != nil {
		return fmt.Errorf("failed to stage the bootstrap of %s: %w", node, err)
	}
	// setsid makes the runner a process group that Stop can end as a whole; its output goes to
	// files so that this exec returns at once. The start time is written before the runner
	// exists: from then on Check never reports NotStarted, and Start is never run twice.
	script := fmt.Sprintf(`d=%s
rm -rf "$d" && mkdir -p "$d" && chmod 0700 "$d" && tar -x -C "$d" -f - || exit 1
date +%%s > "$d/started-at"
if command -v setsid >/dev/null 2>&1; then setsid /bin/sh "$d/run.sh" </dev/null >/dev/null 2>&1 &
else /bin/sh "$d/run.sh" </dev/null >/dev/null 2>&1 &
fi
echo $! > "$d/pid"`, runDir)
	return execOK(ctx, e, node, "stage and start the bootstrap", []string{"/bin/sh", "-c", script}, archive)
}

// ErrAwaitLimit says Await gave up: the bootstrap still ran when its limit passed.
var ErrAwaitLimit = errors.New("the bootstrap still runs")

// awaitTick is how often Await's command looks in the node: one fork of sleep, the rest builtins.
const awaitTick = 200 * time.Millisecond

// Await returns once the bootstrap started by Start has ended in the node (finished, failed,
// stopped, or its runner gone), so that a controller can look at it then instead of at its next
// poll; ErrAwaitLimit once limit passes first. It is one exec that lasts as long as it waits.
func Await(ctx context.Context, e Execer, node string, limit time.Duration) error {
	ticks := max(int(limit/awaitTick), 1)
	// The runner writes finished-at or failed as it ends; a runner killed without either is gone
	// from /proc, or a zombie where PID 1 does not reap. Only builtins read its state.
	script := fmt.Sprintf(`d=%s; n=0
while [ ! -f "$d/finished-at" ] && [ ! -f "$d/failed" ]; do
  p=; { read -r p < "$d/pid"; } 2>/dev/null
  if [ -n "$p" ]; then
    st=; { read -r _ _ st _ < "/proc/$p/stat"; } 2>/dev/null
    case "$st" in ""|Z|X) exit 0 ;; esac
  fi
  n=$((n + 1)); [ "$n" -le %d ] || exit %d
  sleep %s 2>/dev/null || sleep 1
done`, runDir, ticks, awaitExitLimit, strconv.FormatFloat(awaitTick.Seconds(), 'f', -1, 64))
	res, err := e.Exec(ctx, node, []string{"/bin/sh", "-c", script}, nil)
	if err != nil {
		return fmt.Errorf("failed to await the bootstrap of %s: %w", node, err)
	}
	switch res.ExitCode {
	case 0:
		return nil
	case awaitExitLimit:
		return fmt.Errorf("awaiting the bootstrap of %s for %s: %w", node, limit, ErrAwaitLimit)
	}
	return fmt.Errorf("failed to await the bootstrap of %s: exit code %d: %s", node, res.ExitCode, Redact(string(bytes.TrimSpace(res.Stderr))))
}

// stagingArchive is the tar archive Start unpacks in runDir: each step's stdin as <i>.stdin (it
// is bootstrap data of any bytes, never part of a script) and the runner as run.sh.
func stagingArchive(cmds []Command) ([]byte, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	add := func(name string, content []byte) error {
		if err := w.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := w.Write(content)
		return err
	}
	for i, c := range cmds {
		if c.Stdin == nil {
			continue
		}
		if err := add(fmt.Sprintf("%d.stdin", i), c.Stdin); err != nil {
			return nil, err
		}
	}
	if err := add("run.sh", runnerScript(cmds)); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Stop ends a running bootstrap: it kills the runner's process group and records the bootstrap as
// Failed and Stopped, with the step that was running and its output. `kill -TERM -PGID` is the
// form that both dash and busybox sh read as a process group.
func Stop(ctx context.Context, e Execer, node string) error {
	stop := fmt.Sprintf(`d=%s
p=$(cat "$d/pid" 2>/dev/null)
if [ -n "$p" ]; then kill -TERM -"$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; fi
n=$(sed -n 1p "$d/current" 2>/dev/null)
{ echo %s; sed -n 2p "$d/current" 2>/dev/null; [ -z "$n" ] || tail -c %d "$d/$n.out" 2>/dev/null; } > "$d/failed.tmp"
mv "$d/failed.tmp" "$d/failed"
rm -f "$d"/*.stdin`, runDir, stoppedMark, outputLimit)
	return execOK(ctx, e, node, "stop the bootstrap", []string{"/bin/sh", "-c", stop}, nil)
}

// runnerScript runs the steps in order, each with its staged stdin and its output kept, reports
// the first that fails in $d/failed, and removes the staged inputs. Every argument is quoted,
// never interpreted.
func runnerScript(cmds []Command) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `d=%s
echo $$ > "$d/pid"
step() {
  n=$1; name=$2; shift 2
  printf '%%s\n%%s\n' "$n" "$name" > "$d/current"
  in=/dev/null; [ -f "$d/$n.stdin" ] && in="$d/$n.stdin"
  "$@" <"$in" >"$d/$n.out" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] && return 0
  { echo "$rc"; echo "$name"; tail -c %d "$d/$n.out"; } > "$d/failed.tmp"
  mv "$d/failed.tmp" "$d/failed"
  rm -f "$d"/*.stdin
  exit "$rc"
}
`, runDir, outputLimit)
	for i, c := range cmds {
		// The report reads the step's name as one line.
		fmt.Fprintf(&b, "step %d %s", i, shellQuote(strings.ReplaceAll(c.Step, "\n", " ")))
		for _, arg := range c.Argv {
			b.WriteString(" " + shellQuote(arg))
		}
		b.WriteString("\n")
	}
	// The inputs hold the bootstrap data, its token too: they go once the steps have run.
	b.WriteString(`rm -f "$d"/*.stdin` + "\n")
	b.WriteString(`date +%s > "$d/finished-at"` + "\n")
	return []byte(b.String())
}

// shellQuote quotes s for sh: single quotes keep every byte but the single quote itself.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// execOK runs one command of Start or Stop and fails on a non-zero exit code.
func execOK(ctx context.Context, e Execer, node, what string, argv []string, stdin []byte) error {
	var in io.Reader
	if stdin != nil {
		in = bytes.NewReader(stdin)
	}
	res, err := e.Exec(ctx, node, argv, in)
	if err != nil {
		return fmt.Errorf("failed to %s in %s: %w", what, node, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("failed to %s in %s: exit code %d: %s", what, node, res.ExitCode, Redact(string(bytes.TrimSpace(res.Stderr))))
	}
	return nil
}
