package bootstrap

import (
	"regexp"
)

// redactions are what Redact replaces: what bootstrap data holds that grants access to a cluster.
var redactions = []struct {
	pattern     *regexp.Regexp
	replacement string
}{
	// PEM blocks, whole or cut by a tail (an END without its BEGIN, a BEGIN without its END).
	// Once the whole blocks are gone, the text up to the last END left is inside a block whose
	// BEGIN the tail cut: up to the last, so that a second pass has nothing left to cut.
	{regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]+-----.*?(-----END [A-Z0-9 ]+-----|\z)`), "<redacted PEM block>"},
	{regexp.MustCompile(`(?s)\A.*-----END [A-Z0-9 ]+-----`), "<redacted PEM block>"},
	// Kubeconfig and kubeadm fields that hold keys, certificates or tokens.
	{regexp.MustCompile(`(?i)\b(client-key-data|client-certificate-data|certificate-authority-data|token|certificateKey|certificate-key)(["']?\s*[:=]\s*["']?)[^\s"',}]+`), "${1}${2}<redacted>"},
	// Command-line flags that carry them.
	{regexp.MustCompile(`(--(?:token|certificate-key|discovery-token)[= ])\S+`), "${1}<redacted>"},
	// Bootstrap tokens anywhere.
	{anyBootstrapToken, "<redacted bootstrap token>"},
}

// Redact removes from s the secrets bootstrap data holds (bootstrap tokens, kubeadm certificate
// keys, PEM keys and certificates, kubeconfig credentials), so that a command's output can go
// into a condition, an event or a log. A step's output may print its own configuration.
func Redact(s string) string {
	for _, r := range redactions {
		s = r.pattern.ReplaceAllString(s, r.replacement)
	}
	return s
}
