// Package clusterops reads and writes a workload cluster's Cluster API objects on the management
// cluster as a user's apply does, through the contract only, and waits for what they report. The
// conformance kit's steps are made of it, and so are CAPDMP's own tests beside the kit.
package clusterops

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

// Cluster is a MachinePool and the management cluster that holds it; its Cluster's control plane
// is upgraded with it.
type Cluster interface {
	Client() client.Client
	MachinePool() client.ObjectKey
}

// gated is a Cluster whose pool says why it waits (conformance.Gated).
type gated interface {
	Gate(ctx context.Context) (reason, message string, err error)
}

// InstanceVersions lists the versions of the pool's instances as its provider's API shows them.
type InstanceVersions func(ctx context.Context) ([]string, error)

// ControlPlane reads the Cluster's control plane through its contract-versioned reference.
func ControlPlane(ctx context.Context, c Cluster) (*unstructured.Unstructured, error) {
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

// ControlPlaneReader reads a Cluster's control plane as a gate reads it, resolving the control
// plane through its Cluster once: a read then costs one request, which a monitor sampling many
// times a second needs.
type ControlPlaneReader struct {
	Cluster      Cluster
	controlPlane *unstructured.Unstructured
}

// Read reads the control plane's status.
func (r *ControlPlaneReader) Read(ctx context.Context) (skew.ControlPlane, error) {
	if r.controlPlane == nil {
		cp, err := ControlPlane(ctx, r.Cluster)
		if err != nil {
			return skew.ControlPlane{}, err
		}
		r.controlPlane = cp
	}
	cp := r.controlPlane.DeepCopy()
	if err := r.Cluster.Client().Get(ctx, client.ObjectKeyFromObject(cp), cp); err != nil {
		return skew.ControlPlane{}, fmt.Errorf("reading control plane %s: %w", cp.GetName(), err)
	}
	return skew.ReadControlPlane(cp)
}

// SetControlPlaneVersion writes the control plane's spec.version.
func SetControlPlaneVersion(ctx context.Context, c Cluster, version string) error {
	cp, err := ControlPlane(ctx, c)
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

// SetMachinePool changes the MachinePool; what names the change for an error.
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

// ControlPlaneAt tells, through the contract, whether the control plane is initialized and its
// status.versions says only version.
func ControlPlaneAt(ctx context.Context, c Cluster, version string) (bool, string, error) {
	cp, err := ControlPlane(ctx, c)
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
// Node; instances reads their versions.
func PoolAt(ctx context.Context, c Cluster, instances InstanceVersions, version string, replicas int32) (bool, string, error) {
	mp := &clusterv1.MachinePool{}
	if err := c.Client().Get(ctx, c.MachinePool(), mp); err != nil {
		return false, "", err
	}
	versions, err := instances(ctx)
	if err != nil {
		return false, "", err
	}
	ready := ptr.Deref(mp.Status.ReadyReplicas, 0)
	done := ready == replicas && len(versions) == int(replicas) && len(mp.Status.NodeRefs) == int(replicas)
	for _, v := range versions {
		done = done && v == version
	}
	progress := fmt.Sprintf("MachinePool ready=%d nodes=%d instances=%v", ready, len(mp.Status.NodeRefs), versions)
	if g, ok := c.(gated); ok {
		if reason, _, err := g.Gate(ctx); err == nil && reason != "" {
			progress += " waiting: " + reason
		}
	}
	return done, progress, nil
}

// PollInterval is how often WaitFor asks; tests shorten it.
var PollInterval = time.Second

// WaitFor polls cond every second until it holds, timeout passes or ctx ends; progress, when not
// nil, gets cond's description each time it changes. An error of cond other than NotFound ends
// nothing: it is shown as the progress, and the wait goes on.
func WaitFor(ctx context.Context, timeout time.Duration, progress func(string), cond func(context.Context) (bool, string, error)) error {
	// last is what the condition last reported; lastState is the last description that was not an
	// error, so that a read cut short by the deadline does not hide where the wait stood.
	last, lastState := "", ""
	err := wait.PollUntilContextTimeout(ctx, PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
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
