package bootstrap

import (
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

const (
	testToken = "abcdef.0123456789abcdef"
	testKey   = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\nVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n-----END RSA PRIVATE KEY-----"
)

func TestRedact(t *testing.T) {
	keyB64 := base64.StdEncoding.EncodeToString([]byte(testKey + "\n"))
	// A base64 key wrapped at 64 characters and indented, as in a YAML block scalar.
	var keyB64Lines []string
	for rest := keyB64; rest != ""; rest = rest[min(64, len(rest)):] {
		keyB64Lines = append(keyB64Lines, "    "+rest[:min(64, len(rest))])
	}
	joinConfig := "discovery:\n  bootstrapToken:\n    token: " + testToken + "\n"
	joinConfigB64 := base64.StdEncoding.EncodeToString([]byte(joinConfig))
	keyBody := "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
	tests := []struct {
		name    string
		in      string
		want    string
		secrets []string
	}{
		{name: "nothing secret", in: "error execution phase kubelet-start: timed out", want: "error execution phase kubelet-start: timed out"},
		{name: "a bootstrap token in a message", in: "token " + testToken + " is expired", secrets: []string{testToken}},
		{name: "kubeadm flags", in: "kubeadm join 10.0.0.1:6443 --token " + testToken + " --certificate-key 0123abcd0123abcd --discovery-token-ca-cert-hash sha256:aa",
			want: "kubeadm join 10.0.0.1:6443 --token <redacted> --certificate-key <redacted> --discovery-token-ca-cert-hash sha256:aa"},
		{name: "a PEM key", in: "wrote key:\n" + testKey + "\ndone", want: "wrote key:\n<redacted PEM block>\ndone"},
		{name: "a PEM block cut at the start by a tail", in: "o7onLRnrq0/IzW7yWR7Qkrm\n-----END CERTIFICATE-----\nerror: x", want: "<redacted PEM block>\nerror: x"},
		{name: "two ENDs without their BEGIN: all up to the last goes", in: "-----END A-----\nbody\n-----END B-----\nrest", want: "<redacted PEM block>\nrest"},
		{name: "a PEM block cut at the end", in: "config:\n-----BEGIN CERTIFICATE-----\nMIIC5zCCAc+gAwIBAgIBADAN", want: "config:\n<redacted PEM block>"},
		{name: "kubeconfig and kubeadm fields", in: "client-key-data: LS0tLS1CRUdJTg==\n  token: \"" + testToken + "\"\ncertificateKey: 0f0e",
			want: "client-key-data: <redacted>\n  token: \"<redacted>\"\ncertificateKey: <redacted>"},
		{name: "base64 and hex that hold no secret", in: "image sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855, content: " + base64.StdEncoding.EncodeToString([]byte("a plain configuration file\n")),
			want: "image sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855, content: " + base64.StdEncoding.EncodeToString([]byte("a plain configuration file\n"))},
		{name: "a base64 PEM key", in: "write_files[0] content: " + keyB64 + " is not valid", want: "write_files[0] content: <redacted base64> is not valid"},
		{name: "a base64 PEM key wrapped on indented lines", in: "content: |\n" + strings.Join(keyB64Lines, "\n") + "\nerror: x",
			want: "content: |\n    <redacted base64>\nerror: x", secrets: keyB64Lines},
		{name: "a base64 PEM key cut at the start by a tail", in: keyB64[37:] + "\nerror: x", want: "<redacted base64>\nerror: x"},
		{name: "an Ignition data URL holding the join token", in: `{"path":"/run/kubeadm/kubeadm-join-config.yaml","contents":{"source":"data:,` + url.PathEscape(joinConfig) + `"}}`,
			want: `{"path":"/run/kubeadm/kubeadm-join-config.yaml","contents":{"source":"data:,<redacted>"}}`},
		{name: "an Ignition base64 data URL holding the join token", in: `"source":"data:;base64,` + joinConfigB64 + `"`,
			want: `"source":"data:;base64,<redacted>"`, secrets: []string{joinConfigB64[:20]}},
		{name: "an Ignition data URL cut at the start by a tail", in: url.PathEscape(joinConfig)[8:] + `"}}]}}`, secrets: []string{"0123456789abcdef"}},
		{name: "a PEM key cut at the output limit within its BEGIN line, without its END", in: testKey[3 : len(testKey)-len("-----END RSA PRIVATE KEY-----")],
			want: "<redacted PEM block>", secrets: []string{keyBody, "VTLw7onLRnrq0"}},
		{name: "a PEM key cut at the output limit within its label, without its END", in: testKey[14 : len(testKey)-len("-----END RSA PRIVATE KEY-----")],
			want: "<redacted PEM block>", secrets: []string{keyBody, "VTLw7onLRnrq0"}},
		{name: "an Authorization header", in: "curl -H 'Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln' https://10.0.0.1:6443",
			want: "curl -H 'Authorization: Bearer <redacted>' https://10.0.0.1:6443"},
		{name: "a bearer token", in: "using bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln for the API", want: "using bearer <redacted> for the API"},
		{name: "passwords", in: "password: hunter2\nuser: admin\n{\"password\":\"s3cret\"} --password=pa55",
			want: "password: <redacted>\nuser: admin\n{\"password\":\"<redacted>\"} --password=<redacted>"},
		{name: "a kubeconfig key as a block scalar, CRLF", in: "    client-key-data: |-\r\n      " + keyBody + "\r\n    user: x",
			want: "    client-key-data: |-\r\n      <redacted>\n    user: x"},
		{name: "a kubeconfig key as a block scalar", in: "users:\n- name: admin\n  user:\n    client-key-data: |\n      " + keyBody + "\n      " + keyBody + "\n    client-certificate-data: abc\nclusters: []",
			want: "users:\n- name: admin\n  user:\n    client-key-data: |\n      <redacted>\n    client-certificate-data: <redacted>\nclusters: []"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := Redact(tt.in)
			g.Expect(Redact(got)).To(Equal(got), "redacting again changes nothing")
			if tt.want != "" {
				g.Expect(got).To(Equal(tt.want))
			}
			for _, s := range append(tt.secrets, testToken, "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun") {
				g.Expect(got).NotTo(ContainSubstring(s))
			}
		})
	}
}

// BenchmarkRedact: Redact runs on the output of failed commands, up to a few kilobytes; its cost
// grows with the length of the text, base64 included.
func BenchmarkRedact(b *testing.B) {
	keyB64 := base64.StdEncoding.EncodeToString([]byte(testKey))
	output := strings.Repeat("[preflight] Running pre-flight checks for node-a1b2c3 at 10.0.0.1:6443\n", 8) +
		"content: " + keyB64 + "\ntoken: " + testToken + "\n" + testKey + "\n"
	for _, size := range []int{1 << 10, 64 << 10} {
		text := strings.Repeat(output, size/len(output)+1)[:size]
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				Redact(text)
			}
		})
	}
}
