package bootstrap

import (
	"encoding/base64"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
)

// step returns the command of a step by name.
func step(g Gomega, cmds []Command, name string) Command {
	for _, c := range cmds {
		if c.Step == name {
			return c
		}
	}
	g.Expect(stepNames(cmds)).To(ContainElement(name))
	return Command{}
}

func stepNames(cmds []Command) []string {
	out := make([]string, 0, len(cmds))
	for _, c := range cmds {
		out = append(out, c.Step)
	}
	return out
}

// writeArgs returns path, mode and owner of a write-file command.
func writeArgs(c Command) []string {
	if len(c.Argv) < 4 {
		return nil
	}
	return c.Argv[4:]
}

func TestCommandsCloudConfig(t *testing.T) {
	vars := Vars{Hostname: "pool-a-x7k2p"}
	tests := []struct {
		name    string
		version string
		vars    Vars
		mutate  func(*cloudinit.NodeInput, *bootstrapv1.JoinConfiguration)
		check   func(g Gomega, cmds []Command)
	}{
		{
			name:    "CABPK worker join, v1beta4: steps in cloud-init's order",
			version: "1.36.3",
			vars:    vars,
			check: func(g Gomega, cmds []Command) {
				g.Expect(stepNames(cmds)).To(Equal([]string{
					"record bootstrap start",
					"write_files[0] /etc/capdmp/plain.conf",
					"write_files[1] /etc/capdmp/b64",
					"write_files[2] /etc/capdmp/gzb64",
					"write_files[3] /etc/capdmp/owned",
					"write_files[4] /etc/capdmp/appended",
					"write_files[5] /run/kubeadm/kubeadm-join-config.yaml",
					"write_files[6] /run/cluster-api/placeholder",
					"runcmd[0]",
					"runcmd[1]",
					"runcmd[2]",
					"runcmd[3]",
					"write bootstrap sentinel",
				}))
			},
		},
		{
			name:    "files are decoded, with modes and owners",
			version: "1.36.3",
			vars:    vars,
			check: func(g Gomega, cmds []Command) {
				plain := step(g, cmds, "write_files[0] /etc/capdmp/plain.conf")
				g.Expect(plain.Argv[:3]).To(Equal([]string{"/bin/sh", "-c", writeFileScript}))
				g.Expect(writeArgs(plain)).To(Equal([]string{"/etc/capdmp/plain.conf", "0600", ""}), "root needs no chown")
				g.Expect(string(plain.Stdin)).To(Equal("plain text\n"))

				b64 := step(g, cmds, "write_files[1] /etc/capdmp/b64")
				g.Expect(string(b64.Stdin)).To(Equal("decoded from base64"))
				g.Expect(writeArgs(b64)).To(Equal([]string{"/etc/capdmp/b64", "0644", ""}), "cloud-init's default mode")

				gzb64 := step(g, cmds, "write_files[2] /etc/capdmp/gzb64")
				g.Expect(string(gzb64.Stdin)).To(Equal("decoded from gzip+base64"))
				g.Expect(writeArgs(gzb64)).To(Equal([]string{"/etc/capdmp/gzb64", "0755", ""}))

				owned := step(g, cmds, "write_files[3] /etc/capdmp/owned")
				g.Expect(writeArgs(owned)).To(Equal([]string{"/etc/capdmp/owned", "0640", "nobody:nogroup"}))

				appended := step(g, cmds, "write_files[4] /etc/capdmp/appended")
				g.Expect(appended.Argv[2]).To(Equal(appendFileScript))

				join := step(g, cmds, "write_files[5] /run/kubeadm/kubeadm-join-config.yaml")
				g.Expect(writeArgs(join)).To(Equal([]string{"/run/kubeadm/kubeadm-join-config.yaml", "0640", ""}))
				g.Expect(string(join.Stdin)).To(ContainSubstring("apiVersion: kubeadm.k8s.io/v1beta4"))
				g.Expect(string(join.Stdin)).To(ContainSubstring("token: " + sampleToken))
			},
		},
		{
			name:    "instance variables become the container name",
			version: "1.36.3",
			vars:    vars,
			check: func(g Gomega, cmds []Command) {
				join := step(g, cmds, "write_files[5] /run/kubeadm/kubeadm-join-config.yaml")
				g.Expect(string(join.Stdin)).To(ContainSubstring("name: 'pool-a-x7k2p'"))
				g.Expect(string(join.Stdin)).ToNot(ContainSubstring("{{"))
			},
		},
		{
			name:    "runcmd strings run with sh, the join writes the sentinel, preflight errors ignored",
			version: "1.36.3",
			vars:    Vars{Hostname: "n1", IgnorePreflightErrors: DefaultIgnorePreflightErrors},
			check: func(g Gomega, cmds []Command) {
				g.Expect(step(g, cmds, "runcmd[0]").Argv).To(Equal([]string{"/bin/sh", "-c", "echo pre > /tmp/pre"}))
				g.Expect(step(g, cmds, "runcmd[1]").Argv).To(Equal([]string{"/bin/sh", "-c", `echo "quoted $HOSTNAME" > /tmp/quoted`}))
				g.Expect(step(g, cmds, "runcmd[2]").Argv).To(Equal([]string{"/bin/sh", "-c",
					"kubeadm join --ignore-preflight-errors=" + DefaultIgnorePreflightErrors +
						" --config /run/kubeadm/kubeadm-join-config.yaml --v 4 && echo success > /run/cluster-api/bootstrap-success.complete"}))
				g.Expect(step(g, cmds, "runcmd[3]").Argv).To(Equal([]string{"/bin/sh", "-c", "echo post > /tmp/post"}))
			},
		},
		{
			name:    "without IgnorePreflightErrors the join is CABPK's",
			version: "1.36.3",
			vars:    vars,
			check: func(g Gomega, cmds []Command) {
				g.Expect(step(g, cmds, "runcmd[2]").Argv[2]).To(HavePrefix("kubeadm join --config "))
			},
		},
		{
			name:    "Kubernetes 1.30 gets a v1beta3 JoinConfiguration",
			version: "1.30.14",
			vars:    vars,
			check: func(g Gomega, cmds []Command) {
				join := step(g, cmds, "write_files[5] /run/kubeadm/kubeadm-join-config.yaml")
				g.Expect(string(join.Stdin)).To(ContainSubstring("apiVersion: kubeadm.k8s.io/v1beta3"))
			},
		},
		{
			name:    "no user files or commands: CABPK's minimum",
			version: "1.36.3",
			vars:    vars,
			mutate: func(in *cloudinit.NodeInput, _ *bootstrapv1.JoinConfiguration) {
				in.BaseUserData = cloudinit.BaseUserData{KubernetesVersion: in.KubernetesVersion}
			},
			check: func(g Gomega, cmds []Command) {
				g.Expect(stepNames(cmds)).To(Equal([]string{
					"record bootstrap start",
					"write_files[0] /run/kubeadm/kubeadm-join-config.yaml",
					"write_files[1] /run/cluster-api/placeholder",
					"runcmd[0]",
					"write bootstrap sentinel",
				}))
			},
		},
		{
			name:    "boot commands run first",
			version: "1.36.3",
			vars:    vars,
			mutate: func(in *cloudinit.NodeInput, _ *bootstrapv1.JoinConfiguration) {
				in.BootCommands = []string{"echo boot"}
			},
			check: func(g Gomega, cmds []Command) {
				g.Expect(cmds[1].Step).To(Equal("bootcmd[0]"))
				g.Expect(cmds[1].Argv).To(Equal([]string{"/bin/sh", "-c", "echo boot"}))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			data := mustData(t, renderCloudConfig(t, tt.version, tt.mutate), "")
			cmds, err := Commands(data, tt.vars)
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(cmds[0]).To(Equal(startedCommand()))
			g.Expect(cmds[len(cmds)-1]).To(Equal(sentinelCommand()))
			tt.check(g, cmds)
		})
	}
}

func TestCommandsHandWrittenCloudConfig(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		vars    Vars
		wantErr string
		check   func(g Gomega, cmds []Command)
	}{
		{
			name: "runcmd lists run as argv, scalars become strings",
			doc:  "#cloud-config\nruncmd:\n- [kubeadm, join, --config, /x.yaml]\n- [sysctl, -w, vm.max_map_count=1]\n- [echo, 1, true]\n",
			vars: Vars{Hostname: "n", IgnorePreflightErrors: "all"},
			check: func(g Gomega, cmds []Command) {
				g.Expect(cmds[1].Argv).To(Equal([]string{"kubeadm", "join", "--ignore-preflight-errors=all", "--config", "/x.yaml"}))
				g.Expect(cmds[2].Argv).To(Equal([]string{"sysctl", "-w", "vm.max_map_count=1"}))
				g.Expect(cmds[3].Argv).To(Equal([]string{"echo", "1", "true"}))
			},
		},
		{
			name: "unquoted YAML 1.1 octal permissions, numeric and 0o forms",
			doc:  "#cloud-config\nwrite_files:\n- path: /a\n  permissions: 0600\n  content: a\n- path: /b\n  permissions: '0o750'\n- path: /c\n  permissions: '644'\n",
			vars: Vars{Hostname: "n"},
			check: func(g Gomega, cmds []Command) {
				g.Expect(writeArgs(cmds[1])).To(Equal([]string{"/a", "0600", ""}))
				g.Expect(writeArgs(cmds[2])).To(Equal([]string{"/b", "0750", ""}))
				g.Expect(cmds[2].Stdin).To(BeEmpty(), "a file without content is written empty")
				g.Expect(cmds[2].Stdin).ToNot(BeNil(), "empty stdin, not none: cat must see EOF")
				g.Expect(writeArgs(cmds[3])).To(Equal([]string{"/c", "0644", ""}))
			},
		},
		{
			name: "deferred files are written after the others, before runcmd",
			doc:  "#cloud-config\nwrite_files:\n- path: /late\n  defer: true\n- path: /early\nruncmd:\n- echo\n",
			vars: Vars{Hostname: "n"},
			check: func(g Gomega, cmds []Command) {
				g.Expect(stepNames(cmds)).To(Equal([]string{"record bootstrap start", "write_files[1] /early", "write_files[0] /late", "runcmd[0]", "write bootstrap sentinel"}))
			},
		},
		{
			name: "unknown encodings are plain text, as in cloud-init",
			doc:  "#cloud-config\nwrite_files:\n- path: /a\n  encoding: text/plain\n  content: aGk=\n",
			vars: Vars{Hostname: "n"},
			check: func(g Gomega, cmds []Command) {
				g.Expect(string(cmds[1].Stdin)).To(Equal("aGk="))
			},
		},
		{
			name: "jinja: every supported spelling of the instance variables",
			doc: "## template: jinja\n#cloud-config\nruncmd:\n" +
				"- echo {{ ds.meta_data.hostname }} {{ds.meta_data.local_hostname}} {{ v1.local_hostname }} {{ local_hostname }}\n" +
				"- echo {{ ds.meta_data[\"local_hostname\"] }} {{ ds.meta_data['hostname'] }}\n" +
				"- echo {{ v1.instance_id }} {{ instance_id }} {{ ds.meta_data.instance_id }}\n",
			vars: Vars{Hostname: "n1", InstanceID: "i-1"},
			check: func(g Gomega, cmds []Command) {
				// Each spelling renders the same value: the repeats are the point.
				g.Expect(cmds[1].Argv[2]).To(Equal("echo n1 n1 n1 n1")) //nolint:dupword // see above
				g.Expect(cmds[2].Argv[2]).To(Equal("echo n1 n1"))       //nolint:dupword // see above
				g.Expect(cmds[3].Argv[2]).To(Equal("echo i-1 i-1 i-1")) //nolint:dupword // see above
			},
		},
		{
			name: "jinja: instance_id defaults to the hostname",
			doc:  "## template: jinja\n#cloud-config\nruncmd:\n- echo {{ v1.instance_id }}\n",
			vars: Vars{Hostname: "n1"},
			check: func(g Gomega, cmds []Command) {
				g.Expect(cmds[1].Argv[2]).To(Equal("echo n1"))
			},
		},
		{
			name: "no jinja header: braces are text, as cloud-init leaves them",
			doc:  "#cloud-config\nruncmd:\n- echo '{{ ds.meta_data.hostname }} {{ anything }}'\n",
			vars: Vars{Hostname: "n1"},
			check: func(g Gomega, cmds []Command) {
				g.Expect(cmds[1].Argv[2]).To(Equal("echo '{{ ds.meta_data.hostname }} {{ anything }}'"))
			},
		},
		{
			name:    "jinja: unknown variables are an error naming them",
			doc:     "## template: jinja\n#cloud-config\nruncmd:\n- echo {{ v1.region }}\n",
			vars:    Vars{Hostname: "n1"},
			wantErr: "{{ v1.region }}",
		},
		{
			name:    "jinja: statements are an error",
			doc:     "## template: jinja\n#cloud-config\n{% if true %}\nruncmd: []\n{% endif %}\n",
			vars:    Vars{Hostname: "n1"},
			wantErr: "jinja statements",
		},
		{
			name:    "not cloud-config",
			doc:     "#!/bin/sh\necho hi\n",
			vars:    Vars{Hostname: "n1"},
			wantErr: "not a cloud-config document",
		},
		{
			name:    "not a mapping",
			doc:     "#cloud-config\n- a\n",
			vars:    Vars{Hostname: "n1"},
			wantErr: "not a YAML mapping",
		},
		{
			name:    "relative path",
			doc:     "#cloud-config\nwrite_files:\n- path: etc/x\n",
			vars:    Vars{Hostname: "n1"},
			wantErr: "path must be absolute",
		},
		{
			name:    "remote source",
			doc:     "#cloud-config\nwrite_files:\n- path: /x\n  source:\n    uri: https://example.com/x\n",
			vars:    Vars{Hostname: "n1"},
			wantErr: "source is not supported",
		},
		{
			name:    "bad base64",
			doc:     "#cloud-config\nwrite_files:\n- path: /x\n  encoding: b64\n  content: '!!!'\n",
			vars:    Vars{Hostname: "n1"},
			wantErr: "not valid base64",
		},
		{
			name:    "bad permissions",
			doc:     "#cloud-config\nwrite_files:\n- path: /x\n  permissions: rw-r--r--\n",
			vars:    Vars{Hostname: "n1"},
			wantErr: "invalid permissions",
		},
		{
			name:    "empty runcmd entry",
			doc:     "#cloud-config\nruncmd:\n- []\n",
			vars:    Vars{Hostname: "n1"},
			wantErr: "runcmd[0]",
		},
		{
			name:    "a hostname is required",
			doc:     "#cloud-config\n",
			wantErr: "hostname is required",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cmds, err := Commands(mustData(t, []byte(tt.doc), FormatCloudConfig), tt.vars)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			tt.check(g, cmds)
		})
	}
}

func TestDecodeCloudConfigContent(t *testing.T) {
	gz := gzipString(t, "zipped")
	tests := []struct {
		encoding, content, want string
	}{
		{"", "plain", "plain"},
		{"b64", base64.StdEncoding.EncodeToString([]byte("x")), "x"},
		{"BASE64", base64.StdEncoding.EncodeToString([]byte("x")), "x"},
		{"gz", gz, "zipped"},
		{"gzip", gz, "zipped"},
		{"gz+b64", base64.StdEncoding.EncodeToString([]byte(gz)), "zipped"},
		{"gzip+base64", base64.StdEncoding.EncodeToString([]byte(gz)), "zipped"},
		{"gz+base64", base64.StdEncoding.EncodeToString([]byte(gz)) + "\n", "zipped"},
	}
	for _, tt := range tests {
		t.Run(tt.encoding, func(t *testing.T) {
			g := NewWithT(t)
			got, err := decodeCloudConfigContent(tt.content, tt.encoding, newGunzipBudget())
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(string(got)).To(Equal(tt.want))
		})
	}
	_, err := decodeCloudConfigContent("not gzip", "gzip", newGunzipBudget())
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("not valid gzip")))
}

func TestCommandsIgnition(t *testing.T) {
	g := NewWithT(t)
	data := mustData(t, renderIgnition(t, "1.36.3", "storage:\n  files:\n  - path: /opt/foo\n    filesystem: root\n    contents:\n      inline: Howdy!\n    mode: 0644\n"), FormatIgnition)
	cmds, err := Commands(data, Vars{Hostname: "n1", IgnorePreflightErrors: DefaultIgnorePreflightErrors})
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(stepNames(cmds)).To(Equal([]string{
		"record bootstrap start",
		"storage.files[0] /etc/capdmp/plain.conf",
		"storage.files[1] /etc/capdmp/b64",
		"storage.files[2] /etc/capdmp/owned",
		"storage.files[3] /etc/kubeadm.sh",
		"storage.files[4] /etc/kubeadm.yml",
		"storage.files[5] /opt/foo",
		"systemd.units[0] kubeadm.service",
		"run /etc/kubeadm.sh",
		"write bootstrap sentinel",
	}))
	g.Expect(writeArgs(cmds[1])).To(Equal([]string{"/etc/capdmp/plain.conf", "0600", ""}))
	g.Expect(string(cmds[1].Stdin)).To(Equal("plain text\n"))
	g.Expect(string(cmds[2].Stdin)).To(Equal("decoded from base64"))
	g.Expect(writeArgs(cmds[3])).To(Equal([]string{"/etc/capdmp/owned", "0640", "nobody:nogroup"}))

	script := cmds[4]
	g.Expect(writeArgs(script)).To(Equal([]string{"/etc/kubeadm.sh", "0700", ""}))
	g.Expect(string(script.Stdin)).To(ContainSubstring("kubeadm join --ignore-preflight-errors=" + DefaultIgnorePreflightErrors + " --config /etc/kubeadm.yml --v 4"))
	g.Expect(string(script.Stdin)).To(ContainSubstring("echo pre > /tmp/pre"))
	g.Expect(string(script.Stdin)).To(ContainSubstring("echo success > /run/cluster-api/bootstrap-success.complete"))

	joinConfig := cmds[5]
	g.Expect(writeArgs(joinConfig)).To(Equal([]string{"/etc/kubeadm.yml", "0600", ""}))
	g.Expect(string(joinConfig.Stdin)).To(ContainSubstring("token: " + sampleToken))
	g.Expect(string(joinConfig.Stdin)).To(ContainSubstring("{{ ds.meta_data.local_hostname }}"), "Ignition has no Jinja rendering")

	g.Expect(string(cmds[6].Stdin)).To(Equal("Howdy!"))

	unit := cmds[7]
	g.Expect(writeArgs(unit)).To(Equal([]string{"/etc/systemd/system/kubeadm.service", "0644", ""}))
	g.Expect(string(unit.Stdin)).To(ContainSubstring("ExecStart=/bin/bash /etc/kubeadm.sh"))

	g.Expect(cmds[8].Argv).To(Equal([]string{"/bin/sh", "-c", `if [ -x /bin/bash ]; then exec /bin/bash "$1"; fi; exec /bin/sh "$1"`, "capdmp-kubeadm", "/etc/kubeadm.sh"}))
}

func TestCommandsIgnitionV3(t *testing.T) {
	gz := base64.StdEncoding.EncodeToString([]byte(gzipString(t, "zipped content")))
	doc := `{
  "ignition": {"version": "3.4.0"},
  "storage": {
    "directories": [{"path": "/etc/d", "mode": 448}],
    "files": [
      {"path": "/etc/z", "mode": 420, "contents": {"source": "data:;base64,` + gz + `", "compression": "gzip"}},
      {"path": "/etc/app", "append": [{"source": "data:,more%0A"}], "user": {"id": 1000}, "group": {"name": "users"}},
      {"path": "/etc/both", "contents": {"source": "data:,first%0A"}, "append": [{"source": "data:text/plain;base64,c2Vjb25kCg=="}]},
      {"path": "/etc/empty"}
    ],
    "links": [{"path": "/usr/local/bin/k", "target": "/usr/bin/kubectl"}]
  },
  "systemd": {"units": [
    {"name": "a.service", "enabled": true, "contents": "[Service]\nExecStart=/bin/true\n", "dropins": [{"name": "10-x.conf", "contents": "[Service]\n"}]},
    {"name": "b.service", "mask": true},
    {"name": "c.service", "enabled": false, "contents": "[Service]\n"}
  ]},
  "passwd": {"users": [{"name": "core"}]}
}`
	g := NewWithT(t)
	data := mustData(t, []byte(doc), FormatIgnition)
	cmds, err := Commands(data, Vars{Hostname: "n1"})
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(stepNames(cmds)).To(Equal([]string{
		"record bootstrap start",
		"storage.directories[0] /etc/d",
		"storage.files[0] /etc/z",
		"storage.files[1] /etc/app",
		"storage.files[2] /etc/both",
		"storage.files[3] /etc/empty",
		"storage.links[0] /usr/local/bin/k",
		"systemd.units[0] a.service",
		"systemd.units[0] a.service drop-in 10-x.conf",
		"systemd.units[0] a.service enable",
		"systemd.units[1] b.service mask",
		"systemd.units[2] c.service",
		"write bootstrap sentinel",
	}))
	g.Expect(cmds[1].Argv[4:]).To(Equal([]string{"/etc/d", "0700", ""}))
	g.Expect(string(cmds[2].Stdin)).To(Equal("zipped content"))
	g.Expect(writeArgs(cmds[2])).To(Equal([]string{"/etc/z", "0644", ""}))
	g.Expect(cmds[3].Argv[2]).To(Equal(appendFileScript), "append without contents appends to the existing file")
	g.Expect(string(cmds[3].Stdin)).To(Equal("more\n"))
	g.Expect(writeArgs(cmds[3])).To(Equal([]string{"/etc/app", "0644", "1000:users"}))
	g.Expect(cmds[4].Argv[2]).To(Equal(writeFileScript))
	g.Expect(string(cmds[4].Stdin)).To(Equal("first\nsecond\n"))
	g.Expect(cmds[5].Stdin).To(BeEmpty())
	g.Expect(cmds[6].Argv[4:]).To(Equal([]string{"/usr/local/bin/k", "/usr/bin/kubectl"}))
	g.Expect(writeArgs(cmds[8])).To(Equal([]string{"/etc/systemd/system/a.service.d/10-x.conf", "0644", ""}))
	g.Expect(cmds[9].Argv[2]).To(ContainSubstring("systemctl enable --now"))
	g.Expect(cmds[10].Argv[2]).To(ContainSubstring("systemctl mask"))

	ignored, err := IgnoredModules(data)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(ignored).To(Equal([]string{"passwd.users"}))
}

func TestCommandsIgnitionErrors(t *testing.T) {
	tests := []struct {
		name, doc, wantErr string
	}{
		{"not JSON", "#cloud-config\n", "not an Ignition config"},
		{"unknown version", `{"ignition": {"version": "1.0.0"}}`, `unsupported Ignition spec version "1.0.0"`},
		{"remote source", `{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/x", "contents": {"source": "https://example.com/x"}}]}}`, `source scheme "https" is not supported`},
		{"other filesystem", `{"ignition": {"version": "2.3.0"}, "storage": {"files": [{"filesystem": "oem", "path": "/x"}]}}`, `filesystem "oem" is not supported`},
		{"relative path", `{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "x"}]}}`, "path must be absolute"},
		{"unknown compression", `{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/x", "contents": {"source": "data:,x", "compression": "xz"}}]}}`, `compression "xz"`},
		{"bad unit name", `{"ignition": {"version": "3.4.0"}, "systemd": {"units": [{"name": "../x"}]}}`, "invalid unit name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Commands(mustData(t, []byte(tt.doc), FormatIgnition), Vars{Hostname: "n1"})
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
		})
	}
}

func TestIgnoredModulesCloudConfig(t *testing.T) {
	g := NewWithT(t)
	data := mustData(t, renderCloudConfig(t, "1.36.3", func(in *cloudinit.NodeInput, _ *bootstrapv1.JoinConfiguration) {
		in.Mounts = []bootstrapv1.MountPoints{{"LABEL=etcd", "/var/lib/etcd"}}
	}), FormatCloudConfig)
	ignored, err := IgnoredModules(data)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(ignored).To(Equal([]string{"mounts", "ntp", "users"}))
}

func TestCommandStringHidesData(t *testing.T) {
	g := NewWithT(t)
	cmds, err := Commands(mustData(t, renderCloudConfig(t, "1.36.3", nil), ""), Vars{Hostname: "n1"})
	g.Expect(err).ToNot(HaveOccurred())
	for _, c := range cmds {
		g.Expect(c.String()).ToNot(ContainSubstring(sampleToken))
		g.Expect(strings.Contains(c.String(), "kubeadm join")).To(BeFalse())
	}
}

func TestWithIgnorePreflightErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"kubeadm join --config x", "kubeadm join --ignore-preflight-errors=E --config x"},
		{"kubeadm init --config x && echo", "kubeadm init --ignore-preflight-errors=E --config x && echo"},
		{"set -e; kubeadm  join x", "set -e; kubeadm  join --ignore-preflight-errors=E x"},
		{"echo ok && kubeadm join x", "echo ok && kubeadm join --ignore-preflight-errors=E x"},
		{"kubeadm reset -f", "kubeadm reset -f"},
		{"mykubeadm join", "mykubeadm join"},
		{"kubeadm joiner", "kubeadm joiner"},
	}
	for _, tt := range tests {
		NewWithT(t).Expect(withIgnorePreflightErrors(tt.in, "E")).To(Equal(tt.want), tt.in)
	}
}

// TestGzipContentIsBounded: gzip content is decompressed up to maxDecompressedBytes for all the
// files of the data together, so that a small Secret cannot make every parse allocate gigabytes;
// past it the parse fails, naming the file and the limit.
func TestGzipContentIsBounded(t *testing.T) {
	zeros := func(n int) string {
		return base64.StdEncoding.EncodeToString([]byte(gzipString(t, strings.Repeat("\x00", n))))
	}
	cloudConfigFile := func(path string, n int) string {
		return "- path: " + path + "\n  encoding: gz+b64\n  content: " + zeros(n) + "\n"
	}
	ignitionFile := func(path string, n int) string {
		return `{"path": "` + path + `", "contents": {"source": "data:;base64,` + zeros(n) + `", "compression": "gzip"}}`
	}
	tests := []struct {
		name    string
		format  string
		doc     string
		wantErr string
	}{
		{
			name:   "a cloud-config file of the limit",
			format: FormatCloudConfig,
			doc:    "#cloud-config\nwrite_files:\n" + cloudConfigFile("/etc/full", maxDecompressedBytes),
		},
		{
			name:    "a cloud-config file past the limit",
			format:  FormatCloudConfig,
			doc:     "#cloud-config\nwrite_files:\n" + cloudConfigFile("/etc/small", 10) + cloudConfigFile("/etc/big", maxDecompressedBytes+1),
			wantErr: "write_files[1] /etc/big: gzip content decompresses past 16 MiB",
		},
		{
			name:    "cloud-config files past the limit together",
			format:  FormatCloudConfig,
			doc:     "#cloud-config\nwrite_files:\n" + cloudConfigFile("/etc/half", maxDecompressedBytes/2) + cloudConfigFile("/etc/more", maxDecompressedBytes/2+1),
			wantErr: "write_files[1] /etc/more: gzip content decompresses past 16 MiB",
		},
		{
			name:   "an Ignition file of the limit",
			format: FormatIgnition,
			doc:    `{"ignition": {"version": "3.4.0"}, "storage": {"files": [` + ignitionFile("/etc/full", maxDecompressedBytes) + `]}}`,
		},
		{
			name:    "an Ignition file past the limit",
			format:  FormatIgnition,
			doc:     `{"ignition": {"version": "3.4.0"}, "storage": {"files": [` + ignitionFile("/etc/big", maxDecompressedBytes+1) + `]}}`,
			wantErr: "storage.files[0] /etc/big: contents: gzip content decompresses past 16 MiB",
		},
		{
			name:   "an Ignition file appended past the limit",
			format: FormatIgnition,
			doc: `{"ignition": {"version": "3.4.0"}, "storage": {"files": [{"path": "/etc/appended", "append": [` +
				`{"source": "data:;base64,` + zeros(maxDecompressedBytes) + `", "compression": "gzip"},` +
				`{"source": "data:;base64,` + zeros(1) + `", "compression": "gzip"}]}]}}`,
			wantErr: "storage.files[0] /etc/appended: append[1]: gzip content decompresses past 16 MiB",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			data := mustData(t, []byte(tt.doc), tt.format)
			_, err := Commands(data, Vars{Hostname: "n1"})
			// The pool reads the JoinConfiguration through the same decoding.
			_, joinErr := JoinConfigurationAPIVersion(data)
			if tt.wantErr == "" {
				g.Expect(err).ToNot(HaveOccurred())
				g.Expect(joinErr).To(MatchError(ErrNoJoinConfiguration))
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(joinErr).To(MatchError(ContainSubstring(tt.wantErr)))
		})
	}
}
