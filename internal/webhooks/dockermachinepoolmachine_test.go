package webhooks

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

func machineWith(providerID string) *infrav1.DockerMachinePoolMachine {
	return &infrav1.DockerMachinePoolMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-abcde", Namespace: "default"},
		Spec:       infrav1.DockerMachinePoolMachineSpec{ProviderID: providerID},
	}
}

func TestDockerMachinePoolMachineValidateCreate(t *testing.T) {
	tests := []struct {
		name       string
		providerID string
		wantErrs   []string
	}{
		{name: "no provider ID yet", providerID: ""},
		{name: "docker provider ID", providerID: "docker:////pool-abcde"},
		{name: "another provider's ID", providerID: "aws:///us-east-1a/i-0123", wantErrs: []string{`spec.providerID: Invalid value: "aws:///us-east-1a/i-0123"`, "docker:////<container name>"}},
		{name: "prefix without a container name", providerID: "docker:////", wantErrs: []string{"spec.providerID"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			warnings, err := (&DockerMachinePoolMachine{}).ValidateCreate(context.Background(), machineWith(tt.providerID))
			expectInvalid(g, err, tt.wantErrs)
			g.Expect(warnings).To(BeEmpty())
		})
	}
}

func TestDockerMachinePoolMachineValidateUpdate(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		wantErrs []string
	}{
		{name: "provider ID set for the first time", old: "", new: "docker:////pool-abcde"},
		{name: "provider ID unchanged", old: "docker:////pool-abcde", new: "docker:////pool-abcde"},
		{name: "provider ID set for the first time to a wrong value", old: "", new: "pool-abcde", wantErrs: []string{"spec.providerID: Invalid value"}},
		{name: "provider ID changed", old: "docker:////pool-abcde", new: "docker:////pool-fghij", wantErrs: []string{"spec.providerID: Forbidden", "docker:////pool-abcde"}},
		{name: "provider ID removed", old: "docker:////pool-abcde", new: "", wantErrs: []string{"spec.providerID: Forbidden"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			warnings, err := (&DockerMachinePoolMachine{}).ValidateUpdate(context.Background(), machineWith(tt.old), machineWith(tt.new))
			expectInvalid(g, err, tt.wantErrs)
			g.Expect(warnings).To(BeEmpty())
		})
	}
}
