package bootstrap

import (
	"testing"

	. "github.com/onsi/gomega"
)

const (
	testToken = "abcdef.0123456789abcdef"
	testKey   = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\nVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n-----END RSA PRIVATE KEY-----"
)

func TestRedact(t *testing.T) {
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := Redact(tt.in)
			if tt.want != "" {
				g.Expect(got).To(Equal(tt.want))
			}
			for _, s := range append(tt.secrets, testToken, "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun") {
				g.Expect(got).NotTo(ContainSubstring(s))
			}
		})
	}
}
