package controllers

import (
	"context"
	"time"

	pkgerrors "github.com/pkg/errors"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
)

// DefaultHostPeriod is how long the engine's machine, read for the pools' capacity, is taken as it
// was: its CPUs and memory change when the machine, or Docker Desktop's VM, is resized. Every pool
// is reconciled at least this often (reconcileSync), so its capacity follows within twice it.
const DefaultHostPeriod = 10 * time.Minute

// defaultKubeletMaxPods is the kubelet's maxPods when nothing sets it.
const defaultKubeletMaxPods = 110

// reconcileCapacity records what the Node of each of the pool's containers reports of its capacity
// and system, for an autoscaler that scales the pool from zero (status.capacity, status.nodeInfo).
// A node container has no resource limits, and its kubelet reports the engine's machine as it
// reads it in /proc and /sys: cpu and memory are the engine's (docker info), read once per
// DefaultHostPeriod for all pools. pods is the kubelet's max-pods as the bootstrap data sets it,
// else the kubelet's default. ephemeral-storage is left out: the engine does not say how large
// the filesystem holding its containers' volumes is, and the manager may not see that filesystem.
// The values do not depend on the pool's replicas, so a pool at zero keeps reporting them.
func (r *DockerMachinePoolReconciler) reconcileCapacity(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	host, err := r.engineHost(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	capacity := corev1.ResourceList{}
	if host.CPUs > 0 {
		capacity[corev1.ResourceCPU] = *resource.NewQuantity(int64(host.CPUs), resource.DecimalSI)
	}
	if host.MemoryBytes > 0 {
		capacity[corev1.ResourceMemory] = *resource.NewQuantity(host.MemoryBytes, resource.BinarySI)
	}
	if pods, ok := s.kubeletPods(ctx); ok {
		capacity[corev1.ResourcePods] = pods
	}
	if len(capacity) == 0 {
		capacity = nil
	}
	s.pool.Status.Capacity = capacity
	s.pool.Status.NodeInfo = infrav1.DockerMachinePoolNodeInfo{
		Architecture:    kubernetesArchitecture(host.Architecture),
		OperatingSystem: host.OSType,
	}
	return ctrl.Result{}, nil
}

// kubeletPods is the pods capacity the kubelet of a container created now reports: the max-pods
// of the bootstrap data read in this reconcile, else the kubelet's default. Without data this
// reconcile could read, the recorded value stands; with data whose max-pods cannot be read, none
// is reported (an autoscaler then takes 110, or the MachinePool's maxPods capacity annotation).
func (s *poolScope) kubeletPods(ctx context.Context) (resource.Quantity, bool) {
	if s.data == nil {
		pods, ok := s.pool.Status.Capacity[corev1.ResourcePods]
		return pods, ok
	}
	maxPods, set, err := bootstrap.KubeletMaxPods(s.data)
	switch {
	case pkgerrors.Is(err, bootstrap.ErrNoJoinConfiguration):
		// Not kubeadm's join: the data says nothing the pool can read of the kubelet's flags.
		ctrl.LoggerFrom(ctx).V(4).Info("Not reporting the pods capacity: the bootstrap data holds no kubeadm JoinConfiguration")
		return resource.Quantity{}, false
	case err != nil:
		ctrl.LoggerFrom(ctx).Info("Not reporting the pods capacity: the bootstrap data's max-pods cannot be read", "error", err.Error())
		return resource.Quantity{}, false
	case !set:
		maxPods = defaultKubeletMaxPods
	}
	return *resource.NewQuantity(int64(maxPods), resource.DecimalSI), true
}

// engineHost returns the engine's machine, read at most once per DefaultHostPeriod.
func (r *DockerMachinePoolReconciler) engineHost(ctx context.Context) (container.Host, error) {
	r.hostMu.Lock()
	defer r.hostMu.Unlock()
	now := r.clock()
	if !r.hostRead.IsZero() && now.Sub(r.hostRead) < DefaultHostPeriod {
		return r.host, nil
	}
	host, err := r.Runtime.Host(ctx)
	if err != nil {
		return container.Host{}, pkgerrors.Wrap(err, "failed to read the engine's machine for the pool's capacity")
	}
	r.host, r.hostRead = host, now
	return host, nil
}

// kubernetesArchitecture names an engine's machine architecture (uname's) as Kubernetes names a
// Node's, the Go architecture its kubelet was built for; empty for one the API does not list.
func kubernetesArchitecture(engine string) infrav1.Architecture {
	switch engine {
	case "x86_64", "amd64":
		return infrav1.ArchitectureAmd64
	case "aarch64", "arm64":
		return infrav1.ArchitectureArm64
	case "s390x":
		return infrav1.ArchitectureS390x
	case "ppc64le":
		return infrav1.ArchitecturePpc64le
	}
	return ""
}
