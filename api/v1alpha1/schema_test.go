package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/test/testenv"
)

// TestSchemaValidation checks what the CRD schema rejects on a real kube-apiserver, without
// webhooks: what can be checked statically never reaches the controller.
func TestSchemaValidation(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	management, err := testenv.StartManagement(ctx)
	g.Expect(err).ToNot(HaveOccurred())
	t.Cleanup(func() { _ = management.Stop() })

	tests := []struct {
		name    string
		mutate  func(*infrav1.DockerMachinePool)
		wantErr string // empty: accepted
	}{
		{name: "a valid pool", mutate: func(p *infrav1.DockerMachinePool) {
			p.Spec.Template.CustomImage = "localhost:5000/kindest/node:v1.33.1"
			p.Spec.Template.ExtraMounts = []infrav1.Mount{{ContainerPath: "/data", HostPath: "/srv/data", ReadOnly: true}}
			p.Spec.Template.BootstrapTimeout = &metav1.Duration{Duration: 2 * time.Minute}
		}},
		// customImage has no pattern: the webhook checks it with the rule the controller reads it
		// by (nodeimage.VersionOfImage); a second copy of the rule in the schema drifted from it.
		{name: "customImage is left to the webhook", mutate: func(p *infrav1.DockerMachinePool) {
			p.Spec.Template.CustomImage = "kindest/Node:v1.33.1"
		}},
		{name: "customImage longer than 512", mutate: func(p *infrav1.DockerMachinePool) {
			p.Spec.Template.CustomImage = strings.Repeat("a", 513)
		}, wantErr: "spec.template.customImage"},
		{name: "relative container path", mutate: func(p *infrav1.DockerMachinePool) {
			p.Spec.Template.ExtraMounts = []infrav1.Mount{{ContainerPath: "data", HostPath: "/srv/data"}}
		}, wantErr: "spec.template.extraMounts[0].containerPath"},
		{name: "relative host path", mutate: func(p *infrav1.DockerMachinePool) {
			p.Spec.Template.ExtraMounts = []infrav1.Mount{{ContainerPath: "/data", HostPath: "srv"}}
		}, wantErr: "spec.template.extraMounts[0].hostPath"},
		{name: "zero bootstrap timeout", mutate: func(p *infrav1.DockerMachinePool) {
			p.Spec.Template.BootstrapTimeout = &metav1.Duration{}
		}, wantErr: "bootstrapTimeout must be greater than zero"},
		{name: "an hour is the longest bootstrap timeout", mutate: func(p *infrav1.DockerMachinePool) {
			p.Spec.Template.BootstrapTimeout = &metav1.Duration{Duration: time.Hour}
		}},
		{name: "a bootstrap timeout over an hour", mutate: func(p *infrav1.DockerMachinePool) {
			p.Spec.Template.BootstrapTimeout = &metav1.Duration{Duration: time.Hour + time.Second}
		}, wantErr: "bootstrapTimeout must be at most 1h"},
		{name: "empty provider ID in the list", mutate: func(p *infrav1.DockerMachinePool) {
			p.Spec.ProviderIDList = []string{""}
		}, wantErr: "spec.providerIDList[0]"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			pool := &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "pool-" + string(rune('a'+i))}}
			tt.mutate(pool)
			err := management.Client.Create(ctx, pool)
			if tt.wantErr == "" {
				g.Expect(err).ToNot(HaveOccurred())
				return
			}
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
}
