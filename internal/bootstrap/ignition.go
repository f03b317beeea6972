package bootstrap

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
)

const (
	// kubeadmUnit and kubeadmScript are the systemd unit and script CABPK's Ignition runs kubeadm
	// with (bootstrap/kubeadm/pkg/ignition/clc).
	kubeadmUnit   = "kubeadm.service"
	kubeadmScript = "/etc/kubeadm.sh"

	systemdUnitDir = "/etc/systemd/system"
)

// ignitionConfig is the part of an Ignition config (spec 2.x and 3.x) CAPDMP acts on.
type ignitionConfig struct {
	Ignition struct {
		Version string `json:"version"`
	} `json:"ignition"`
	Passwd struct {
		Users []json.RawMessage `json:"users"`
	} `json:"passwd"`
	Storage struct {
		Disks       []json.RawMessage `json:"disks"`
		Raid        []json.RawMessage `json:"raid"`
		Filesystems []json.RawMessage `json:"filesystems"`
		Directories []ignitionNode    `json:"directories"`
		Files       []ignitionFile    `json:"files"`
		Links       []ignitionLink    `json:"links"`
	} `json:"storage"`
	Systemd struct {
		Units []ignitionUnit `json:"units"`
	} `json:"systemd"`
	Networkd struct {
		Units []json.RawMessage `json:"units"`
	} `json:"networkd"`
}

type ignitionNode struct {
	// Filesystem is spec 2.x only; CABPK's files are on "root".
	Filesystem string        `json:"filesystem"`
	Path       string        `json:"path"`
	Mode       *int          `json:"mode"`
	User       *ignitionUser `json:"user"`
	Group      *ignitionUser `json:"group"`
}

type ignitionUser struct {
	ID   *int   `json:"id"`
	Name string `json:"name"`
}

type ignitionFile struct {
	ignitionNode
	Contents ignitionResource `json:"contents"`
	// Append is a bool in spec 2.x and a list of resources in 3.x.
	Append json.RawMessage `json:"append"`
}

type ignitionResource struct {
	Source      string `json:"source"`
	Compression string `json:"compression"`
}

type ignitionLink struct {
	ignitionNode
	Target string `json:"target"`
	Hard   bool   `json:"hard"`
}

type ignitionUnit struct {
	Name     string `json:"name"`
	Enable   bool   `json:"enable"` // spec 2.x, deprecated there
	Enabled  *bool  `json:"enabled"`
	Mask     bool   `json:"mask"`
	Contents string `json:"contents"`
	Dropins  []struct {
		Name     string `json:"name"`
		Contents string `json:"contents"`
	} `json:"dropins"`
}

func parseIgnition(value []byte) (*ignitionConfig, error) {
	cfg := &ignitionConfig{}
	if err := json.Unmarshal(value, cfg); err != nil {
		return nil, fmt.Errorf("not an Ignition config: %w", err)
	}
	v := cfg.Ignition.Version
	if !strings.HasPrefix(v, "2.") && !strings.HasPrefix(v, "3.") {
		return nil, fmt.Errorf("unsupported Ignition spec version %q: want 2.x or 3.x", v)
	}
	return cfg, nil
}

// ignitionCommands writes what Ignition would write before the node boots, then runs CABPK's
// kubeadm script directly rather than through systemd: the exec then reports kubeadm's output and
// exit code, and nodes without systemd (a stub image) bootstrap too. The kubeadm unit is written
// but not enabled, so that a restart of the node does not run kubeadm again.
func ignitionCommands(value []byte, vars Vars) ([]Command, error) {
	cfg, err := parseIgnition(value)
	if err != nil {
		return nil, err
	}
	var out []Command

	for i, d := range cfg.Storage.Directories {
		if err := checkNode(d); err != nil {
			return nil, fmt.Errorf("storage.directories[%d] %s: %w", i, d.Path, err)
		}
		out = append(out, Command{
			Argv: []string{"/bin/sh", "-c", `set -e; mkdir -p "$1"; chmod "$2" "$1"; [ -z "$3" ] || chown "$3" "$1"`,
				"capdmp-mkdir", d.Path, ignitionMode(d.Mode, 0o755), ignitionOwner(d)},
			Step: fmt.Sprintf("storage.directories[%d] %s", i, d.Path),
		})
	}

	files, err := ignitionFiles(cfg)
	if err != nil {
		return nil, err
	}
	runKubeadm := false
	for i, f := range files {
		if f.Path == kubeadmScript {
			f.Content = []byte(withIgnorePreflightErrors(string(f.Content), vars.IgnorePreflightErrors))
		}
		out = append(out, writeFileCommand(f, fmt.Sprintf("storage.files[%d] %s", i, f.Path)))
	}

	for i, l := range cfg.Storage.Links {
		if err := checkNode(l.ignitionNode); err != nil {
			return nil, fmt.Errorf("storage.links[%d] %s: %w", i, l.Path, err)
		}
		flag := "-sf"
		if l.Hard {
			flag = "-f"
		}
		out = append(out, Command{
			Argv: []string{"/bin/sh", "-c", `set -e; d="${1%/*}"; [ -z "$d" ] || mkdir -p "$d"; ln ` + flag + ` "$2" "$1"`,
				"capdmp-link", l.Path, l.Target},
			Step: fmt.Sprintf("storage.links[%d] %s", i, l.Path),
		})
	}

	for i, u := range cfg.Systemd.Units {
		if u.Name == "" || strings.Contains(u.Name, "/") {
			return nil, fmt.Errorf("systemd.units[%d]: invalid unit name %q", i, u.Name)
		}
		step := fmt.Sprintf("systemd.units[%d] %s", i, u.Name)
		if u.Contents != "" {
			out = append(out, writeFileCommand(file{Path: path.Join(systemdUnitDir, u.Name), Content: []byte(u.Contents), Permissions: "0644"}, step))
		}
		for j, d := range u.Dropins {
			if d.Name == "" || strings.Contains(d.Name, "/") {
				return nil, fmt.Errorf("systemd.units[%d].dropins[%d]: invalid drop-in name %q", i, j, d.Name)
			}
			p := path.Join(systemdUnitDir, u.Name+".d", d.Name)
			out = append(out, writeFileCommand(file{Path: p, Content: []byte(d.Contents), Permissions: "0644"}, fmt.Sprintf("%s drop-in %s", step, d.Name)))
		}
		if u.Name == kubeadmUnit {
			runKubeadm = true
			continue
		}
		// Enabling and starting only makes sense where systemd runs; elsewhere the unit file is
		// all that can be done.
		switch {
		case u.Mask:
			out = append(out, systemctlCommand("mask", u.Name, step))
		case u.Enable || (u.Enabled != nil && *u.Enabled):
			out = append(out, systemctlCommand("enable --now", u.Name, step))
		}
	}

	if runKubeadm {
		out = append(out, Command{
			// CABPK's unit runs the script with bash; nodes without bash run it with sh.
			Argv: []string{"/bin/sh", "-c", `if [ -x /bin/bash ]; then exec /bin/bash "$1"; fi; exec /bin/sh "$1"`, "capdmp-kubeadm", kubeadmScript},
			Step: "run " + kubeadmScript,
		})
	}
	return out, nil
}

func systemctlCommand(verb, unit, step string) Command {
	return Command{
		Argv: []string{"/bin/sh", "-c", `if [ -d /run/systemd/system ]; then systemctl daemon-reload && systemctl ` + verb + ` "$1"; fi`, "capdmp-systemctl", unit},
		Step: step + " " + strings.Fields(verb)[0],
	}
}

// ignitionFiles decodes storage.files, in order.
func ignitionFiles(cfg *ignitionConfig) ([]file, error) {
	files := make([]file, 0, len(cfg.Storage.Files))
	budget := newGunzipBudget()
	for i, f := range cfg.Storage.Files {
		decoded, err := decodeIgnitionFile(f, budget)
		if err != nil {
			return nil, fmt.Errorf("storage.files[%d] %s: %w", i, f.Path, err)
		}
		files = append(files, decoded)
	}
	return files, nil
}

func decodeIgnitionFile(f ignitionFile, budget *gunzipBudget) (file, error) {
	if err := checkNode(f.ignitionNode); err != nil {
		return file{}, err
	}
	out := file{Path: f.Path, Permissions: ignitionMode(f.Mode, 0o644), Owner: ignitionOwner(f.ignitionNode)}
	content, err := decodeIgnitionResource(f.Contents, budget)
	if err != nil {
		return file{}, fmt.Errorf("contents: %w", err)
	}
	out.Content = content

	if len(f.Append) > 0 && string(f.Append) != "null" {
		var appendV2 bool
		if err := json.Unmarshal(f.Append, &appendV2); err == nil {
			out.Append = appendV2
			return out, nil
		}
		var appendV3 []ignitionResource
		if err := json.Unmarshal(f.Append, &appendV3); err != nil {
			return file{}, fmt.Errorf("append: %w", err)
		}
		for j, r := range appendV3 {
			more, err := decodeIgnitionResource(r, budget)
			if err != nil {
				return file{}, fmt.Errorf("append[%d]: %w", j, err)
			}
			out.Content = append(out.Content, more...)
		}
		// In spec 3 the file is written from contents (if any), then the fragments appended.
		out.Append = f.Contents.Source == ""
	}
	return out, nil
}

func checkNode(n ignitionNode) error {
	if !strings.HasPrefix(n.Path, "/") {
		return errors.New("path must be absolute")
	}
	if n.Filesystem != "" && n.Filesystem != "root" {
		return fmt.Errorf("filesystem %q is not supported: nodes have only the root filesystem", n.Filesystem)
	}
	return nil
}

func ignitionMode(mode *int, def int) string {
	if mode == nil {
		return fmt.Sprintf("%04o", def)
	}
	return fmt.Sprintf("%04o", *mode&0o7777)
}

func ignitionOwner(n ignitionNode) string {
	id := func(u *ignitionUser) string {
		switch {
		case u == nil:
			return ""
		case u.Name != "":
			return u.Name
		case u.ID != nil:
			return fmt.Sprint(*u.ID)
		}
		return ""
	}
	user, group := id(n.User), id(n.Group)
	switch {
	case user == "" && group == "":
		return ""
	case group == "":
		return user
	case user == "":
		return "root:" + group
	}
	return user + ":" + group
}

// decodeIgnitionResource returns the content of a data URL (RFC 2397), the only source a node
// without network can use, uncompressed within budget.
func decodeIgnitionResource(r ignitionResource, budget *gunzipBudget) ([]byte, error) {
	if r.Source == "" {
		return []byte{}, nil
	}
	src := strings.TrimSpace(r.Source)
	if !strings.HasPrefix(src, "data:") {
		scheme, _, _ := strings.Cut(src, ":")
		return nil, fmt.Errorf("source scheme %q is not supported: only data URLs are", scheme)
	}
	meta, payload, ok := strings.Cut(strings.TrimPrefix(src, "data:"), ",")
	if !ok {
		return nil, errors.New("malformed data URL: no comma")
	}
	unescaped, err := url.PathUnescape(payload)
	if err != nil {
		return nil, fmt.Errorf("malformed data URL: %w", err)
	}
	data := []byte(unescaped)
	if strings.HasSuffix(meta, ";base64") {
		if data, err = base64.StdEncoding.DecodeString(unescaped); err != nil {
			return nil, fmt.Errorf("malformed base64 data URL: %w", err)
		}
	}
	switch r.Compression {
	case "":
	case "gzip":
		if data, err = budget.gunzip(data); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("compression %q is not supported", r.Compression)
	}
	return data, nil
}
