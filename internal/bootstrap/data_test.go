package bootstrap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestNewData(t *testing.T) {
	tests := []struct {
		name       string
		value      string
		format     string
		wantFormat string
		wantErr    string
	}{
		{name: "default format is cloud-config", value: "#cloud-config\n", wantFormat: FormatCloudConfig},
		{name: "cloud-config", value: "#cloud-config\n", format: "cloud-config", wantFormat: FormatCloudConfig},
		{name: "ignition", value: "{}", format: "ignition", wantFormat: FormatIgnition},
		{name: "unknown format", value: "x", format: "shell", wantErr: `unsupported bootstrap data format "shell"`},
		{name: "empty", format: "ignition", wantErr: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d, err := NewData([]byte(tt.value), tt.format)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(d.Format).To(Equal(tt.wantFormat))
			g.Expect(string(d.Value)).To(Equal(tt.value))
		})
	}
	d, err := NewData([]byte("#cloud-config\n"), "")
	NewWithT(t).Expect(err).ToNot(HaveOccurred())
	// As `printf '#cloud-config\n' | sha256sum` prints it.
	NewWithT(t).Expect(d.Hash).To(Equal("88c95955b024402aa9572b663f7eeb134f01343bb92af27b50e97e72b22c565f"))
}

func TestHashLabelValue(t *testing.T) {
	g := NewWithT(t)
	d, err := NewData([]byte("#cloud-config\n"), "")
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(d.Hash).To(HaveLen(64), "one more than a Kubernetes label value takes")
	g.Expect(HashLabelValue(d.Hash)).To(Equal(d.Hash[:32]))
	g.Expect(HashLabelValue(HashLabelValue(d.Hash))).To(Equal(d.Hash[:32]), "idempotent")
	g.Expect(HashLabelValue("")).To(BeEmpty())
}

func TestRead(t *testing.T) {
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: data}
	}
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		secret("cloud", map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")}),
		secret("noformat", map[string][]byte{"value": []byte("#cloud-config\n")}),
		secret("ign", map[string][]byte{"value": []byte(`{"ignition":{"version":"2.3.0"}}`), "format": []byte("ignition")}),
		secret("novalue", map[string][]byte{"format": []byte("cloud-config")}),
		secret("badformat", map[string][]byte{"value": []byte("x"), "format": []byte("yaml")}),
	).Build()
	ctx := context.Background()

	tests := []struct {
		name       string
		secret     string
		wantFormat string
		wantErr    string
	}{
		{name: "cloud-config", secret: "cloud", wantFormat: FormatCloudConfig},
		{name: "no format key means cloud-config", secret: "noformat", wantFormat: FormatCloudConfig},
		{name: "ignition", secret: "ign", wantFormat: FormatIgnition},
		{name: "no value", secret: "novalue", wantErr: `bootstrap data Secret ns/novalue has no "value"`},
		{name: "unknown format", secret: "badformat", wantErr: `unsupported bootstrap data format "yaml"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d, err := Read(ctx, c, "ns", tt.secret)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(d.Format).To(Equal(tt.wantFormat))
			g.Expect(d.Hash).To(Equal(sha256Hex(string(d.Value))))
		})
	}

	t.Run("a missing Secret keeps its NotFound", func(t *testing.T) {
		g := NewWithT(t)
		_, err := Read(ctx, c, "ns", "missing")
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		g.Expect(err.Error()).To(ContainSubstring("ns/missing"))
	})
}

func TestDataIsNeverPrinted(t *testing.T) {
	g := NewWithT(t)
	const secret = "abcdef.0123456789abcdef"
	d, err := NewData([]byte("#cloud-config\n# token "+secret+"\n"), "")
	g.Expect(err).ToNot(HaveOccurred())

	var logged string
	logger := funcr.New(func(_, args string) { logged += args }, funcr.Options{})
	logger.Info("Bootstrapping", "data", d, "value", *d)

	j, err := json.Marshal(d)
	g.Expect(err).ToNot(HaveOccurred())
	for _, out := range []string{
		fmt.Sprintf("%v", d), fmt.Sprintf("%+v", d), fmt.Sprintf("%#v", d), fmt.Sprintf("%s", d), //nolint:gocritic,staticcheck // printing through fmt is the point
		fmt.Sprintf("%v", *d), fmt.Sprintf("%+v", *d), fmt.Sprintf("%#v", *d), //nolint:gocritic // printing through fmt is the point
		string(j), logged,
	} {
		g.Expect(out).ToNot(ContainSubstring(secret))
		g.Expect(out).To(ContainSubstring(d.Hash))
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
