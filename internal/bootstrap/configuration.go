package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

// anyBootstrapToken finds kubeadm bootstrap tokens, "[a-z0-9]{6}.[a-z0-9]{16}", wherever they are.
var anyBootstrapToken = regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)

// configurationHost stands for the node's host name: the configuration is the same for every node.
const configurationHost = "node"

// Configuration identifies the configuration the data bootstraps a node with: a hash of the
// commands it turns into (the files it writes, with their content, owners and modes, and the
// commands it runs), with every bootstrap token taken out. A bootstrap provider renders the same
// configuration again when it rotates or refreshes a token: the data changes, its Configuration
// does not. An edit of what the nodes get (a file, a kubelet flag, a command, the kubeadm API the
// data is written in) changes it. Data whose commands cannot be built is identified by its value,
// tokens taken out. 32 hex digits, so that it fits a Kubernetes label value.
func (d Data) Configuration() string {
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
		write(c.Stdin)
	}
	return hex.EncodeToString(h.Sum(nil))[:hashLabelLength]
}
