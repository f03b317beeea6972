package bootstrap

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

const (
	// SentinelPath is the file whose presence says a node bootstrapped successfully (the Cluster
	// API bootstrap provider contract; CABPK's join command writes it too).
	SentinelPath = "/run/cluster-api/bootstrap-success.complete"

	// /run is a tmpfs in kind nodes and is emptied when the container restarts. These markers live
	// in the node's /var volume, so that a restarted node is still known as bootstrapped, and a
	// bootstrap cut short by a restart is known as such rather than run again.
	persistentStartedPath  = "/var/lib/capdmp/bootstrap.started"
	persistentCompletePath = "/var/lib/capdmp/bootstrap.complete"

	// DefaultIgnorePreflightErrors are the kubeadm preflight checks a node in a container fails
	// (no kernel config, swap on the host, no bridge netfilter sysctl), as CAPD skips them.
	DefaultIgnorePreflightErrors = "SystemVerification,Swap,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"
)

// Command is one step of a bootstrap: argv, run without a shell unless argv[0] is one, and stdin.
type Command struct {
	Argv []string
	// Stdin is fed to the command when not nil.
	Stdin []byte
	// Step names the step ("write_files[2] /run/kubeadm/kubeadm-join-config.yaml", "runcmd[1]")
	// for conditions and logs. It never contains bootstrap data; Argv and Stdin may.
	Step string
}

// String is the step name, so that printing a Command never prints bootstrap data.
func (c Command) String() string {
	return c.Step
}

// Vars are the per-node values substituted into bootstrap data.
type Vars struct {
	// Hostname is the node's host name, the container name: cloud-init's local_hostname.
	Hostname string
	// InstanceID is cloud-init's instance_id; the Hostname when empty.
	InstanceID string
	// IgnorePreflightErrors is added to `kubeadm join`/`kubeadm init` as
	// --ignore-preflight-errors when not empty; nodes in containers need
	// DefaultIgnorePreflightErrors.
	IgnorePreflightErrors string
}

// Commands turns bootstrap data into the steps that bootstrap a node, in order; Start runs them in
// the node one after the other and stops at the first non-zero exit code. The last step writes
// the success sentinel, so a node whose bootstrap failed is never reported as bootstrapped. The
// first step records in the node's /var that the bootstrap started.
//
// Only POSIX sh features and mkdir, cat, chmod, chown are used, so that a busybox node runs them.
func Commands(data *Data, vars Vars) ([]Command, error) {
	if data == nil {
		return nil, errors.New("failed to build bootstrap commands: no bootstrap data")
	}
	if vars.Hostname == "" {
		return nil, errors.New("failed to build bootstrap commands: the node's hostname is required")
	}
	if vars.InstanceID == "" {
		vars.InstanceID = vars.Hostname
	}
	var steps []Command
	var err error
	switch data.Format {
	case FormatCloudConfig, "":
		steps, err = cloudConfigCommands(data.Value, vars)
	case FormatIgnition:
		steps, err = ignitionCommands(data.Value, vars)
	default:
		err = fmt.Errorf("unsupported format %q", data.Format)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to build bootstrap commands from %s: %w", data.Format, err)
	}
	out := make([]Command, 0, len(steps)+2)
	out = append(out, startedCommand())
	out = append(out, steps...)
	out = append(out, sentinelCommand())
	return out, nil
}

func startedCommand() Command {
	return Command{
		Argv: []string{"/bin/sh", "-c", fmt.Sprintf("mkdir -p %s && echo started > %s", dirOf(persistentStartedPath), persistentStartedPath)},
		Step: "record bootstrap start",
	}
}

func sentinelCommand() Command {
	return Command{
		Argv: []string{"/bin/sh", "-c", fmt.Sprintf("mkdir -p %s %s && echo success > %s && echo success > %s",
			dirOf(SentinelPath), dirOf(persistentCompletePath), SentinelPath, persistentCompletePath)},
		Step: "write bootstrap sentinel",
	}
}

// file is a file to write, whatever format it came from.
type file struct {
	Path        string
	Content     []byte
	Permissions string // octal, e.g. "0644"
	Owner       string // "user", "user:group" or empty for root
	Append      bool
}

// writeFileScript writes stdin to $1 with mode $2 and owner $3 (skipped when empty). Paths and
// modes are positional arguments, never spliced into the script, so no quoting can go wrong.
const (
	writeFileScript  = `set -e; d="${1%/*}"; [ -z "$d" ] || mkdir -p "$d"; cat > "$1"; chmod "$2" "$1"; [ -z "$3" ] || chown "$3" "$1"`
	appendFileScript = `set -e; d="${1%/*}"; [ -z "$d" ] || mkdir -p "$d"; cat >> "$1"; chmod "$2" "$1"; [ -z "$3" ] || chown "$3" "$1"`
	// writeFileName is $0 of the write scripts; it also tells a command that writes a file.
	writeFileName = "capdmp-write-file"
)

func writeFileCommand(f file, step string) Command {
	script := writeFileScript
	if f.Append {
		script = appendFileScript
	}
	owner := f.Owner
	if isRoot(owner) {
		// Files are created by root already; skipping chown also spares nodes without
		// /etc/passwd (a stub image) a lookup of "root".
		owner = ""
	}
	content := f.Content
	if content == nil {
		content = []byte{}
	}
	return Command{
		Argv:  []string{"/bin/sh", "-c", script, writeFileName, f.Path, f.Permissions, owner},
		Stdin: content,
		Step:  step,
	}
}

// writtenPath is the path of the file a writeFileCommand writes; false for other commands.
func writtenPath(c Command) (string, bool) {
	if len(c.Argv) < 5 || c.Argv[0] != "/bin/sh" || c.Argv[3] != writeFileName {
		return "", false
	}
	return c.Argv[4], true
}

func isRoot(owner string) bool {
	switch strings.TrimSpace(owner) {
	case "", "root", "root:root", "root:", "0", "0:0":
		return true
	}
	return false
}

// normalizePermissions returns an octal mode as "0644"; cloud-init reads modes as octal strings or
// numbers (YAML 1.1 reads an unquoted 0644 as octal), Ignition as decimal numbers.
func normalizePermissions(p string, def string) (string, error) {
	p = strings.TrimSpace(p)
	if p == "" {
		return def, nil
	}
	p = strings.TrimPrefix(strings.TrimPrefix(p, "0o"), "0O")
	mode, err := strconv.ParseUint(p, 8, 32)
	if err != nil || mode > 0o7777 {
		return "", fmt.Errorf("invalid permissions %q: want an octal mode such as 0644", p)
	}
	return fmt.Sprintf("%04o", mode), nil
}

func dirOf(path string) string {
	if i := strings.LastIndex(path, "/"); i > 0 {
		return path[:i]
	}
	return "/"
}

// kubeadmCommand finds `kubeadm join` and `kubeadm init` in shell text.
var kubeadmCommand = regexp.MustCompile(`(^|[\s;&|(])(kubeadm\s+(?:join|init))\b`)

// withIgnorePreflightErrors adds --ignore-preflight-errors to kubeadm join/init in shell text.
func withIgnorePreflightErrors(script, ignore string) string {
	if ignore == "" {
		return script
	}
	return kubeadmCommand.ReplaceAllString(script, "${1}${2} --ignore-preflight-errors="+ignore)
}

// argvWithIgnorePreflightErrors adds --ignore-preflight-errors to a kubeadm join/init argv.
func argvWithIgnorePreflightErrors(argv []string, ignore string) []string {
	if ignore == "" || len(argv) < 2 || (argv[0] != "kubeadm" && !strings.HasSuffix(argv[0], "/kubeadm")) ||
		(argv[1] != "join" && argv[1] != "init") {
		return argv
	}
	out := append([]string{argv[0], argv[1], "--ignore-preflight-errors=" + ignore}, argv[2:]...)
	return out
}
