package bootstrap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// configurationHost stands for the node's host name: the configuration is the same for every node.
const configurationHost = "node"

// Configuration identifies the configuration the data bootstraps a node with: a hash of the
// commands it turns into (the files it writes, with their content, owners and modes, and the
// commands it runs), with every bootstrap token taken out, and the control plane version taken
// out of the files rendered from a template (Templates). A bootstrap provider renders the same
// configuration again when it rotates or refreshes a token, and CABPK renders it with the control
// plane's current version ({{ .controlPlane.version }} of a contentFormat Template file) whenever
// it renders: the data changes, its Configuration does not, so that a control plane upgrade alone
// never rolls a pool. An edit of what the nodes get (a file, a template, a version written in a
// file rather than substituted, a kubelet flag, a command, the kubeadm API the data is written
// in) changes it. Data whose commands cannot be built is identified by its value, tokens taken
// out. 32 hex digits, so that it fits a Kubernetes label value.
//
// Rendering the templates spends from a budget (templateBudget): a template that would exceed
// it, or a ctx done first, is an error, which names the file.
func (d Data) Configuration(ctx context.Context) (string, error) {
	budget := newTemplateBudget(ctx)
	h := sha256.New()
	write := func(b []byte) {
		_, _ = h.Write(anyBootstrapToken.ReplaceAll(b, []byte("<bootstrap token>")))
		_, _ = h.Write([]byte{0})
	}
	write([]byte(d.Format))
	commands, err := Commands(&d, Vars{Hostname: configurationHost})
	if err != nil {
		write(d.Value)
	}
	for _, c := range commands {
		for _, arg := range c.Argv {
			write([]byte(arg))
		}
		input, err := d.configurationInput(budget, c)
		if err != nil {
			return "", err
		}
		write(input)
	}
	return hex.EncodeToString(h.Sum(nil))[:hashLabelLength], nil
}

// configurationInput is the stdin of a command as Configuration counts it: the content of a file
// rendered from one of the data's Templates with the control plane version taken out; anything
// else as it is. Data without Templates (another bootstrap provider, or no templated file) counts
// as it did before templates were known.
func (d Data) configurationInput(budget *templateBudget, c Command) ([]byte, error) {
	path, ok := writtenPath(c)
	if !ok || len(d.Templates) == 0 {
		return c.Stdin, nil
	}
	var asWritten func([]byte) ([]byte, error)
	if (d.Format == FormatCloudConfig || d.Format == "") && hasJinjaHeader(d.Value) {
		// The instance variables Commands substituted for Configuration.
		asWritten = func(b []byte) ([]byte, error) {
			return substituteJinja(b, Vars{Hostname: configurationHost, InstanceID: configurationHost})
		}
	}
	for _, t := range d.Templates {
		if t.Path != path {
			continue
		}
		content, ok, err := withoutControlPlaneVersion(budget, t.Path, t.Template, c.Stdin, asWritten)
		if err != nil {
			return nil, err
		}
		if ok {
			return content, nil
		}
	}
	return c.Stdin, nil
}
