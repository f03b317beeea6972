package importer

import (
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	controlplanev1beta1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta1" //nolint:staticcheck // the v1beta1 KubeadmControlPlane a provider on Cluster API v1.13 may still read
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// The versions this module pins, older than the provider's own (Cluster API v1.14, Kubernetes
// v0.36): importing pkg/skew must leave them as they are.
var pins = map[string]string{
	"sigs.k8s.io/cluster-api":        "v1.13.6",
	"k8s.io/apimachinery":            "v0.35.4",
	"sigs.k8s.io/controller-runtime": "v0.23.3",
}

// TestKeepsItsPins: the module graph, pkg/skew's requirements in it, still selects the versions
// this module pins.
func TestKeepsItsPins(t *testing.T) {
	g := NewWithT(t)

	paths := append(slices.Sorted(maps.Keys(pins)), "github.com/capdmp/capdmp/pkg/skew")
	out, err := exec.Command("go", append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}}{{with .Replace}}=>{{.Path}}{{end}}"}, paths...)...).CombinedOutput()
	g.Expect(err).ToNot(HaveOccurred(), "go list -m: %s", out)
	selected := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, version, _ := strings.Cut(line, " ")
		selected[path] = version
	}
	for path, version := range pins {
		g.Expect(selected).To(HaveKeyWithValue(path, version), "%s was raised by importing pkg/skew", path)
	}
	g.Expect(selected).To(HaveKeyWithValue("github.com/capdmp/capdmp/pkg/skew", HaveSuffix("=>../../pkg/skew")))
}

func Example() {
	machinePool := &clusterv1.MachinePool{Spec: clusterv1.MachinePoolSpec{Template: clusterv1.MachineTemplateSpec{
		Spec: clusterv1.MachineSpec{Version: "v1.35.1"},
	}}}
	pool := Pool{Image: "kindest/node:v1.35.1", RunningVersions: []string{"v1.34.3"}, LastAdmitted: "v1.34.3", MachinePool: machinePool}
	// A v1beta1 KubeadmControlPlane mid-upgrade: status.version is the oldest version it runs.
	controlPlane := &controlplanev1beta1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-1", Namespace: "default"},
		Spec:       controlplanev1beta1.KubeadmControlPlaneSpec{Version: "v1.35.1"},
		Status:     controlplanev1beta1.KubeadmControlPlaneStatus{Initialized: true, Version: ptr.To("v1.34.3")},
	}

	decision, err := Gate(pool, controlPlane)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(decision.Verdict, decision.Reason, decision.Admits("v1.34.3"))

	controlPlane.Status.Version = ptr.To("v1.35.1")
	decision, _ = Gate(pool, controlPlane)
	fmt.Println(decision.Verdict, decision.Reason)
	// Output:
	// Wait ControlPlaneOlder true
	// Proceed Admitted
}
