package bootstrap

import (
	"encoding/base64"
	"regexp"
	"strings"
)

// secretFields are the kubeconfig, kubeadm and other configuration fields whose value grants
// access: keys, certificates, tokens, passwords.
const secretFields = `client-key-data|client-certificate-data|certificate-authority-data|token|certificateKey|certificate-key|password|passwd`

// redactions are what Redact replaces in text: what bootstrap data holds that grants access to a
// cluster, and the credentials a command may print beside it.
var redactions = []struct {
	pattern     *regexp.Regexp
	replacement string
	// hint, when set, is in the lower-cased text wherever pattern matches: Redact skips a
	// pattern whose hint is not there, which costs far less than a regular expression's scan.
	hint string
}{
	// PEM blocks, whole or cut by a tail (an END without its BEGIN, a BEGIN without its END).
	// Once the whole blocks are gone, the text up to the last END left is inside a block whose
	// BEGIN the tail cut: up to the last, so that a second pass has nothing left to cut.
	{regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]+-----.*?(-----END [A-Z0-9 ]+-----|\z)`), "<redacted PEM block>", "-----begin "},
	{regexp.MustCompile(`(?s)\A.*-----END [A-Z0-9 ]+-----`), "<redacted PEM block>", "-----end "},
	// A block cut within its BEGIN line and without its END (the output stopped within the key):
	// the text starts with the end of the header ("IN RSA PRIVATE KEY-----") and a body line.
	{regexp.MustCompile(`(?s)\A[-A-Z0-9 ]*[A-Z]-{1,5}\r?\n[A-Za-z0-9+/=]{16,}.*`), "<redacted PEM block>", ""},
	// Kubeconfig, kubeadm and other fields that hold keys, certificates, tokens or passwords; a
	// value that starts with "|" or ">" is a block scalar's indicator (redactBlockScalars).
	{regexp.MustCompile(`(?i)\b(` + secretFields + `)(["']?\s*[:=]\s*["']?)[^\s"',}|>][^\s"',}]*`), "${1}${2}<redacted>", ""},
	// Command-line flags that carry them.
	{regexp.MustCompile(`(--(?:token|certificate-key|discovery-token|password)[= ])\S+`), "${1}<redacted>", "--"},
	// HTTP credentials: an Authorization header's value, after its scheme, and bearer tokens.
	{regexp.MustCompile(`(?i)(\bauthorization["']?\s*[:=]\s*["']?(?:[a-z]+\s+)?)[^\s"',}]+`), "${1}<redacted>", "authorization"},
	{regexp.MustCompile(`(?i)(\bbearer\s+)[A-Za-z0-9._~+/-]{8,}=*`), "${1}<redacted>", "bearer"},
	// Data URLs (Ignition's file sources): their payload is a file of the bootstrap data,
	// percent-encoded or in base64, e.g. the join configuration and its token.
	{regexp.MustCompile(`\b(data:[A-Za-z0-9!#$&^_.+=;/-]*),[^\s"'<>\\]+`), "${1},<redacted>", "data:"},
	// Bootstrap tokens anywhere, also right after a percent-encoded byte (a data URL cut by a
	// tail: "token:%20abcdef.0123456789abcdef"), where \b does not see a word start.
	{anyBootstrapToken, "<redacted bootstrap token>", "."},
	{regexp.MustCompile(`(%[0-9A-Fa-f]{2})[a-z0-9]{6}\.[a-z0-9]{16}\b`), "${1}<redacted bootstrap token>", "%"},
}

// secretBlockScalar finds a secret field whose value is a YAML block scalar ("client-key-data: |"):
// the value is on the lines below, indented more than the key.
var secretBlockScalar = regexp.MustCompile(`(?im)^([ \t]*)(?:- )?["']?(?:` + secretFields + `)["']?[ \t]*:[ \t]*[|>][-+0-9]*[ \t]*\r?$`)

// Redact removes from s the secrets bootstrap data holds (bootstrap tokens, kubeadm certificate
// keys, PEM keys and certificates, kubeconfig credentials, Ignition data URLs), whether in text,
// percent-encoded or in base64, and HTTP credentials and passwords, so that a command's output
// can go into a condition, an event or a log. A step's output may print its own configuration.
// Its cost is linear in the length of s: regular expressions (RE2) and one decoding of each run
// of base64.
func Redact(s string) string {
	s = redactBlockScalars(s)
	// Replacements take text out and add none of the hints.
	lower := strings.ToLower(s)
	for _, r := range redactions {
		if r.hint != "" && !strings.Contains(lower, r.hint) {
			continue
		}
		s = r.pattern.ReplaceAllString(s, r.replacement)
	}
	return redactBase64(s)
}

// redactBlockScalars replaces the value of each secret field written as a YAML block scalar,
// which the field pattern does not see: it takes the indicator ("|") for the value.
func redactBlockScalars(s string) string {
	matches := secretBlockScalar.FindAllStringSubmatchIndex(s, -1)
	if matches == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range matches {
		if m[0] < last {
			continue
		}
		keyIndent := m[3] - m[2]
		b.WriteString(s[last:m[1]])
		// The value's lines: blank or indented more than the key.
		end, valueIndent := m[1], ""
		for end < len(s) && s[end] == '\n' {
			line, _, _ := strings.Cut(s[end+1:], "\n")
			content := strings.TrimLeft(line, " \t")
			indent := len(line) - len(content)
			if strings.TrimSpace(line) != "" && indent <= keyIndent {
				break
			}
			if valueIndent == "" && content != "" {
				valueIndent = line[:indent]
			}
			end += 1 + len(line)
		}
		if end > m[1] {
			b.WriteString("\n" + valueIndent + "<redacted>")
		}
		last = end
	}
	b.WriteString(s[last:])
	return b.String()
}

// minBase64Run is the shortest run of base64 redactBase64 decodes: 12 bytes, fewer than any
// secret it looks for takes (a bootstrap token is 23).
const minBase64Run = 16

// redactBase64 replaces each run of base64 that decodes to a secret: a key or a kubeconfig
// encoded (write_files content with encoding b64, a Secret's data), whole or cut by a tail. A
// run is at least minBase64Run characters of the alphabet and its padding, continued over line
// breaks onto lines that hold base64 alone (indentation aside), as YAML wraps it. A scan by
// hand: a regular expression for the same costs ten times more.
func redactBase64(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if !isBase64Byte(s[i]) {
			i++
			continue
		}
		start := i
		i = base64End(s, i)
		if i-start < minBase64Run {
			continue
		}
		// Lines of base64 alone continue the run.
		for {
			next := skipBlanks(s, i)
			if next < len(s) && s[next] == '\r' {
				next++
			}
			if next >= len(s) || s[next] != '\n' {
				break
			}
			lineStart := skipBlanks(s, next+1)
			lineEnd := base64End(s, lineStart)
			after := skipBlanks(s, lineEnd)
			if lineEnd == lineStart || (after < len(s) && s[after] != '\n' && s[after] != '\r') {
				break
			}
			i = lineEnd
		}
		if decodesToSecret(s[start:i]) {
			b.WriteString(s[last:start])
			b.WriteString("<redacted base64>")
			last = i
		}
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isBase64Byte(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/'
}

// base64End is where the base64 that starts at i ends, its padding included.
func base64End(s string, i int) int {
	for i < len(s) && isBase64Byte(s[i]) {
		i++
	}
	for pad := 0; pad < 2 && i < len(s) && s[i] == '='; pad++ {
		i++
	}
	return i
}

func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// secretInDecoded finds in decoded base64 what Redact would redact in text: a PEM boundary, a
// secret field, a bootstrap token, a data URL.
var secretInDecoded = regexp.MustCompile(`-----(?:BEGIN|END) |(?i:\b(?:` + secretFields + `|authorization)["']?\s*[:=]|\bbearer\s|\bdata:)|[a-z0-9]{6}\.[a-z0-9]{16}`)

// decodesToSecret tells whether a run of base64 decodes to text that holds a secret. A run cut by
// a tail starts anywhere within a 4-character group: each start is tried. Only text is looked
// into: base64 read from the wrong start, or of binary (a DER key's PEM body), is not text.
func decodesToSecret(run string) bool {
	compact := strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\r', '\n', '=':
			return -1
		}
		return r
	}, run)
	for start := range 4 {
		if len(compact)-start < 4 {
			break
		}
		group := compact[start:]
		decoded, err := base64.RawStdEncoding.DecodeString(group[:len(group)/4*4])
		if err == nil && isText(decoded) && secretInDecoded.Match(decoded) {
			return true
		}
	}
	return false
}

// isText tells whether b holds no control character but tabs and line breaks.
func isText(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
	}
	return true
}
