package kubeadm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"github.com/spf13/pflag"
)

// VersionFile is where the node image records its Kubernetes version, as kindest/node does.
const VersionFile = "/kind/version"

// Env holds what the CLI reads from its surroundings, replaced in unit tests.
type Env struct {
	VersionFile   string
	KubernetesDir string
	Hostname      func() (string, error)
	Stdout        io.Writer
	Stderr        io.Writer
}

// DefaultEnv is the environment inside the node image.
func DefaultEnv() Env {
	return Env{
		VersionFile:   VersionFile,
		KubernetesDir: "/etc/kubernetes",
		Hostname:      os.Hostname,
		Stdout:        os.Stdout,
		Stderr:        os.Stderr,
	}
}

// Main runs the stub with args (without the program name) and returns the exit code.
func Main(ctx context.Context, args []string, env Env) int {
	err := run(ctx, args, env)
	if err == nil {
		return 0
	}
	_, _ = fmt.Fprintf(env.Stderr, "error: %v\n", err)
	if exitError, ok := errors.AsType[*ExitError](err); ok {
		return exitError.Code
	}
	return ExitFailure
}

func run(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		return usage()
	}
	switch args[0] {
	case "version":
		return version(args[1:], env)
	case "join":
		return join(ctx, args[1:], env)
	default:
		return usage()
	}
}

func usage() error {
	return exitErr(ExitUsage, "this stub kubeadm (CAPDMP test node image) implements only `kubeadm join --config <file> [--ignore-preflight-errors=...] [-v N]` and `kubeadm version [-o short|json]`")
}

func readVersion(env Env) (semver.Version, error) {
	b, err := os.ReadFile(env.VersionFile)
	if err != nil {
		return semver.Version{}, exitErr(ExitFailure, "reading the node image's version: %w", err)
	}
	v, err := semver.ParseTolerant(strings.TrimSpace(string(b)))
	if err != nil {
		return semver.Version{}, exitErr(ExitFailure, "the node image's version in %s: %w", env.VersionFile, err)
	}
	return v, nil
}

func version(args []string, env Env) error {
	flags := newFlagSet("kubeadm version")
	output := flags.StringP("output", "o", "", "")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	v, err := readVersion(env)
	if err != nil {
		return err
	}
	gitVersion := "v" + v.String()
	info := map[string]string{
		"major": fmt.Sprint(v.Major), "minor": fmt.Sprint(v.Minor), "gitVersion": gitVersion,
		"gitCommit": "capdmp-stub", "gitTreeState": "clean", "compiler": "gc", "platform": "linux/amd64",
	}
	switch *output {
	case "short":
		_, _ = fmt.Fprintln(env.Stdout, gitVersion)
	case "json":
		b, err := json.MarshalIndent(map[string]any{"clientVersion": info}, "", "  ")
		if err != nil {
			return exitErr(ExitFailure, "kubeadm version: %w", err)
		}
		_, _ = fmt.Fprintln(env.Stdout, string(b))
	case "":
		_, _ = fmt.Fprintf(env.Stdout, "kubeadm version: &version.Info{Major:%q, Minor:%q, GitVersion:%q, GitCommit:\"capdmp-stub\", GitTreeState:\"clean\", Compiler:\"gc\"}\n",
			info["major"], info["minor"], gitVersion)
	default:
		return exitErr(ExitUsage, "kubeadm version: unsupported output format %q (short, json)", *output)
	}
	return nil
}

func join(ctx context.Context, args []string, env Env) error {
	flags := newFlagSet("kubeadm join")
	configPath := flags.String("config", "", "")
	ignore := flags.StringSlice("ignore-preflight-errors", nil, "")
	flags.StringP("v", "v", "", "")
	skipPhases := flags.StringSlice("skip-phases", nil, "")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if len(*skipPhases) > 0 {
		_, _ = fmt.Fprintf(env.Stderr, "[stub] ignoring --skip-phases\n")
	}
	if *configPath == "" {
		return exitErr(ExitUsage, "kubeadm join: this stub implements only `kubeadm join --config <file>`")
	}
	v, err := readVersion(env)
	if err != nil {
		return err
	}
	hostname, _ := env.Hostname()
	_, _ = fmt.Fprintf(env.Stdout, "[stub] kubeadm v%s (CAPDMP test node image): join --config %s\n", v, *configPath)
	return Join(ctx, JoinOptions{
		ConfigPath:              *configPath,
		IgnorePreflightErrors:   *ignore,
		KubeadmVersion:          v,
		Hostname:                hostname,
		KubernetesDir:           env.KubernetesDir,
		DefaultDiscoveryTimeout: 30 * time.Second,
		// kubeadm's default timeouts.tlsBootstrap.
		DefaultTLSBootstrapTimeout: 5 * time.Minute,
		UnauthorizedGrace:          2 * time.Second,
		Out:                        env.Stdout,
	})
}

func newFlagSet(command string) *pflag.FlagSet {
	flags := pflag.NewFlagSet(command, pflag.ContinueOnError)
	flags.SetOutput(io.Discard)
	return flags
}

// parseFlags parses args; a flag the stub does not implement, or an argument, is a usage error.
// The API server endpoint argument is refused: the stub reads everything from --config, and with
// --config the real kubeadm refuses it too.
func parseFlags(flags *pflag.FlagSet, args []string) error {
	if err := flags.Parse(args); err != nil {
		return exitErr(ExitUsage, "%s: %v (not implemented by this stub)", flags.Name(), err)
	}
	if flags.NArg() > 0 {
		return exitErr(ExitUsage, "%s: this stub reads everything from --config; unexpected argument %q", flags.Name(), flags.Arg(0))
	}
	return nil
}
