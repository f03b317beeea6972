// Package conformance checks that an InfraMachinePool honours the Kubernetes version skew policy
// when a user upgrades the control plane and the MachinePool at once, whatever the provider. It
// holds the scenario table every CAPDMP test tier runs (Scenarios), the one monitor that judges
// them with the rule of pkg/skew, and the contract-level steps they are made of.
//
// A provider implements Cluster for a cluster it made in a scenario's Shape (the management
// client, the MachinePool, and what its instances run) and calls Scenario.Run. The scenarios
// drive the control plane and the MachinePool through the Cluster API contract (spec.version,
// status.versions); what only some providers can do (say why the pool waits, write an image
// apart from the version, restart the provider, record the bootstrap data each instance used)
// are optional interfaces, and a scenario that needs one a Cluster lacks is not run on it
// (Scenario.RunnableOn). Report lists every moment an instance broke the policy.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/pkg/skew"
)

// Instance is one instance of a pool (a container, a VM, a scale-set instance).
type Instance struct {
	// Name identifies the instance; for a MachinePool Machine's instance, its Machine's name
	// where the provider names them alike.
	Name string
	// Version is the Kubernetes version of the kubelet it runs or is about to run: the version of
	// the image, machine image or template it was made from.
	Version string
}

// Pool is what the kit needs from an InfraMachinePool beyond the Cluster API contract.
type Pool interface {
	// Instances lists the instances of the pool that exist now, running a kubelet or about to.
	Instances(ctx context.Context) ([]Instance, error)
	// MakeVersionAvailable makes an image (machine image, template, ...) of version available to
	// the pool before the MachinePool asks for it. A provider whose image follows the
	// MachinePool's version by itself does nothing.
	MakeVersionAvailable(ctx context.Context, version string) error
}

// Cluster is one workload cluster a scenario runs on, made by the caller in the scenario's Shape.
type Cluster interface {
	Pool
	// Client reaches the management cluster.
	Client() client.Client
	// MachinePool names the pool's MachinePool; its Cluster's control plane is upgraded with it.
	MachinePool() client.ObjectKey
}

// Observer is a Cluster that samples its versions better than the contract does, for instance
// from the kube-apiservers themselves; without it the monitor reads ContractSource.
type Observer interface {
	Source() Source
}

// Gated is a Cluster whose pool says why it waits: reason is "" when it does not wait.
type Gated interface {
	Gate(ctx context.Context) (reason, message string, err error)
}

// ImageWriter is a Cluster whose pool's image is written apart from the MachinePool's version
// (CAPDMP's customImage, a launch template): a user's apply writes it too.
type ImageWriter interface {
	SetImage(ctx context.Context, version string) error
}

// Restarter is a Cluster whose provider's controllers can be restarted mid-scenario.
type Restarter interface {
	RestartProvider(ctx context.Context) error
}

// BootstrapRecorder is a Cluster whose pool records the bootstrap data it used: the data current
// when the pool began to wait, and the data each instance of version joined with (by instance).
type BootstrapRecorder interface {
	BootstrapDataAtPause(ctx context.Context) (string, error)
	BootstrapData(ctx context.Context, version string) (map[string]string, error)
}

// ControlPlaneWaiter is a Cluster that knows better than the contract when its control plane
// runs a version on every machine, ready (say, every machine up to date).
type ControlPlaneWaiter interface {
	ControlPlaneAt(ctx context.Context, version string, replicas int32) (done bool, progress string, err error)
}

// controlPlane reads the Cluster's control plane through its contract-versioned reference.
func controlPlane(ctx context.Context, c Cluster) (*unstructured.Unstructured, error) {
	mp := &clusterv1.MachinePool{}
	if err := c.Client().Get(ctx, c.MachinePool(), mp); err != nil {
		return nil, fmt.Errorf("reading MachinePool %s: %w", c.MachinePool(), err)
	}
	cluster := &clusterv1.Cluster{}
	if err := c.Client().Get(ctx, client.ObjectKey{Namespace: mp.Namespace, Name: mp.Spec.ClusterName}, cluster); err != nil {
		return nil, fmt.Errorf("reading Cluster %s: %w", mp.Spec.ClusterName, err)
	}
	if !cluster.Spec.ControlPlaneRef.IsDefined() {
		return nil, fmt.Errorf("cluster %s has no control plane", cluster.Name)
	}
	cp, err := external.GetObjectFromContractVersionedRef(ctx, c.Client(), cluster.Spec.ControlPlaneRef, cluster.Namespace)
	if err != nil {
		return nil, fmt.Errorf("reading control plane %s %s: %w", cluster.Spec.ControlPlaneRef.Kind, cluster.Spec.ControlPlaneRef.Name, err)
	}
	return cp, nil
}

// SetControlPlaneVersion writes the control plane's spec.version, as a user's apply does.
func SetControlPlaneVersion(ctx context.Context, c Cluster, version string) error {
	cp, err := controlPlane(ctx, c)
	if err != nil {
		return err
	}
	patch := client.MergeFrom(cp.DeepCopy())
	if err := unstructured.SetNestedField(cp.Object, version, "spec", "version"); err != nil {
		return err
	}
	if err := c.Client().Patch(ctx, cp, patch); err != nil {
		return fmt.Errorf("writing version %s to control plane %s: %w", version, cp.GetName(), err)
	}
	return nil
}

// SetMachinePool changes the MachinePool as a user's apply does.
func SetMachinePool(ctx context.Context, c Cluster, what string, mutate func(*clusterv1.MachinePool)) error {
	mp := &clusterv1.MachinePool{}
	if err := c.Client().Get(ctx, c.MachinePool(), mp); err != nil {
		return fmt.Errorf("reading MachinePool %s: %w", c.MachinePool(), err)
	}
	patch := client.MergeFrom(mp.DeepCopy())
	mutate(mp)
	if err := c.Client().Patch(ctx, mp, patch); err != nil {
		return fmt.Errorf("writing %s to MachinePool %s: %w", what, c.MachinePool(), err)
	}
	return nil
}

// AddBootstrapFile adds a file to the MachinePool's bootstrap config, as a user who edits the
// pool's bootstrap configuration: its spec.files, so only CABPK's KubeadmConfig is supported.
func AddBootstrapFile(ctx context.Context, c Cluster, path, content string) error {
	mp := &clusterv1.MachinePool{}
	if err := c.Client().Get(ctx, c.MachinePool(), mp); err != nil {
		return fmt.Errorf("reading MachinePool %s: %w", c.MachinePool(), err)
	}
	ref := mp.Spec.Template.Spec.Bootstrap.ConfigRef
	if ref.Kind != "KubeadmConfig" || ref.APIGroup != kubeadmBootstrapGroup {
		return fmt.Errorf("MachinePool %s's bootstrap config is a %s of %s; only a KubeadmConfig can be edited", c.MachinePool(), ref.Kind, ref.APIGroup)
	}
	config := &unstructured.Unstructured{}
	config.SetGroupVersionKind(schema.GroupVersionKind{Group: ref.APIGroup, Version: "v1beta2", Kind: ref.Kind})
	key := client.ObjectKey{Namespace: c.MachinePool().Namespace, Name: ref.Name}
	if err := c.Client().Get(ctx, key, config); err != nil {
		return fmt.Errorf("reading KubeadmConfig %s: %w", key, err)
	}
	patch := client.MergeFrom(config.DeepCopy())
	files, _, err := unstructured.NestedSlice(config.Object, "spec", "files")
	if err != nil {
		return fmt.Errorf("reading the files of KubeadmConfig %s: %w", key, err)
	}
	files = append(files, map[string]any{"path": path, "content": content})
	if err := unstructured.SetNestedSlice(config.Object, files, "spec", "files"); err != nil {
		return err
	}
	if err := c.Client().Patch(ctx, config, patch); err != nil {
		return fmt.Errorf("adding file %s to KubeadmConfig %s: %w", path, key, err)
	}
	return nil
}

// kubeadmBootstrapGroup is the API group of CABPK's KubeadmConfig.
const kubeadmBootstrapGroup = "bootstrap.cluster.x-k8s.io"

// ControlPlaneAt tells, through the contract, whether the control plane reports only version.
// A Cluster that is a ControlPlaneWaiter answers for itself.
func ControlPlaneAt(ctx context.Context, c Cluster, version string, replicas int32) (bool, string, error) {
	if w, ok := c.(ControlPlaneWaiter); ok {
		return w.ControlPlaneAt(ctx, version, replicas)
	}
	cp, err := controlPlane(ctx, c)
	if err != nil {
		return false, "", err
	}
	status, err := skew.ReadControlPlane(cp)
	if err != nil {
		return false, "", err
	}
	done := status.Initialized && len(status.Versions) > 0
	for _, v := range status.Versions {
		done = done && v == version
	}
	return done, fmt.Sprintf("control plane initialized=%t versions=%v", status.Initialized, status.Versions), nil
}

// PoolAt tells whether the MachinePool has replicas instances, all of version, each ready with a
// Node.
func PoolAt(ctx context.Context, c Cluster, version string, replicas int32) (bool, string, error) {
	mp := &clusterv1.MachinePool{}
	if err := c.Client().Get(ctx, c.MachinePool(), mp); err != nil {
		return false, "", err
	}
	instances, err := c.Instances(ctx)
	if err != nil {
		return false, "", err
	}
	ready := ptr.Deref(mp.Status.ReadyReplicas, 0)
	done := ready == replicas && len(instances) == int(replicas) && len(mp.Status.NodeRefs) == int(replicas)
	versions := make([]string, 0, len(instances))
	for _, i := range instances {
		versions = append(versions, i.Version)
		done = done && i.Version == version
	}
	progress := fmt.Sprintf("MachinePool ready=%d nodes=%d instances=%v", ready, len(mp.Status.NodeRefs), versions)
	if g, ok := c.(Gated); ok {
		if reason, _, err := g.Gate(ctx); err == nil && reason != "" {
			progress += " waiting: " + reason
		}
	}
	return done, progress, nil
}

// pollInterval is how often WaitFor asks; the package's tests shorten it.
var pollInterval = time.Second

// WaitFor polls cond every second until it holds, timeout passes or ctx ends; progress, when not
// nil, gets cond's description each time it changes. An error of cond other than NotFound ends
// nothing: it is shown as the progress, and the wait goes on.
func WaitFor(ctx context.Context, timeout time.Duration, progress func(string), cond func(context.Context) (bool, string, error)) error {
	// last is what the condition last reported; lastState is the last description that was not an
	// error, so that a read cut short by the deadline does not hide where the wait stood.
	last, lastState := "", ""
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, desc, err := cond(ctx)
		if err != nil && !apierrors.IsNotFound(err) {
			desc = "error: " + err.Error()
		} else {
			lastState = desc
		}
		if desc != last && progress != nil {
			progress(desc)
		}
		last = desc
		return ok, nil
	})
	if err == nil {
		return nil
	}
	where := last
	if lastState != "" && last != lastState {
		where = fmt.Sprintf("%s (then %s)", lastState, last)
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("interrupted while waiting: %s", where)
	}
	return fmt.Errorf("after %s: %s", timeout, where)
}
