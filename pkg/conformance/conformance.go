// Package conformance checks that an InfraMachinePool honours the Kubernetes version skew policy
// when a user upgrades the control plane and the MachinePool at once, whatever the provider: it
// drives the upgrade through the Cluster API contract, samples the control plane's versions and
// the pool's instances while it runs, and judges every sample with the rule of pkg/skew.
//
// A provider implements Pool (what its instances run, and how a new version becomes available to
// it) and calls UpgradeBothAtOnce on a cluster whose control plane honours the v1beta2
// control-plane contract (status.versions, or status.version) and whose MachinePool uses its
// InfraMachinePool. The Report lists every moment an instance broke the policy.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/pkg/skew"
)

// Pool is what the kit needs from an InfraMachinePool beyond the Cluster API contract.
type Pool interface {
	// InstanceVersions returns the Kubernetes version of each instance of the pool that exists
	// now, running a kubelet or about to: the version of the image, machine image or template it
	// was made from.
	InstanceVersions(ctx context.Context) ([]string, error)
	// MakeVersionAvailable makes an image (machine image, template, ...) of version available to
	// the pool before the MachinePool asks for it. A provider whose image follows the
	// MachinePool's version by itself does nothing.
	MakeVersionAvailable(ctx context.Context, version string) error
}

// Input configures UpgradeBothAtOnce.
type Input struct {
	// Client reaches the management cluster.
	Client client.Client
	// MachinePool is the MachinePool to upgrade; its Cluster's control plane is upgraded with it.
	MachinePool client.ObjectKey
	// Pool is the provider's side of the MachinePool.
	Pool Pool
	// To is the version both are upgraded to.
	To string
	// PoolFirst writes the MachinePool before the control plane: the order that breaks a pool
	// with no gate. Otherwise the control plane goes first.
	PoolFirst bool
	// Interval between samples; Timeout for the whole upgrade.
	Interval, Timeout time.Duration
}

// Violation is an instance that broke the policy in a sample.
type Violation struct {
	// At is the time since the writes.
	At time.Duration
	// ControlPlane and Instances are the versions the sample read.
	ControlPlane, Instances []string
	// Detail says which rule broke (skew.Violation's words), or which version could not be read.
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%6.1fs control plane %v, instances %v: %s", v.At.Seconds(), v.ControlPlane, v.Instances, v.Detail)
}

// Report is what a run saw.
type Report struct {
	// Samples taken, and how many of them Judged: saw a control plane version and an instance.
	// A run that judged nothing proves nothing, and UpgradeBothAtOnce says so with an error.
	Samples, Judged int
	// Violations in the order seen.
	Violations []Violation
	// Duration from the writes until both ran To, or the run ended.
	Duration time.Duration
}

// UpgradeBothAtOnce writes To to the MachinePool's spec.template.spec.version and to the control
// plane's spec.version back to back (PoolFirst says which first), then samples, every Interval,
// the control plane's versions (read first) and the pool's instances (read after, so that a
// sample errs toward a violation), until the control plane reports only To and the pool has its
// replicas, all at To and ready. The error says why a run ended early; the report is valid up to
// then.
func UpgradeBothAtOnce(ctx context.Context, in Input) (Report, error) {
	mp := &clusterv1.MachinePool{}
	if err := in.Client.Get(ctx, in.MachinePool, mp); err != nil {
		return Report{}, fmt.Errorf("reading MachinePool %s: %w", in.MachinePool, err)
	}
	cluster := &clusterv1.Cluster{}
	if err := in.Client.Get(ctx, client.ObjectKey{Namespace: mp.Namespace, Name: mp.Spec.ClusterName}, cluster); err != nil {
		return Report{}, fmt.Errorf("reading Cluster %s: %w", mp.Spec.ClusterName, err)
	}
	if !cluster.Spec.ControlPlaneRef.IsDefined() {
		return Report{}, fmt.Errorf("cluster %s has no control plane", cluster.Name)
	}
	controlPlane, err := external.GetObjectFromContractVersionedRef(ctx, in.Client, cluster.Spec.ControlPlaneRef, cluster.Namespace)
	if err != nil {
		return Report{}, fmt.Errorf("reading control plane %s %s: %w", cluster.Spec.ControlPlaneRef.Kind, cluster.Spec.ControlPlaneRef.Name, err)
	}
	if err := in.Pool.MakeVersionAvailable(ctx, in.To); err != nil {
		return Report{}, fmt.Errorf("making %s available to the pool: %w", in.To, err)
	}
	writes := []func() error{
		func() error { return setPoolVersion(ctx, in.Client, in.MachinePool, in.To) },
		func() error { return setControlPlaneVersion(ctx, in.Client, controlPlane, in.To) },
	}
	if !in.PoolFirst {
		slices.Reverse(writes)
	}
	for _, write := range writes {
		if err := write(); err != nil {
			return Report{}, err
		}
	}

	start := time.Now()
	report := Report{}
	ctx, cancel := context.WithTimeout(ctx, in.Timeout)
	defer cancel()
	ticker := time.NewTicker(in.Interval)
	defer ticker.Stop()
	for {
		done, err := report.sample(ctx, in, controlPlane, start)
		report.Duration = time.Since(start)
		if err == nil && done {
			if report.Judged == 0 {
				return report, errors.New("no sample saw both a control plane version and an instance: the run proves nothing")
			}
			return report, nil
		}
		select {
		case <-ctx.Done():
			return report, fmt.Errorf("the upgrade to %s did not complete in %s (last: %v)", in.To, in.Timeout, err)
		case <-ticker.C:
		}
	}
}

// sample reads and judges one moment; it tells whether the upgrade is complete.
func (r *Report) sample(ctx context.Context, in Input, controlPlane *unstructured.Unstructured, start time.Time) (bool, error) {
	cp := controlPlane.DeepCopy()
	if err := in.Client.Get(ctx, client.ObjectKeyFromObject(cp), cp); err != nil {
		return false, err
	}
	status, err := skew.ReadControlPlane(cp)
	if err != nil {
		return false, err
	}
	instances, err := in.Pool.InstanceVersions(ctx)
	if err != nil {
		return false, err
	}
	mp := &clusterv1.MachinePool{}
	if err := in.Client.Get(ctx, in.MachinePool, mp); err != nil {
		return false, err
	}
	r.Samples++
	if len(status.Versions) > 0 && len(instances) > 0 {
		r.Judged++
	}
	violations, err := skew.Violations(instances, status.Versions)
	at := time.Since(start)
	if err != nil {
		// A version that cannot be read cannot be judged safe.
		r.Violations = append(r.Violations, Violation{At: at, ControlPlane: status.Versions, Instances: instances, Detail: err.Error()})
	}
	for _, v := range violations {
		r.Violations = append(r.Violations, Violation{At: at, ControlPlane: status.Versions, Instances: instances, Detail: "instance's " + v.String()})
	}
	upgraded := len(status.Versions) > 0
	for _, v := range status.Versions {
		upgraded = upgraded && v == in.To
	}
	for _, v := range instances {
		upgraded = upgraded && v == in.To
	}
	replicas := ptr.Deref(mp.Spec.Replicas, 1)
	return upgraded && len(instances) == int(replicas) && ptr.Deref(mp.Status.ReadyReplicas, 0) == replicas, nil
}

func setPoolVersion(ctx context.Context, c client.Client, key client.ObjectKey, version string) error {
	mp := &clusterv1.MachinePool{}
	if err := c.Get(ctx, key, mp); err != nil {
		return err
	}
	patch := client.MergeFrom(mp.DeepCopy())
	mp.Spec.Template.Spec.Version = version
	if err := c.Patch(ctx, mp, patch); err != nil {
		return fmt.Errorf("writing version %s to MachinePool %s: %w", version, key, err)
	}
	return nil
}

func setControlPlaneVersion(ctx context.Context, c client.Client, controlPlane *unstructured.Unstructured, version string) error {
	cp := controlPlane.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(cp), cp); err != nil {
		return err
	}
	patch := client.MergeFrom(cp.DeepCopy())
	if err := unstructured.SetNestedField(cp.Object, version, "spec", "version"); err != nil {
		return err
	}
	if err := c.Patch(ctx, cp, patch); err != nil {
		return fmt.Errorf("writing version %s to control plane %s: %w", version, cp.GetName(), err)
	}
	return nil
}
