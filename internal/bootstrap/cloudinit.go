package bootstrap

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

const (
	cloudConfigHeader = "#cloud-config"
	// jinjaHeader makes cloud-init render the document as a Jinja template with the instance's
	// data before reading it; CABPK always writes it.
	jinjaHeader = "## template: jinja"
)

// cloudConfigModules are the cloud-config modules Commands turns into steps.
var cloudConfigModules = []string{"bootcmd", "write_files", "runcmd"}

// cloudConfig is the part of a cloud-config document CAPDMP acts on.
type cloudConfig struct {
	BootCmd    []json.RawMessage `json:"bootcmd"`
	WriteFiles []cloudConfigFile `json:"write_files"`
	RunCmd     []json.RawMessage `json:"runcmd"`
}

type cloudConfigFile struct {
	Path        string          `json:"path"`
	Content     string          `json:"content"`
	Encoding    string          `json:"encoding"`
	Owner       string          `json:"owner"`
	Permissions json.RawMessage `json:"permissions"`
	Append      bool            `json:"append"`
	Defer       bool            `json:"defer"`
	Source      json.RawMessage `json:"source"`
}

func cloudConfigCommands(value []byte, vars Vars) ([]Command, error) {
	rendered, err := renderJinja(value, vars)
	if err != nil {
		return nil, err
	}
	cfg, _, err := parseCloudConfig(rendered)
	if err != nil {
		return nil, err
	}

	var out []Command
	for i, raw := range cfg.BootCmd {
		c, err := shellOrArgv(raw, vars)
		if err != nil {
			return nil, fmt.Errorf("bootcmd[%d]: %w", i, err)
		}
		c.Step = fmt.Sprintf("bootcmd[%d]", i)
		out = append(out, c)
	}

	files, err := cloudConfigFiles(cfg)
	if err != nil {
		return nil, err
	}
	// cloud-init writes deferred files in its final stage, still before runcmd's script runs.
	for _, deferred := range []bool{false, true} {
		for i, f := range files {
			if cfg.WriteFiles[i].Defer != deferred {
				continue
			}
			out = append(out, writeFileCommand(f, fmt.Sprintf("write_files[%d] %s", i, f.Path)))
		}
	}

	for i, raw := range cfg.RunCmd {
		c, err := shellOrArgv(raw, vars)
		if err != nil {
			return nil, fmt.Errorf("runcmd[%d]: %w", i, err)
		}
		c.Step = fmt.Sprintf("runcmd[%d]", i)
		out = append(out, c)
	}
	return out, nil
}

// parseCloudConfig reads a cloud-config document; it also returns its top-level keys.
func parseCloudConfig(value []byte) (*cloudConfig, []string, error) {
	if !hasCloudConfigHeader(value) {
		return nil, nil, fmt.Errorf("not a cloud-config document: it must start with %q", cloudConfigHeader)
	}
	top := map[string]json.RawMessage{}
	if err := yaml.Unmarshal(value, &top); err != nil {
		return nil, nil, fmt.Errorf("cloud-config is not a YAML mapping: %w", err)
	}
	cfg := &cloudConfig{}
	if err := yaml.Unmarshal(value, cfg); err != nil {
		return nil, nil, fmt.Errorf("failed to read cloud-config modules %v: %w", cloudConfigModules, err)
	}
	return cfg, slices.Sorted(maps.Keys(top)), nil
}

// hasCloudConfigHeader tells whether the first line that is not the Jinja header is #cloud-config.
func hasCloudConfigHeader(value []byte) bool {
	for _, line := range strings.Split(string(value), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line == jinjaHeader {
			continue
		}
		return strings.HasPrefix(line, cloudConfigHeader)
	}
	return false
}

// cloudConfigFiles decodes write_files, in document order.
func cloudConfigFiles(cfg *cloudConfig) ([]file, error) {
	files := make([]file, 0, len(cfg.WriteFiles))
	budget := newGunzipBudget()
	for i, wf := range cfg.WriteFiles {
		f, err := decodeCloudConfigFile(wf, budget)
		if err != nil {
			return nil, fmt.Errorf("write_files[%d] %s: %w", i, wf.Path, err)
		}
		files = append(files, f)
	}
	return files, nil
}

func decodeCloudConfigFile(wf cloudConfigFile, budget *gunzipBudget) (file, error) {
	path := strings.TrimSpace(wf.Path)
	if !strings.HasPrefix(path, "/") {
		return file{}, errors.New("path must be absolute")
	}
	if len(wf.Source) > 0 && string(wf.Source) != "null" {
		// Nodes have no network to fetch from, and a fetched file could not be hashed with the data.
		return file{}, errors.New("source is not supported: put the content in the data")
	}
	content, err := decodeCloudConfigContent(wf.Content, wf.Encoding, budget)
	if err != nil {
		return file{}, err
	}
	perms, err := cloudConfigPermissions(wf.Permissions)
	if err != nil {
		return file{}, err
	}
	owner := strings.TrimSpace(wf.Owner)
	if owner == "" {
		owner = "root:root"
	}
	return file{Path: path, Content: content, Permissions: perms, Owner: owner, Append: wf.Append}, nil
}

// decodeCloudConfigContent decodes content as cloud-init's write_files does. Like cloud-init, an
// unknown encoding is written as plain text. Gzip content is decompressed within budget.
func decodeCloudConfigContent(content, encoding string, budget *gunzipBudget) ([]byte, error) {
	var b64, gz bool
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "b64", "base64":
		b64 = true
	case "gz", "gzip":
		gz = true
	case "gz+b64", "gz+base64", "gzip+b64", "gzip+base64":
		b64, gz = true, true
	}
	data := []byte(content)
	if b64 {
		// The standard decoder skips the line breaks a YAML block scalar leaves.
		decoded, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return nil, fmt.Errorf("content is not valid base64: %w", err)
		}
		data = decoded
	}
	if gz {
		return budget.gunzip(data)
	}
	return data, nil
}

// cloudConfigPermissions reads permissions given as a string ("0640") or as a number, which YAML
// 1.1 (cloud-init's and this parser's) reads in octal when written 0640.
func cloudConfigPermissions(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "0644", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return normalizePermissions(s, "0644")
	}
	var n uint32
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", fmt.Errorf("invalid permissions %s", raw)
	}
	return normalizePermissions(fmt.Sprintf("%o", n), "0644")
}

// shellOrArgv turns a runcmd or bootcmd entry into a command: a string runs with /bin/sh -c, a
// list runs as argv, as cloud-init does.
func shellOrArgv(raw json.RawMessage, vars Vars) (Command, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return Command{Argv: []string{"/bin/sh", "-c", withIgnorePreflightErrors(s, vars.IgnorePreflightErrors)}}, nil
	}
	var items []any
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return Command{}, errors.New("must be a string or a non-empty list of strings")
	}
	argv := make([]string, 0, len(items))
	for _, item := range items {
		switch v := item.(type) {
		case string:
			argv = append(argv, v)
		case float64, bool:
			argv = append(argv, fmt.Sprint(v))
		default:
			return Command{}, errors.New("list entries must be strings")
		}
	}
	return Command{Argv: argvWithIgnorePreflightErrors(argv, vars.IgnorePreflightErrors)}, nil
}

// jinjaExpression matches a Jinja expression such as {{ ds.meta_data.local_hostname }}.
var jinjaExpression = regexp.MustCompile(`\{\{\s*(.*?)\s*\}\}`)

// bracketAccess matches ["key"] and ['key'] in a Jinja variable path.
var bracketAccess = regexp.MustCompile(`\[\s*["']([^"']+)["']\s*\]`)

// renderJinja substitutes the cloud-init instance variables kind-style providers know, when the
// document asks for Jinja rendering. Anything else in {{ }} is an error rather than text that
// cloud-init would have rendered differently.
func renderJinja(value []byte, vars Vars) ([]byte, error) {
	if !hasJinjaHeader(value) {
		return value, nil
	}
	return substituteJinja(value, vars)
}

// substituteJinja is renderJinja on text that is part of a document with the Jinja header.
func substituteJinja(value []byte, vars Vars) ([]byte, error) {
	known := map[string]string{
		"ds.meta_data.hostname":       vars.Hostname,
		"ds.meta_data.local_hostname": vars.Hostname,
		"v1.local_hostname":           vars.Hostname,
		"local_hostname":              vars.Hostname,
		"ds.meta_data.instance_id":    vars.InstanceID,
		"ds.meta_data.instance-id":    vars.InstanceID,
		"v1.instance_id":              vars.InstanceID,
		"instance_id":                 vars.InstanceID,
	}
	if bytes.Contains(value, []byte("{%")) {
		return nil, errors.New("jinja statements ({% ... %}) are not supported; only {{ }} instance variables are")
	}
	var unknown []string
	out := jinjaExpression.ReplaceAllFunc(value, func(m []byte) []byte {
		expr := string(jinjaExpression.FindSubmatch(m)[1])
		name := bracketAccess.ReplaceAllString(strings.ReplaceAll(expr, " ", ""), ".$1")
		if v, ok := known[name]; ok {
			return []byte(v)
		}
		unknown = append(unknown, "{{ "+expr+" }}")
		return m
	})
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unsupported jinja expressions %v: supported are %v", unknown, slices.Sorted(maps.Keys(known)))
	}
	return out, nil
}

func hasJinjaHeader(value []byte) bool {
	first, _, _ := bytes.Cut(value, []byte("\n"))
	return strings.TrimSpace(string(first)) == jinjaHeader
}
