package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FileTemplate is a file of the data that the bootstrap provider rendered from a Go
// text/template: a KubeadmConfig spec.files entry with contentFormat Template, which CABPK
// renders with the control plane's Kubernetes version as {{ .controlPlane.version }}.
type FileTemplate struct {
	// Path is where the file is written on the node.
	Path string
	// Template is the file's content before rendering: spec.files[].content, or the value its
	// contentFrom Secret holds.
	Template string
}

// controlPlaneVersionPlaceholder stands for the control plane version in the files a Configuration
// hashes, as "<bootstrap token>" stands for the token.
const controlPlaneVersionPlaceholder = "<control plane version>"

// maxRenderedTemplateBytes is CABPK's bound on one rendered file (1 MiB): it renders nothing
// longer, so no file of its data is longer. No string a template makes is longer either.
const maxRenderedTemplateBytes = 1 << 20

// maxVersionCandidates bounds the renderings tried per file.
const maxVersionCandidates = 16

// semverInContent finds what may be a rendered Kubernetes version: CABPK renders "v" and the
// version's semver, e.g. v1.35.0 or v1.36.0-rc.1; a template may drop the "v" (slice).
var semverInContent = regexp.MustCompile(`v?(\d+\.\d+\.\d+)((?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?)`)

// templateData is the data CABPK renders a template with (bootstrap/kubeadm/reconcilers/
// kubeadmconfig/template.go, templateData): no controlPlane key when the version is unknown.
func templateData(controlPlaneVersion string) map[string]any {
	if controlPlaneVersion == "" {
		return map[string]any{}
	}
	return map[string]any{"controlPlane": map[string]any{"version": controlPlaneVersion}}
}

// withoutControlPlaneVersion returns a file's content as a Configuration counts it: content that
// is tpl rendered for some control plane version, as CABPK renders it, becomes tpl rendered with
// controlPlaneVersionPlaceholder, so that only the values the template substitutes are taken out
// (a version written in the template itself stays). It returns false when the content is not a
// rendering of tpl (the template was edited since the data was rendered, or prints the version
// in a form no candidate reproduces): then the content counts as it is. asWritten, when not nil,
// turns a rendering into what the node gets (the cloud-init instance variables of a Jinja
// document: cloud-init renders the whole document, the files CABPK rendered included). Rendering
// spends from budget; once it is spent, or its context is done, the error says so.
func withoutControlPlaneVersion(budget *templateBudget, path, tpl string, content []byte, asWritten func([]byte) ([]byte, error)) ([]byte, bool, error) {
	t, err := budget.parse(path, tpl)
	if err != nil {
		// CABPK renders no file from a template that does not parse: the content counts as it is.
		return nil, false, nil //nolint:nilerr // not an error of the Configuration
	}
	var exceeded error
	render := func(version string) ([]byte, bool) {
		var buf bytes.Buffer
		if err := t.Execute(&limitedWriter{w: &buf, remaining: maxRenderedTemplateBytes}, templateData(version)); err != nil {
			exceeded = budget.stoppedBy(err)
			return nil, false
		}
		if asWritten == nil {
			return buf.Bytes(), true
		}
		out, err := asWritten(buf.Bytes())
		return out, err == nil
	}
	// cloud-init and Ignition carry CABPK's files in YAML block scalars, which end them with one
	// line break whatever the template ended with: compare and rebuild without trailing ones.
	body := bytes.TrimRight(content, "\n")
	trailing := content[len(body):]
	renders := func(version string) bool {
		out, ok := render(version)
		return ok && bytes.Equal(bytes.TrimRight(out, "\n"), body)
	}
	if renders("") {
		// Rendered without a control plane version (the Cluster has none): nothing to take out.
		return content, true, nil
	}
	for _, version := range versionCandidates(content) {
		if exceeded != nil {
			break
		}
		if !renders(version) {
			continue
		}
		out, ok := render(controlPlaneVersionPlaceholder)
		if !ok {
			break
		}
		return append(bytes.TrimRight(out, "\n"), trailing...), true, nil
	}
	if exceeded != nil {
		return nil, false, fmt.Errorf("failed to render the template of file %s: %w", path, exceeded)
	}
	return nil, false, nil
}

// versionCandidates are the control plane versions content may have been rendered with: each
// version-like string found in it, as CABPK passes it ("v" and the semver), with and without
// what follows the patch number (a template may write a suffix right after the version).
func versionCandidates(content []byte) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range semverInContent.FindAllSubmatch(content, -1) {
		for _, v := range []string{"v" + string(m[1]) + string(m[2]), "v" + string(m[1])} {
			if seen[v] {
				continue
			}
			seen[v] = true
			out = append(out, v)
			if len(out) == maxVersionCandidates {
				return out
			}
		}
	}
	return out
}

type limitedWriter struct {
	w         io.Writer
	remaining int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if len(p) > l.remaining {
		return 0, fmt.Errorf("%w: the rendered file exceeds the %d byte limit", ErrTemplateBudgetExceeded, maxRenderedTemplateBytes)
	}
	l.remaining -= len(p)
	return l.w.Write(p)
}

// kubeadmConfigTemplates returns the file templates of the KubeadmConfig that controls the data
// Secret (CABPK makes itself the controller of the Secrets it writes): none when the Secret has
// no such controller or it is gone. Templated files whose contentFrom Secret is gone are left
// out: their content then counts as it is.
func kubeadmConfigTemplates(ctx context.Context, c client.Reader, secret *corev1.Secret) ([]FileTemplate, error) {
	owner := metav1.GetControllerOf(secret)
	if owner == nil || owner.Kind != "KubeadmConfig" {
		return nil, nil
	}
	if group, _, _ := strings.Cut(owner.APIVersion, "/"); group != bootstrapv1.GroupVersion.Group {
		return nil, nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"))
	key := client.ObjectKey{Namespace: secret.Namespace, Name: owner.Name}
	if err := c.Get(ctx, key, u); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to read KubeadmConfig %s, which renders bootstrap data Secret %s/%s: %w", key, secret.Namespace, secret.Name, err)
	}
	if u.GetUID() != owner.UID {
		// Another KubeadmConfig of the same name: it did not render this data.
		return nil, nil
	}
	config := &bootstrapv1.KubeadmConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, config); err != nil {
		return nil, fmt.Errorf("failed to read the files of KubeadmConfig %s: %w", key, err)
	}
	var out []FileTemplate
	for _, f := range config.Spec.Files {
		if f.ContentFormat != bootstrapv1.FileContentFormatTemplate {
			continue
		}
		content := f.Content
		if f.ContentFrom.IsDefined() {
			// As CABPK resolves it before rendering (resolveSecretFileContent).
			source := &corev1.Secret{}
			sourceKey := client.ObjectKey{Namespace: secret.Namespace, Name: f.ContentFrom.Secret.Name}
			if err := c.Get(ctx, sourceKey, source); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("failed to read Secret %s, the content of file %s of KubeadmConfig %s: %w", sourceKey, f.Path, key, err)
			}
			value, ok := source.Data[f.ContentFrom.Secret.Key]
			if !ok {
				continue
			}
			content = string(value)
		}
		out = append(out, FileTemplate{Path: strings.TrimSpace(f.Path), Template: content})
	}
	return out, nil
}
