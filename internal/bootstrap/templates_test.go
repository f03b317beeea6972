package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/blang/semver/v4"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/ignition"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

const (
	versionedPath = "/etc/capdmp/versioned.yaml"
	// versionedTemplate prints the control plane version as CABPK substitutes it, beside a version
	// written in the template itself.
	versionedTemplate = "controlPlaneVersion: {{ .controlPlane.version }}\nimage: registry.k8s.io/kube-proxy:v1.35.0\n"
	pinnedPath        = "/etc/capdmp/pinned.yaml"
)

// templatedWorker is a worker KubeadmConfig's files and the control plane version CABPK renders
// its templates with.
type templatedWorker struct {
	format              string
	controlPlaneVersion string
	// template is the content of versionedPath, contentFormat Template.
	template string
	// pinned is the content of pinnedPath, a raw file.
	pinned string
	token  string
	// staleTemplate, when set, is what the data was rendered from: the KubeadmConfig's template
	// was edited to template since.
	staleTemplate string
	// noTemplates leaves Data.Templates empty, as for data no KubeadmConfig is known to render.
	noTemplates bool
}

// data renders the worker's join data as CABPK does (resolveFiles, then the cloud-init or
// Ignition renderer) and attaches its templates as Read would.
func (w templatedWorker) data(t *testing.T) *Data {
	t.Helper()
	w.format = cmpOr(w.format, FormatCloudConfig)
	w.template = cmpOr(w.template, versionedTemplate)
	w.pinned = cmpOr(w.pinned, "image: registry.k8s.io/kube-proxy:v1.35.0\n")
	rendered := renderLikeCABPK(t, cmpOr(w.staleTemplate, w.template), w.controlPlaneVersion)
	files := []bootstrapv1.File{
		{Path: versionedPath, Content: rendered, Permissions: "0644"},
		{Path: pinnedPath, Content: w.pinned, Permissions: "0644"},
	}
	v := semver.MustParse("1.35.0")
	jc := sampleJoinConfiguration()
	if w.token != "" {
		jc.Discovery.BootstrapToken.Token = w.token
	}
	joinData, err := kubeadmtypes.MarshalJoinConfigurationForVersion(jc, v)
	if err != nil {
		t.Fatal(err)
	}
	in := &cloudinit.NodeInput{
		BaseUserData:      cloudinit.BaseUserData{AdditionalFiles: files, PreKubeadmCommands: []string{"echo pre > /tmp/pre"}, KubernetesVersion: v},
		JoinConfiguration: joinData,
	}
	var value []byte
	if w.format == FormatIgnition {
		value, _, err = ignition.NewNode(&ignition.NodeInput{NodeInput: in, Ignition: &bootstrapv1.IgnitionSpec{}})
	} else {
		value, err = cloudinit.NewNode(in)
	}
	if err != nil {
		t.Fatal(err)
	}
	d := mustData(t, value, w.format)
	if !w.noTemplates {
		d.Templates = []FileTemplate{{Path: versionedPath, Template: w.template}}
	}
	return d
}

// renderLikeCABPK renders a contentFormat Template file as CABPK's KubeadmConfig reconciler does
// (reconcilers/kubeadmconfig/template.go: text/template named after the path, the version under
// .controlPlane.version, no controlPlane key when the version is unknown).
func renderLikeCABPK(t *testing.T, tpl, controlPlaneVersion string) string {
	t.Helper()
	data := map[string]any{}
	if controlPlaneVersion != "" {
		data["controlPlane"] = map[string]any{"version": controlPlaneVersion}
	}
	parsed, err := template.New(versionedPath).Parse(tpl)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := parsed.Execute(&buf, data); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestConfigurationWithoutControlPlaneVersion: CABPK renders templated files with the control
// plane's version each time it renders the data; that version is not the configuration, anything
// else in the files is.
func TestConfigurationWithoutControlPlaneVersion(t *testing.T) {
	const rotated = "zyx987.zyxwvutsrq987654"
	tests := []struct {
		name   string
		before templatedWorker
		after  templatedWorker
		same   bool
	}{
		{
			name:   "a control plane upgrade",
			before: templatedWorker{controlPlaneVersion: "v1.35.0"},
			after:  templatedWorker{controlPlaneVersion: "v1.36.2"},
			same:   true,
		},
		{
			name:   "a control plane upgrade to a pre-release",
			before: templatedWorker{controlPlaneVersion: "v1.35.0"},
			after:  templatedWorker{controlPlaneVersion: "v1.36.0-rc.1"},
			same:   true,
		},
		{
			name:   "a control plane upgrade and a new token, as a refresh renders them",
			before: templatedWorker{controlPlaneVersion: "v1.35.0"},
			after:  templatedWorker{controlPlaneVersion: "v1.36.2", token: rotated},
			same:   true,
		},
		{
			name:   "a control plane upgrade in Ignition",
			before: templatedWorker{format: FormatIgnition, controlPlaneVersion: "v1.35.0"},
			after:  templatedWorker{format: FormatIgnition, controlPlaneVersion: "v1.36.2"},
			same:   true,
		},
		{
			name:   "the version printed without its v",
			before: templatedWorker{controlPlaneVersion: "v1.35.0", template: "kubelet: {{ slice .controlPlane.version 1 }}\n"},
			after:  templatedWorker{controlPlaneVersion: "v1.36.2", template: "kubelet: {{ slice .controlPlane.version 1 }}\n"},
			same:   true,
		},
		{
			name:   "the version printed right before other text, several times",
			before: templatedWorker{controlPlaneVersion: "v1.35.0", template: "tag: {{ .controlPlane.version }}-custom\nagain: {{ .controlPlane.version }}"},
			after:  templatedWorker{controlPlaneVersion: "v1.36.2", template: "tag: {{ .controlPlane.version }}-custom\nagain: {{ .controlPlane.version }}"},
			same:   true,
		},
		{
			name: "a template that writes a cloud-init instance variable",
			before: templatedWorker{controlPlaneVersion: "v1.35.0",
				template: "node: {{ `{{ ds.meta_data.local_hostname }}` }}\nversion: {{ .controlPlane.version }}\n"},
			after: templatedWorker{controlPlaneVersion: "v1.36.2",
				template: "node: {{ `{{ ds.meta_data.local_hostname }}` }}\nversion: {{ .controlPlane.version }}\n"},
			same: true,
		},
		{
			name:   "a raw file edited to the version the control plane moves to",
			before: templatedWorker{controlPlaneVersion: "v1.35.0"},
			after:  templatedWorker{controlPlaneVersion: "v1.36.2", pinned: "image: registry.k8s.io/kube-proxy:v1.36.2\n"},
		},
		{
			name:   "a version written in the template itself edited",
			before: templatedWorker{controlPlaneVersion: "v1.35.0"},
			after: templatedWorker{controlPlaneVersion: "v1.35.0",
				template: strings.Replace(versionedTemplate, "kube-proxy:v1.35.0", "kube-proxy:v1.36.2", 1)},
		},
		{
			name:   "the template edited",
			before: templatedWorker{controlPlaneVersion: "v1.35.0"},
			after:  templatedWorker{controlPlaneVersion: "v1.36.2", template: versionedTemplate + "more: text\n"},
		},
		{
			name:   "another file's content edited",
			before: templatedWorker{controlPlaneVersion: "v1.35.0"},
			after:  templatedWorker{controlPlaneVersion: "v1.35.0", pinned: "other text\n"},
		},
		{
			// The KubeadmConfig was edited and CABPK has not rendered it yet: the data's file is
			// no rendering of the template, it counts as it is.
			name:   "data rendered from a template edited since",
			before: templatedWorker{controlPlaneVersion: "v1.35.0"},
			after:  templatedWorker{controlPlaneVersion: "v1.35.0", template: versionedTemplate + "more: text\n", staleTemplate: versionedTemplate},
		},
		{
			name:   "the control plane's version no longer known",
			before: templatedWorker{controlPlaneVersion: "v1.35.0"},
			after:  templatedWorker{},
		},
		{
			// Without the template nothing tells a substituted version from a written one.
			name:   "a control plane upgrade in data whose templates are not known",
			before: templatedWorker{controlPlaneVersion: "v1.35.0", noTemplates: true},
			after:  templatedWorker{controlPlaneVersion: "v1.36.2", noTemplates: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			before, after := tt.before.data(t), tt.after.data(t)
			g.Expect(before.Hash != after.Hash || !reflect.DeepEqual(before.Templates, after.Templates)).To(BeTrue(), "the test changes the data or its templates")
			g.Expect(configurationOf(t, after)).To(HaveLen(hashLabelLength))
			if tt.same {
				g.Expect(configurationOf(t, after)).To(Equal(configurationOf(t, before)))
			} else {
				g.Expect(configurationOf(t, after)).ToNot(Equal(configurationOf(t, before)))
			}
		})
	}
}

// TestConfigurationOfTemplatesWithoutVersion: data whose templates print no control plane version
// has the Configuration it had before templates were known, so that upgrading CAPDMP does not
// find every container of such a pool outdated.
func TestConfigurationOfTemplatesWithoutVersion(t *testing.T) {
	tests := []struct {
		name     string
		template string
		version  string
	}{
		{name: "plain text", template: "plain text\n", version: "v1.35.0"},
		{name: "no final line break (the YAML block scalar adds one)", template: "plain text", version: "v1.35.0"},
		{name: "a version written in the template", template: "image: registry.k8s.io/kube-proxy:v1.35.0\n", version: "v1.35.0"},
		{name: "a guard for an unknown version, no version known", template: "{{ if .controlPlane }}{{ .controlPlane.version }}{{ end }}static\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			withTemplates := templatedWorker{controlPlaneVersion: tt.version, template: tt.template}.data(t)
			without := templatedWorker{controlPlaneVersion: tt.version, template: tt.template, noTemplates: true}.data(t)
			g.Expect(configurationOf(t, withTemplates)).To(Equal(configurationOf(t, without)))
		})
	}
}

func TestVersionCandidates(t *testing.T) {
	tests := []struct {
		content string
		want    []string
	}{
		{content: "version: v1.35.0\n", want: []string{"v1.35.0"}},
		{content: "kubelet 1.35.0", want: []string{"v1.35.0"}},
		{content: "v1.36.0-rc.1+build.5 and v1.36.0-rc.1+build.5", want: []string{"v1.36.0-rc.1+build.5", "v1.36.0"}},
		{content: "tag: v1.35.0-custom", want: []string{"v1.35.0-custom", "v1.35.0"}},
		{content: "no version, 1.35 only"},
	}
	for _, tt := range tests {
		t.Run(tt.content, func(t *testing.T) {
			NewWithT(t).Expect(versionCandidates([]byte(tt.content))).To(Equal(tt.want))
		})
	}
}

// TestReadTemplates: Read takes the templates of the KubeadmConfig that controls the data Secret,
// as CABPK resolves them (inline or from a Secret).
func TestReadTemplates(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	_ = bootstrapv1.AddToScheme(scheme)
	config := &bootstrapv1.KubeadmConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers", UID: "config-uid"},
		Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{
			{Path: "/etc/inline", Content: "v: {{ .controlPlane.version }}", ContentFormat: bootstrapv1.FileContentFormatTemplate},
			{Path: "/etc/raw", Content: "v1.35.0"},
			{Path: "/etc/explicitly-raw", Content: "v1.35.0", ContentFormat: bootstrapv1.FileContentFormatRaw},
			{Path: "/etc/from-secret", ContentFormat: bootstrapv1.FileContentFormatTemplate,
				ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "source", Key: "tpl"}}},
			{Path: "/etc/from-missing-secret", ContentFormat: bootstrapv1.FileContentFormatTemplate,
				ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "gone", Key: "tpl"}}},
		}},
	}
	controlledBy := func(kind, apiVersion string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "workers", UID: uid, Controller: ptr(true)}}
	}
	dataSecret := func(name string, owners []metav1.OwnerReference) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, OwnerReferences: owners},
			Data:       map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")},
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		config,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "source"}, Data: map[string][]byte{"tpl": []byte("from a secret {{ .controlPlane.version }}")}},
		dataSecret("rendered", controlledBy("KubeadmConfig", bootstrapv1.GroupVersion.String(), "config-uid")),
		dataSecret("rendered-v1beta1", controlledBy("KubeadmConfig", "bootstrap.cluster.x-k8s.io/v1beta1", "config-uid")),
		dataSecret("other-uid", controlledBy("KubeadmConfig", bootstrapv1.GroupVersion.String(), "old-uid")),
		dataSecret("other-kind", controlledBy("OtherConfig", bootstrapv1.GroupVersion.String(), "config-uid")),
		dataSecret("other-group", controlledBy("KubeadmConfig", "bootstrap.example.com/v1", "config-uid")),
		dataSecret("not-controlled", []metav1.OwnerReference{{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig", Name: "workers", UID: "config-uid"}}),
		dataSecret("gone", []metav1.OwnerReference{{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig", Name: "deleted", UID: "x", Controller: ptr(true)}}),
	).Build()
	rendered := []FileTemplate{
		{Path: "/etc/inline", Template: "v: {{ .controlPlane.version }}"},
		{Path: "/etc/from-secret", Template: "from a secret {{ .controlPlane.version }}"},
	}
	tests := []struct {
		secret string
		want   []FileTemplate
	}{
		{secret: "rendered", want: rendered},
		{secret: "rendered-v1beta1", want: rendered},
		{secret: "other-uid"},
		{secret: "other-kind"},
		{secret: "other-group"},
		{secret: "not-controlled"},
		{secret: "gone"},
	}
	for _, tt := range tests {
		t.Run(tt.secret, func(t *testing.T) {
			g := NewWithT(t)
			d, err := Read(context.Background(), c, "ns", tt.secret)
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(d.Templates).To(Equal(tt.want))
		})
	}
}

// TestTemplateRenderingIsBounded: a KubeadmConfig's template runs at every pool reconcile, with
// the text/template of the Go library, which has no means to cancel a rendering. A template
// that would run for hours, or grow a string without bound, ends in an error that names the
// file and the limit instead.
func TestTemplateRenderingIsBounded(t *testing.T) {
	// Template calls that double at each level: 2^40 calls, and no range.
	doublingCalls := `{{define "t0"}}{{end}}`
	for i := 1; i <= 40; i++ {
		doublingCalls += fmt.Sprintf(`{{define "t%d"}}{{template "t%d"}}{{template "t%d"}}{{end}}`, i, i-1, i-1)
	}
	doublingCalls += `{{template "t40"}}`
	tests := []struct {
		name     string
		template string
		wantErr  string
	}{
		{name: "nested ranges over integers", template: "{{range 1000000}}{{range 1000000}}{{end}}{{end}}", wantErr: "steps"},
		{name: "template calls that double", template: doublingCalls, wantErr: "steps"},
		{name: "output past the limit", template: "{{range 1000000}}" + strings.Repeat("x", 1024) + "{{end}}", wantErr: "1048576 byte limit"},
		{name: "a string doubled until it is too long", template: `{{$s := "0123456789abcdef"}}` + strings.Repeat(`{{$s = printf "%s%s" $s $s}}`, 40), wantErr: "printf would make a string longer than 1048576 bytes"},
		{name: "a string escaped until it is too long", template: `{{$s := printf "%0200000d" 0}}{{$s = printf "%s<" $s}}` + strings.Repeat(`{{$s = html $s $s}}`, 5), wantErr: "html would make a string longer than 1048576 bytes"},
		{name: "a wide format", template: strings.Repeat(`{{printf "%01000000d%01000000d" 1 2}}`, 1), wantErr: "printf would make a string longer"},
		{name: "the same long argument printed many times", template: `{{$s := printf "%0100000d" 1}}{{printf "` + strings.Repeat("%[1]s", 100) + `" $s}}`, wantErr: "printf would make a string longer"},
		{name: "long strings made again and again", template: `{{range 1000000}}{{$s := printf "%0500000d" 1}}{{end}}`, wantErr: "steps"},
		{name: "deep recursion", template: `{{define "r"}}{{template "r"}}{{end}}{{template "r"}}`, wantErr: "steps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			data := templatedWorker{controlPlaneVersion: "v1.35.0"}.data(t)
			data.Templates[0].Template = tt.template
			done := make(chan error, 1)
			go func() {
				_, err := data.Configuration(context.Background())
				done <- err
			}()
			select {
			case err := <-done:
				g.Expect(err).To(MatchError(ErrTemplateBudgetExceeded))
				g.Expect(err).To(MatchError(ContainSubstring(versionedPath)))
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			case <-time.After(time.Minute):
				// A bounded rendering takes milliseconds; this one would hold a worker for hours.
				t.Fatalf("Configuration did not return within a minute: the rendering of %s is not bounded", versionedPath)
			}
		})
	}
}

// TestTemplateRenderingHonoursTheContext: a reconcile whose context is done stops rendering.
func TestTemplateRenderingHonoursTheContext(t *testing.T) {
	g := NewWithT(t)
	data := templatedWorker{controlPlaneVersion: "v1.35.0"}.data(t)
	data.Templates[0].Template = "{{range 1000000}}{{range 1000000}}{{end}}{{end}}"
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := data.Configuration(ctx)
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(err).To(MatchError(ContainSubstring(versionedPath)))
}

// TestMeteredTemplatesRenderAsCABPK: the budget's functions and the calls it adds to a template
// change nothing it renders.
func TestMeteredTemplatesRenderAsCABPK(t *testing.T) {
	templates := []string{
		"plain text\n",
		"v: {{ .controlPlane.version }}\n",
		"{{ if .controlPlane }}{{ .controlPlane.version }}{{ else }}unknown{{ end }}\n",
		"{{ with .controlPlane }}{{ .version }}{{ else with . }}empty{{ end }}",
		"{{ range $k, $v := .controlPlane }}{{ $k }}={{ $v }};{{ else }}none{{ end }}",
		"{{ range 5 }}{{ if eq . 3 }}{{ break }}{{ end }}{{ if eq . 1 }}{{ continue }}{{ end }}{{ . }}{{ end }}",
		`{{ define "v" }}[{{ .version }}]{{ end }}{{ with .controlPlane }}{{ template "v" . }}{{ end }}{{ block "b" . }}block{{ end }}`,
		`{{ printf "%s-%05d-%q" "a" 42 "b" }} {{ print 1 2 "x" }} {{ println "y" }}`,
		`{{ html "<a&b>" }} {{ js "it's <x>" }} {{ urlquery "a b&c" }} {{ slice "v1.35.0" 1 }} {{ len "abc" }} {{ index . "controlPlane" }}`,
		`{{ $v := "" }}{{ if .controlPlane }}{{ $v = .controlPlane.version }}{{ end }}{{ $v }}{{/* a comment */}}`,
		"{{- /* trimmed */ -}}\n  {{ 1 }}  {{- 2 -}}  ",
	}
	for _, tpl := range templates {
		for _, version := range []string{"", "v1.35.0"} {
			t.Run(tpl+" "+version, func(t *testing.T) {
				g := NewWithT(t)
				want, err := template.New(versionedPath).Parse(tpl)
				g.Expect(err).ToNot(HaveOccurred())
				var wantOut bytes.Buffer
				g.Expect(want.Execute(&wantOut, templateData(version))).To(Succeed())
				got, err := newTemplateBudget(context.Background()).parse(versionedPath, tpl)
				g.Expect(err).ToNot(HaveOccurred())
				var gotOut bytes.Buffer
				g.Expect(got.Execute(&gotOut, templateData(version))).To(Succeed())
				g.Expect(gotOut.String()).To(Equal(wantOut.String()))
			})
		}
	}
}
