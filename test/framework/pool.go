package framework

import (
	"context"
	"fmt"

	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/conformance"
	"github.com/capdmp/capdmp/pkg/skew"
)

// CAPDMPPool is a CAPDMP pool as pkg/conformance's scenarios drive it (conformance.Cluster,
// Gated, ImageWriter, BootstrapRecorder): its containers on the engine, its DockerMachinePool's
// gate and the bootstrap data its machines joined with. Both scenario tiers use it.
type CAPDMPPool struct {
	Management client.Client
	Engine     *container.Docker
	// Key names the MachinePool, its KubeadmConfig and its DockerMachinePool.
	Key client.ObjectKey
	// ClusterName is the Cluster's name, on the pool's containers' labels.
	ClusterName string
}

var (
	_ conformance.Cluster           = &CAPDMPPool{}
	_ conformance.Gated             = &CAPDMPPool{}
	_ conformance.ImageWriter       = &CAPDMPPool{}
	_ conformance.BootstrapRecorder = &CAPDMPPool{}
)

// Client implements conformance.Cluster.
func (p *CAPDMPPool) Client() client.Client { return p.Management }

// MachinePool implements conformance.Cluster.
func (p *CAPDMPPool) MachinePool() client.ObjectKey { return p.Key }

// Instances lists the pool's containers, each with the version of its label (the label's own
// value when it is no version: the monitor counts it as a violation).
func (p *CAPDMPPool) Instances(ctx context.Context) ([]conformance.Instance, error) {
	containers, err := p.Engine.List(ctx, map[string]string{infrav1.ClusterNameLabel: p.ClusterName, infrav1.PoolNameLabel: p.Key.Name})
	if err != nil {
		return nil, fmt.Errorf("listing the pool's containers: %w", err)
	}
	instances := make([]conformance.Instance, 0, len(containers))
	for _, c := range containers {
		instances = append(instances, conformance.Instance{Name: c.Name, Version: versionOfLabel(c.Labels[infrav1.KubernetesVersionLabel])})
	}
	return instances, nil
}

// versionOfLabel is the version a container's label records, or the label itself when it is none.
func versionOfLabel(label string) string {
	if v, err := skew.VersionFromLabelValue(label); err == nil {
		return v
	}
	return label
}

// MakeVersionAvailable checks that the node image of version is on the engine: images are built
// here, never pulled.
func (p *CAPDMPPool) MakeVersionAvailable(ctx context.Context, version string) error {
	image := NodeImage(version)
	ok, err := p.Engine.ImageExists(ctx, image)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s is not on the engine", image)
	}
	return nil
}

// NodeImage is the node image of version, kind's name for it.
func NodeImage(version string) string { return "kindest/node:" + version }

func (p *CAPDMPPool) pool(ctx context.Context) (*infrav1.DockerMachinePool, error) {
	pool := &infrav1.DockerMachinePool{}
	return pool, p.Management.Get(ctx, p.Key, pool)
}

// Gate is the DockerMachinePool's waiting reason and its VersionSkew condition's message.
func (p *CAPDMPPool) Gate(ctx context.Context) (string, string, error) {
	pool, err := p.pool(ctx)
	if err != nil {
		return "", "", err
	}
	return pool.Status.VersionGate.WaitingReason, conditions.GetMessage(pool, infrav1.VersionSkewCondition), nil
}

// SetImage writes the DockerMachinePool's spec.template.customImage.
func (p *CAPDMPPool) SetImage(ctx context.Context, version string) error {
	pool, err := p.pool(ctx)
	if err != nil {
		return err
	}
	patch := client.MergeFrom(pool.DeepCopy())
	pool.Spec.Template.CustomImage = NodeImage(version)
	return p.Management.Patch(ctx, pool, patch)
}

// BootstrapDataAtPause is the hash of the bootstrap data current when the pool began to wait.
func (p *CAPDMPPool) BootstrapDataAtPause(ctx context.Context) (string, error) {
	pool, err := p.pool(ctx)
	if err != nil {
		return "", err
	}
	return pool.Status.VersionGate.BootstrapDataHashAtPause, nil
}

// BootstrapData is the bootstrap data's hash (its label's prefix) each machine of version joined
// with.
func (p *CAPDMPPool) BootstrapData(ctx context.Context, version string) (map[string]string, error) {
	label, err := skew.VersionLabelValue(version)
	if err != nil {
		return nil, err
	}
	machines := &infrav1.DockerMachinePoolMachineList{}
	if err := p.Management.List(ctx, machines, client.InNamespace(p.Key.Namespace),
		client.MatchingLabels{infrav1.KubernetesVersionLabel: label, clusterv1.MachinePoolNameLabel: p.Key.Name}); err != nil {
		return nil, err
	}
	data := map[string]string{}
	for _, m := range machines.Items {
		data[m.Name] = m.Labels[infrav1.BootstrapDataHashLabel]
	}
	return data, nil
}

// CurrentBootstrapData is the MachinePool's bootstrap data as its bootstrap provider rendered it
// last; nil while there is none yet.
func (p *CAPDMPPool) CurrentBootstrapData(ctx context.Context) (*bootstrap.Data, error) {
	mp := &clusterv1.MachinePool{}
	if err := p.Management.Get(ctx, p.Key, mp); err != nil {
		return nil, err
	}
	name := ptr.Deref(mp.Spec.Template.Spec.Bootstrap.DataSecretName, "")
	if name == "" {
		return nil, nil
	}
	return bootstrap.Read(ctx, p.Management, p.Key.Namespace, name)
}
