package skew_test

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capdmp/capdmp/pkg/skew"
)

// launchTemplatePool stands for what an AWS-like provider keeps for a pool: the Kubernetes version
// its current launch template boots, and the versions its instances run.
type launchTemplatePool struct {
	machinePoolVersion string // MachinePool spec.template.spec.version
	launchTemplate     string // version of the image in the launch template in use
	instances          []string
}

// reconcileLaunchTemplate gates a launch template update on the control plane's observed versions.
// amiVersion is the version of the image the provider's AMI lookup found for the MachinePool.
func reconcileLaunchTemplate(pool *launchTemplatePool, controlPlaneObject *unstructured.Unstructured, amiVersion string) {
	controlPlane, err := skew.ReadControlPlane(controlPlaneObject)
	if err != nil {
		fmt.Println("Cannot read the control plane:", err)
		return
	}
	decision := skew.Decide(skew.Input{
		ControlPlane:       controlPlane,
		TargetVersion:      amiVersion,
		MachinePoolVersion: pool.machinePoolVersion,
		RunningVersions:    pool.instances,
		// The launch template in use boots the version the pool last admitted.
		LastAdmittedVersion: pool.launchTemplate,
	})
	// The provider would now set decision.Condition("VersionSkewAdmitted") on its pool.

	if decision.Verdict == skew.Wait {
		// No new launch template version and no instance refresh to amiVersion. Scale-down,
		// deletion and replacements at an admitted version go on with the current template.
		fmt.Printf("Keeping launch template at %s: %s\n", pool.launchTemplate, decision.Reason)
		fmt.Println(decision.Message)
		fmt.Printf("Replacing unhealthy instances at %s allowed: %v\n", pool.launchTemplate, decision.Admits(pool.launchTemplate))
		return
	}
	fmt.Printf("Updating launch template to %s and starting an instance refresh\n", decision.TargetVersion)
	pool.launchTemplate = decision.TargetVersion
}

// controlPlaneAt returns a control plane object as the provider reads it from the Cluster's
// spec.controlPlaneRef, here a KubeadmControlPlane; any kind honouring the contract works.
func controlPlaneAt(specVersion string, versions ...string) *unstructured.Unstructured {
	statusVersions := []interface{}{}
	for _, v := range versions {
		statusVersions = append(statusVersions, map[string]interface{}{"version": v, "replicas": int64(1)})
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
		"kind":       "KubeadmControlPlane",
		"metadata":   map[string]interface{}{"name": "cluster-1", "namespace": "default"},
		"spec":       map[string]interface{}{"version": specVersion},
		"status": map[string]interface{}{
			"initialization": map[string]interface{}{"controlPlaneInitialized": true},
			"versions":       statusVersions,
		},
	}}
}

// A provider gates a launch template update on what the control plane runs, not on what it was
// asked to run: the user bumped both the control plane and the MachinePool to v1.34.1 at once.
func Example_launchTemplate() {
	pool := &launchTemplatePool{
		machinePoolVersion: "v1.34.1",
		launchTemplate:     "v1.33.4",
		instances:          []string{"v1.33.4", "v1.33.4"},
	}

	// Mid-upgrade: one control plane machine already runs v1.34.1, two still run v1.33.4.
	reconcileLaunchTemplate(pool, controlPlaneAt("v1.34.1", "v1.33.4", "v1.34.1"), "v1.34.1")

	// The control plane finished; the watch on it brings the pool back at once.
	reconcileLaunchTemplate(pool, controlPlaneAt("v1.34.1", "v1.34.1"), "v1.34.1")

	// Output:
	// Keeping launch template at v1.33.4: ControlPlaneOlder
	// Version v1.34.1 is newer than the oldest control plane version v1.33.4; waiting for the control plane upgrade to finish; new instances may still be created at v1.33.4
	// Replacing unhealthy instances at v1.33.4 allowed: true
	// Updating launch template to v1.34.1 and starting an instance refresh
}

func ExampleVersionFromImageTag() {
	for _, image := range []string{
		"kindest/node:v1.33.1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"localhost:5000/kindest/node:v1.34.0-rc.1",
		"localhost:5000/kindest/node",
		"registry.example:443/node:1.33.1",
	} {
		version, err := skew.VersionFromImageTag(image)
		if err != nil {
			fmt.Println("Error:", err)
			continue
		}
		fmt.Println(version)
	}
	// Output:
	// v1.33.1
	// v1.34.0-rc.1
	// Error: image "localhost:5000/kindest/node" has no tag: the Kubernetes version is read from the tag
	// Error: tag "1.33.1" of image "registry.example:443/node:1.33.1" is not a Kubernetes version: expected v<major>.<minor>.<patch>, as kindest/node tags are
}

// Before creating an instance at v1.30.14 with bootstrap data rendered for the MachinePool's
// v1.31.2, a controller checks that the instance's kubeadm can read it.
func ExampleKubeadmAPIVersionReadable() {
	rendered, _ := skew.KubeadmAPIVersion("v1.31.2")
	readable, _ := skew.KubeadmAPIVersionReadable("v1.30.14", rendered)
	fmt.Println(rendered, readable)

	rendered, _ = skew.KubeadmAPIVersion("v1.30.14")
	readable, _ = skew.KubeadmAPIVersionReadable("v1.31.2", rendered)
	fmt.Println(rendered, readable)
	// Output:
	// kubeadm.k8s.io/v1beta4 false
	// kubeadm.k8s.io/v1beta3 true
}
