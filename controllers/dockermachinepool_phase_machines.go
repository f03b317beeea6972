package controllers

import (
	"context"
	"fmt"

	pkgerrors "github.com/pkg/errors"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
)

// reconcileMachinePoolMachines keeps one DockerMachinePoolMachine per container (MachinePool
// Machines): it creates the missing ones and removes those whose container is gone, through their
// Machine when there is one so that Cluster API removes the Node too.
func (r *DockerMachinePoolReconciler) reconcileMachinePoolMachines(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var errs []error
	for _, i := range s.instances {
		if i.machine != nil || i.removalRequested {
			continue
		}
		m := newMachinePoolMachine(s, i.container.Name, i.container.Labels)
		if err := r.Client.Create(ctx, m); err != nil {
			// One that exists already is the pool's own, which the cache does not show yet, or
			// another's of the same name: either way not this object, and the next inventory
			// finds it if it is the pool's.
			if !apierrors.IsAlreadyExists(err) {
				errs = append(errs, pkgerrors.Wrapf(err, "failed to create DockerMachinePoolMachine %s", klog.KObj(m)))
			}
			continue
		}
		i.machine = m
	}

	for _, m := range s.orphanMachines {
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		log.Info("Container is gone, removing its machine", "DockerMachinePoolMachine", klog.KObj(m))
		r.eventf(s.pool, corev1.EventTypeWarning, "ContainerGone", "Container %s is gone; removing its machine so that it is replaced", m.Name)
		if err := r.deleteMachine(ctx, s, m.Name, m); err != nil {
			errs = append(errs, err)
		}
	}
	return ctrl.Result{}, kerrors.NewAggregate(errs)
}

// reconcileUnstartedContainers removes the pool's containers that the engine made and never
// started: a creation cut short, by a manager stopped between creating a container and starting
// it, or by a failed start whose clean-up failed too. Nothing starts such a container (a restart
// policy applies only to one that ran), so it would count as a replica forever. Once it is gone,
// scale-up replaces it under the gate's decision of that moment.
func (r *DockerMachinePoolReconciler) reconcileUnstartedContainers(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var errs []error
	for _, i := range s.active() {
		if !i.container.NeverStarted {
			continue
		}
		log.Info("Removing a container the engine never started", "container", i.name(), "version", i.version())
		r.eventf(s.pool, corev1.EventTypeWarning, "ContainerNeverStarted", "Container %s was created and never started; removing it so that it is replaced", i.name())
		if err := r.deleteMachine(ctx, s, i.name(), i.machine); err != nil {
			errs = append(errs, err)
		}
	}
	return ctrl.Result{}, kerrors.NewAggregate(errs)
}

func newMachinePoolMachine(s *poolScope, name string, containerLabels map[string]string) *infrav1.DockerMachinePoolMachine {
	labels := map[string]string{
		clusterv1.ClusterNameLabel:     s.cluster.Name,
		clusterv1.MachinePoolNameLabel: format.MustFormatValue(s.machinePool.Name),
		infrav1.KubernetesVersionLabel: containerLabels[infrav1.KubernetesVersionLabel],
		infrav1.BootstrapDataHashLabel: bootstrap.HashLabelValue(containerLabels[infrav1.BootstrapDataHashLabel]),
	}
	if c := containerLabels[infrav1.BootstrapConfigurationLabel]; c != "" {
		labels[infrav1.BootstrapConfigurationLabel] = c
	}
	// A manager run with --watch-filter reconciles only objects with the pool's watch label.
	if v, ok := s.pool.Labels[clusterv1.WatchLabel]; ok {
		labels[clusterv1.WatchLabel] = v
	}
	return &infrav1.DockerMachinePoolMachine{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: s.pool.Namespace,
			Labels:    labels,
			// Not a controller reference: the Machine that Cluster API makes for it becomes its
			// controller; the pool's reference keeps it from being orphaned until then.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: infrav1.GroupVersion.String(),
				Kind:       "DockerMachinePool",
				Name:       s.pool.Name,
				UID:        s.pool.UID,
			}},
			Finalizers: []string{infrav1.MachinePoolMachineFinalizer},
		},
		Spec: infrav1.DockerMachinePoolMachineSpec{ProviderID: providerID(name)},
	}
}

// providerID is the provider ID of a container, as CAPD writes it for kind nodes.
func providerID(containerName string) string {
	return fmt.Sprintf("docker:////%s", containerName)
}

// deleteMachine removes one container of the pool the way Cluster API expects for MachinePool
// Machines: by deleting its Machine (drained first), or its DockerMachinePoolMachine when no
// Machine exists yet, or the container itself when neither exists.
func (r *DockerMachinePoolReconciler) deleteMachine(ctx context.Context, s *poolScope, name string, machine *infrav1.DockerMachinePoolMachine) error {
	var owner *clusterv1.Machine
	for _, i := range s.instances {
		if i.name() == name {
			owner, machine = i.owner, i.machine
			i.removalRequested = true
		}
	}
	if owner == nil && machine != nil {
		owner = &clusterv1.Machine{}
		key := client.ObjectKey{Namespace: s.pool.Namespace, Name: name}
		if err := r.Client.Get(ctx, key, owner); err != nil {
			if !apierrors.IsNotFound(err) {
				return pkgerrors.Wrapf(err, "failed to get Machine %s", key)
			}
			owner = nil
		} else if owner.Spec.InfrastructureRef.Name != name || owner.Spec.InfrastructureRef.Kind != "DockerMachinePoolMachine" || !s.machineOfPool(owner) {
			owner = nil
		}
	}
	switch {
	case owner != nil:
		if err := r.Client.Delete(ctx, owner); err != nil && !apierrors.IsNotFound(err) {
			return pkgerrors.Wrapf(err, "failed to delete Machine %s", klog.KObj(owner))
		}
	case machine != nil:
		if err := r.Client.Delete(ctx, machine); err != nil && !apierrors.IsNotFound(err) {
			return pkgerrors.Wrapf(err, "failed to delete DockerMachinePoolMachine %s", klog.KObj(machine))
		}
	default:
		if err := r.Runtime.Delete(ctx, name); err != nil {
			return pkgerrors.Wrapf(err, "failed to delete container %s", name)
		}
	}
	return nil
}
