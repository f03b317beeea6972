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
	output := ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o" || a == "--output":
			if i+1 >= len(args) {
				return exitErr(ExitUsage, "flag needs an argument: %s", a)
			}
			i++
			output = args[i]
		case strings.HasPrefix(a, "-o="), strings.HasPrefix(a, "--output="):
			_, output, _ = strings.Cut(a, "=")
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			output = a[2:]
		default:
			return exitErr(ExitUsage, "kubeadm version: unknown flag %s", a)
		}
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
	switch output {
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
		return exitErr(ExitUsage, "kubeadm version: unsupported output format %q (short, json)", output)
	}
	return nil
}

func join(ctx context.Context, args []string, env Env) error {
	var configPath string
	var ignore []string
	// flagValue reads "--flag value" or "--flag=value".
	flagValue := func(i *int, a, name string) (string, bool, error) {
		if a == name {
			if *i+1 >= len(args) {
				return "", true, exitErr(ExitUsage, "flag needs an argument: %s", name)
			}
			*i++
			return args[*i], true, nil
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true, nil
		}
		return "", false, nil
	}
	for i := 0; i < len(args); i++ { //nolint:intrange // flagValue advances i past a flag's value
		a := args[i]
		if v, ok, err := flagValue(&i, a, "--config"); ok {
			if err != nil {
				return err
			}
			configPath = v
			continue
		}
		if v, ok, err := flagValue(&i, a, "--ignore-preflight-errors"); ok {
			if err != nil {
				return err
			}
			ignore = append(ignore, strings.Split(v, ",")...)
			continue
		}
		if _, ok, err := flagValue(&i, a, "-v"); ok {
			if err != nil {
				return err
			}
			continue
		}
		if _, ok, err := flagValue(&i, a, "--v"); ok {
			if err != nil {
				return err
			}
			continue
		}
		if _, ok, err := flagValue(&i, a, "--skip-phases"); ok {
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(env.Stderr, "[stub] ignoring --skip-phases\n")
			continue
		}
		if !strings.HasPrefix(a, "-") {
			// The API server endpoint argument; with --config the real kubeadm refuses it too.
			return exitErr(ExitUsage, "kubeadm join: this stub reads everything from --config; unexpected argument %q", a)
		}
		return exitErr(ExitUsage, "kubeadm join: flag %s is not implemented by this stub", a)
	}
	if configPath == "" {
		return exitErr(ExitUsage, "kubeadm join: this stub implements only `kubeadm join --config <file>`")
	}
	v, err := readVersion(env)
	if err != nil {
		return err
	}
	hostname, _ := env.Hostname()
	_, _ = fmt.Fprintf(env.Stdout, "[stub] kubeadm v%s (CAPDMP test node image): join --config %s\n", v, configPath)
	return Join(ctx, JoinOptions{
		ConfigPath:              configPath,
		IgnorePreflightErrors:   ignore,
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
