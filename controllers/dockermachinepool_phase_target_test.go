package controllers

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/internal/webhooks"
	"github.com/capdmp/capdmp/pkg/skew"
)

// TestCustomImageSameAnswerInWebhookAndController feeds the same customImage to the validating
// webhook and to a reconcile: an image the webhook admits must give the gate a target version,
// and an image it refuses must be one the controller reports as InvalidVersion, never a guess.
// Where both accept, pkg/skew (what other providers import) reads the same version.
func TestCustomImageSameAnswerInWebhookAndController(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name  string
		image string
		want  string // the version both read; empty when both refuse the image
	}{
		{name: "kindest/node tag", image: "kindest/node:v1.31.0", want: "v1.31.0"},
		{name: "registry with a port, tag and digest", image: "localhost:5000/kindest/node:v1.31.0@" + digest, want: "v1.31.0"},
		{name: "IPv6 registry", image: "[::1]:5000/kindest/node:v1.31.0", want: "v1.31.0"},
		{name: "build metadata written with _", image: "registry.example/node:v1.31.0_capdmp.1", want: "v1.31.0+capdmp.1"},
		{name: "tag without v", image: "registry.example:443/node:1.31.0"},
		{name: "digest only", image: "kindest/node@" + digest},
		{name: "registry port without a tag", image: "localhost:5000/kindest/node"},
		{name: "latest", image: "kindest/node:latest"},
		{name: "digest algorithm no engine verifies", image: "kindest/node:v1.31.0@md5:" + strings.Repeat("ab", 16)},
		{name: "upper-case hex digest", image: "kindest/node:v1.31.0@sha256:" + strings.Repeat("AB", 32)},
		// A valid tag, but the version is longer than the label value the gate reads it back from.
		{name: "version too long for the label", image: "registry.example/node:v1.31.0_" + strings.Repeat("a", 60)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", customImage: tt.image}
			objs := w.objects()
			pool := objs[len(objs)-1].(*infrav1.DockerMachinePool)
			_, webhookErr := (&webhooks.DockerMachinePool{}).ValidateCreate(context.Background(), pool.DeepCopy())

			r, _ := newTestReconciler(g, objs, fakeruntime.NewWithNodeImages())
			reconciled := reconcilePool(g, r)
			gate := conditions.Get(reconciled, infrav1.VersionSkewCondition)
			g.Expect(gate).ToNot(BeNil())

			if tt.want == "" {
				g.Expect(webhookErr).To(HaveOccurred(), "the webhook admits %q", tt.image)
				g.Expect(gate.Reason).To(Equal(string(skew.InvalidVersion)), "the controller reads %q: %s", tt.image, gate.Message)
				g.Expect(reconciled.Labels).ToNot(HaveKey(infrav1.KubernetesVersionLabel))
				return
			}
			g.Expect(webhookErr).ToNot(HaveOccurred())
			g.Expect(gate.Reason).ToNot(Equal(string(skew.InvalidVersion)), gate.Message)
			g.Expect(reconciled.Status.VersionGate.TargetVersion).To(Equal(tt.want))
			label, err := skew.VersionLabelValue(tt.want)
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(reconciled.Labels).To(HaveKeyWithValue(infrav1.KubernetesVersionLabel, label))
			g.Expect(skew.VersionFromImageTag(tt.image)).To(Equal(tt.want))
		})
	}
}
