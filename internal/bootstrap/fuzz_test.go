package bootstrap

import (
	"bytes"
	"encoding/base64"
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Bootstrap data comes from a Secret and becomes shell steps run as root in a node: the fuzz
// targets below feed the parsers arbitrary bytes, seeded with what CABPK renders.

// fuzzVars are the node's values for the fuzz targets; with IgnorePreflightErrors, kubeadm
// commands are rewritten too.
var fuzzVars = Vars{Hostname: "pool-a-x7k2p", IgnorePreflightErrors: DefaultIgnorePreflightErrors}

// fileMode is what chmod receives: an octal mode of four digits.
var fileMode = regexp.MustCompile(`^[0-7]{4}$`)

// FuzzCommandsCloudConfig: any cloud-config either fails or becomes well-formed steps.
func FuzzCommandsCloudConfig(f *testing.F) {
	for _, version := range []string{"1.36.3", "1.30.14"} {
		f.Add(renderCloudConfig(f, version, nil))
	}
	for _, doc := range []string{
		"#cloud-config\n",
		"#cloud-config\nruncmd:\n- [kubeadm, join, --config, /x.yaml]\n- [echo, 1, true]\n- kubeadm join --config /x.yaml\n",
		"#cloud-config\nbootcmd:\n- echo boot\nwrite_files:\n- path: /a\n  permissions: 0600\n  content: a\n- path: /b\n  permissions: '0o750'\n- path: /c\n  permissions: '644'\n  owner: nobody:nogroup\n  append: true\n",
		"#cloud-config\nwrite_files:\n- path: /late\n  defer: true\n- path: /early\nruncmd:\n- echo\n",
		"#cloud-config\nwrite_files:\n- path: /x\n  encoding: gz+b64\n  content: " + base64.StdEncoding.EncodeToString([]byte(gzipString(f, "zipped"))) + "\n",
		"## template: jinja\n#cloud-config\nruncmd:\n- echo {{ ds.meta_data[\"local_hostname\"] }} {{ v1.instance_id }}\n",
		"## template: jinja\n#cloud-config\nruncmd:\n- echo {{ v1.region }}\n",
		"## template: jinja\n#cloud-config\n{% if true %}\nruncmd: []\n{% endif %}\n",
		"#cloud-config\n- a\n",
		"#cloud-config\nwrite_files:\n- path: etc/x\n",
		"#cloud-config\nwrite_files:\n- path: ' /x '\n  source:\n    uri: https://example.com/x\n",
		"#cloud-config\nwrite_files:\n- path: /x\n  encoding: b64\n  content: '!!!'\n",
		"#cloud-config\nwrite_files:\n- path: /x\n  permissions: 077777\n",
		"#cloud-config\nruncmd:\n- []\n- [{a: b}]\n",
		"#!/bin/sh\necho hi\n",
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		data := checkCommands(t, value, FormatCloudConfig)
		if data == nil {
			return
		}
		ignored, _ := IgnoredModules(data)
		for _, m := range cloudConfigModules {
			if slices.Contains(ignored, m) {
				t.Fatalf("IgnoredModules lists %q, which Commands acts on: %v", m, ignored)
			}
		}
	})
}

// FuzzCommandsIgnition: any Ignition config either fails or becomes well-formed steps.
func FuzzCommandsIgnition(f *testing.F) {
	f.Add(renderIgnition(f, "1.36.3", "storage:\n  files:\n  - path: /opt/foo\n    filesystem: root\n    contents:\n      inline: Howdy!\n    mode: 0644\n"))
	f.Add(renderIgnition(f, "1.30.14", ""))
	gz := base64.StdEncoding.EncodeToString([]byte(gzipString(f, "zipped content")))
	for _, doc := range []string{
		`{"ignition": {"version": "3.4.0"}, "storage": {"directories": [{"path": "/etc/d", "mode": 448}], "files": [` +
			`{"path": "/etc/z", "mode": 420, "contents": {"source": "data:;base64,` + gz + `", "compression": "gzip"}},` +
			`{"path": "/etc/app", "append": [{"source": "data:,more%0A"}], "user": {"id": 1000}, "group": {"name": "users"}},` +
			`{"path": "/etc/both", "contents": {"source": "data:,first%0A"}, "append": [{"source": "data:text/plain;base64,c2Vjb25kCg=="}]},` +
			`{"path": "/etc/empty", "mode": -1}], "links": [{"path": "/usr/local/bin/k", "target": "/usr/bin/kubectl", "hard": true}]},` +
			`"systemd": {"units": [{"name": "a.service", "enabled": true, "contents": "[Service]\n", "dropins": [{"name": "10-x.conf", "contents": "[Service]\n"}]},` +
			`{"name": "b.service", "mask": true}, {"name": "kubeadm.service", "enable": true}]}, "passwd": {"users": [{"name": "core"}]}}`,
		`{"ignition": {"version": "2.3.0"}, "storage": {"files": [{"filesystem": "root", "path": "/etc/kubeadm.sh", "append": true, "contents": {"source": "data:,kubeadm%20join"}}]}}`,
		`{"ignition": {"version": "1.0.0"}}`,
		`{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/x", "contents": {"source": "https://example.com/x"}}]}}`,
		`{"ignition": {"version": "2.3.0"}, "storage": {"files": [{"filesystem": "oem", "path": "/x"}]}}`,
		`{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "x"}]}}`,
		`{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/x", "contents": {"source": "data:,%zz"}}]}}`,
		`{"ignition": {"version": "3.4.0"}, "systemd": {"units": [{"name": "../x"}]}}`,
		`{"ignition": {"version": "3.4.0"}, "systemd": {"units": [{"name": "a", "dropins": [{"name": ""}]}]}}`,
		"#cloud-config\n",
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		checkCommands(t, value, FormatIgnition)
	})
}

// checkCommands checks what Commands promises for any value: no panic, the same answer twice, the
// data left as it was, and on success the start step first, the sentinel last, every step named,
// and files and directories written at absolute paths with a valid mode by the fixed scripts. It
// returns the Data, nil for an empty value.
func checkCommands(t *testing.T, value []byte, format string) *Data {
	t.Helper()
	data, err := NewData(value, format)
	if err != nil {
		if len(value) != 0 {
			t.Fatalf("NewData refused a non-empty %s value: %v", format, err)
		}
		return nil
	}
	original := bytes.Clone(value)
	cmds, err := Commands(data, fuzzVars)
	again, againErr := Commands(data, fuzzVars)
	if !bytes.Equal(data.Value, original) {
		t.Fatalf("Commands changed the bootstrap data")
	}
	if errString(err) != errString(againErr) || !reflect.DeepEqual(cmds, again) {
		t.Fatalf("Commands is not deterministic: %v then %v", err, againErr)
	}
	if err != nil {
		if cmds != nil {
			t.Fatalf("Commands returned %d steps with error %v", len(cmds), err)
		}
		return data
	}
	if len(cmds) < 2 || cmds[0].Step != startedCommand().Step || cmds[len(cmds)-1].Step != sentinelCommand().Step {
		t.Fatalf("steps do not start by recording the start and end with the sentinel: %v", stepNames(cmds))
	}
	for i, c := range cmds {
		if c.String() == "" {
			t.Fatalf("step %d has no name", i)
		}
		if len(c.Argv) == 0 || c.Argv[0] == "" {
			t.Fatalf("step %d (%s) has no command", i, c)
		}
		if len(c.Argv) < 4 || c.Argv[0] != "/bin/sh" || c.Argv[1] != "-c" {
			continue
		}
		switch c.Argv[3] {
		case "capdmp-write-file":
			if len(c.Argv) != 7 || (c.Argv[2] != writeFileScript && c.Argv[2] != appendFileScript) {
				t.Fatalf("step %d (%s) writes a file with another script or arguments: %q", i, c, c.Argv)
			}
			if c.Stdin == nil {
				t.Fatalf("step %d (%s) writes a file without stdin: cat would wait for input", i, c)
			}
			checkPathAndMode(t, c, c.Argv[4], c.Argv[5])
		case "capdmp-mkdir":
			if len(c.Argv) != 7 {
				t.Fatalf("step %d (%s) makes a directory with other arguments: %q", i, c, c.Argv)
			}
			checkPathAndMode(t, c, c.Argv[4], c.Argv[5])
		case "capdmp-link":
			if len(c.Argv) != 6 || !strings.HasPrefix(c.Argv[4], "/") {
				t.Fatalf("step %d (%s) makes a link at a relative path or with other arguments: %q", i, c, c.Argv)
			}
		}
	}
	return data
}

func checkPathAndMode(t *testing.T, c Command, path, mode string) {
	t.Helper()
	if !strings.HasPrefix(path, "/") {
		t.Fatalf("step %s writes at a relative path %q", c, path)
	}
	if !fileMode.MatchString(mode) {
		t.Fatalf("step %s sets mode %q, not four octal digits", c, mode)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzJoinConfiguration: JoinConfigurationAPIVersion and BootstrapTokenID read Secret content;
// they agree on whether there is a kubeadm JoinConfiguration, and BootstrapTokenID returns the
// public part of a token only.
func FuzzJoinConfiguration(f *testing.F) {
	f.Add(renderCloudConfig(f, "1.36.3", nil), false)
	f.Add(renderCloudConfig(f, "1.30.14", nil), false)
	f.Add(renderIgnition(f, "1.36.3", ""), true)
	for _, doc := range []string{
		"## template: jinja\n#cloud-config\nhostname: {{ ds.meta_data.hostname }}\nwrite_files:\n- path: /run/kubeadm/join.yaml\n  content: |\n    apiVersion: kubeadm.k8s.io/v1beta3\n    kind: JoinConfiguration\n    discovery:\n      bootstrapToken:\n        token: 123456.abcdefabcdefabcd\n",
		"#cloud-config\nwrite_files:\n- path: /etc/k.yaml\n  content: |\n    apiVersion: kubelet.config.k8s.io/v1beta1\n    kind: KubeletConfiguration\n    ---\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: JoinConfiguration\n    discovery:\n      tlsBootstrapToken: aaaaaa.bbbbbbbbbbbbbbbb\n",
		"#cloud-config\nwrite_files:\n- path: /x\n  content: |\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: JoinConfiguration\n    discovery:\n      bootstrapToken:\n        token: ABCDEF.0123456789abcdef\n",
		"#cloud-config\nwrite_files:\n- path: /x\n  content: |\n    apiVersion: example.com/v1\n    kind: JoinConfiguration\n",
		"#cloud-config\nwrite_files:\n- path: /x\n  encoding: b64\n  content: " + base64.StdEncoding.EncodeToString([]byte("apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    token: \"abcdef.0123456789abcdef\\n\"\n")) + "\n",
	} {
		f.Add([]byte(doc), false)
	}
	f.Add([]byte(`{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/etc/kubeadm.yml", "contents": {"source": "data:,apiVersion:%20kubeadm.k8s.io/v1beta4%0Akind:%20JoinConfiguration%0Adiscovery:%0A%20%20tlsBootstrapToken:%20abcdef.0123456789abcdef%0A"}}]}}`), true)
	tokenID := regexp.MustCompile(`^[a-z0-9]{6}$`)
	f.Fuzz(func(t *testing.T, value []byte, isIgnition bool) {
		format := FormatCloudConfig
		if isIgnition {
			format = FormatIgnition
		}
		data, err := NewData(value, format)
		if err != nil {
			return
		}
		apiVersion, versionErr := JoinConfigurationAPIVersion(data)
		id, idErr := BootstrapTokenID(data)
		if again, againErr := BootstrapTokenID(data); again != id || errString(againErr) != errString(idErr) {
			t.Fatalf("BootstrapTokenID is not deterministic: %q, %v then %q, %v", id, idErr, again, againErr)
		}
		if versionErr != nil {
			if apiVersion != "" {
				t.Fatalf("JoinConfigurationAPIVersion returned %q with error %v", apiVersion, versionErr)
			}
			if idErr == nil || errors.Is(versionErr, ErrNoJoinConfiguration) != errors.Is(idErr, ErrNoJoinConfiguration) {
				t.Fatalf("JoinConfigurationAPIVersion failed (%v) but BootstrapTokenID did not fail the same way: %q, %v", versionErr, id, idErr)
			}
			return
		}
		if group, _, _ := strings.Cut(apiVersion, "/"); group != kubeadmGroup {
			t.Fatalf("JoinConfigurationAPIVersion = %q, not of group %s", apiVersion, kubeadmGroup)
		}
		if errors.Is(idErr, ErrNoJoinConfiguration) {
			t.Fatalf("BootstrapTokenID finds no JoinConfiguration where JoinConfigurationAPIVersion found %q", apiVersion)
		}
		if idErr != nil {
			if id != "" {
				t.Fatalf("BootstrapTokenID returned %q with error %v", id, idErr)
			}
			return
		}
		if !tokenID.MatchString(id) {
			t.Fatalf("BootstrapTokenID = %q: not a token ID (and perhaps more than the public part)", id)
		}
	})
}

// FuzzRedact: Redact removes the bootstrap tokens in any text, and redacting its output again
// changes nothing.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		"error execution phase kubelet-start: timed out",
		"token " + testToken + " is expired",
		"kubeadm join 10.0.0.1:6443 --token " + testToken + " --certificate-key 0123abcd0123abcd --discovery-token-ca-cert-hash sha256:aa",
		"wrote key:\n" + testKey + "\ndone",
		"o7onLRnrq0/IzW7yWR7Qkrm\n-----END CERTIFICATE-----\nerror: x",
		"config:\n-----BEGIN CERTIFICATE-----\nMIIC5zCCAc+gAwIBAgIBADAN",
		"client-key-data: LS0tLS1CRUdJTg==\n  token: \"" + testToken + "\"\ncertificateKey: 0f0e",
		`{"token":"` + testToken + `","certificate-key":"0f0e"}`,
		// Redacted once to "<redacted PEM block>\nbody\n...", then again, before ENDs were cut up
		// to the last.
		"-----END A-----\nbody\n-----END B-----\nrest",
		"",
	} {
		f.Add(s, uint(len(s)/2), []byte("abcdef0123456789abcdef"))
	}
	f.Fuzz(func(t *testing.T, text string, at uint, raw []byte) {
		// A token from the fuzz bytes, mapped into kubeadm's alphabet, inserted in the text.
		const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
		token := make([]byte, 0, 23)
		for i := range 22 {
			b := byte(i)
			if i < len(raw) {
				b = raw[i]
			}
			if i == 6 {
				token = append(token, '.')
			}
			token = append(token, alphabet[int(b)%len(alphabet)])
		}
		secret := string(token[7:])
		pos := int(at % uint(len(text)+1))
		in := text[:pos] + string(token) + text[pos:]

		out := Redact(in)
		if again := Redact(out); again != out {
			t.Fatalf("Redact is not idempotent:\n in: %q\nout: %q\nagain: %q", in, out, again)
		}
		if m := bootstrapTokenPattern.FindString(out); m != "" {
			t.Fatalf("Redact left the bootstrap token %q in %q (from %q)", m, out, in)
		}
		// A token glued to letters, digits or '_' is part of a longer word, not a token; and the
		// secret must not be elsewhere in the text too.
		standalone := (pos == 0 || !isWordByte(in[pos-1])) && (pos+len(token) == len(in) || !isWordByte(in[pos+len(token)]))
		if standalone && strings.Index(in, secret) == pos+7 && strings.LastIndex(in, secret) == pos+7 && strings.Contains(out, secret) {
			t.Fatalf("Redact left the secret of the bootstrap token %s in %q (from %q)", token, out, in)
		}
	})
}

// bootstrapTokenPattern is a bootstrap token standing alone, kubeadm's "[a-z0-9]{6}.[a-z0-9]{16}".
var bootstrapTokenPattern = regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)

func isWordByte(b byte) bool {
	return b == '_' || ('0' <= b && b <= '9') || ('a' <= b && b <= 'z') || ('A' <= b && b <= 'Z')
}
