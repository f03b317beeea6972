package controllers

import (
	"context"
	"slices"
	"sort"

	pkgerrors "github.com/pkg/errors"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
)

// reconcileInventory lists the pool's containers (one engine call) and the objects that represent
// them (from the cache). Containers are matched on the pool's identity (carriesPool), never on
// names alone, so that a pool never touches a container it did not create; DockerMachinePoolMachines on their owner reference
// to the pool, and Machines on the DockerMachinePoolMachine they reference.
func (r *DockerMachinePoolReconciler) reconcileInventory(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	listed, err := r.Runtime.List(ctx, map[string]string{infrav1.PoolUIDLabel: poolUID(s.pool)})
	if err != nil {
		return ctrl.Result{}, pkgerrors.Wrap(err, "failed to list containers")
	}
	containers := slices.DeleteFunc(listed, func(c container.Container) bool { return !carriesPool(c, s.pool) })

	// The cache's objects, not copies of them: a pool of thousands reads them all on every
	// reconcile and changes few. Each item is a copy of the cached struct whose maps and slices
	// are the cache's: a phase that changes one in place works on a DeepCopy.
	selector := s.inventorySelector()
	machineList := &infrav1.DockerMachinePoolMachineList{}
	if err := r.Client.List(ctx, machineList, client.InNamespace(s.pool.Namespace), selector, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, pkgerrors.Wrap(err, "failed to list DockerMachinePoolMachines")
	}
	ownerList := &clusterv1.MachineList{}
	if err := r.Client.List(ctx, ownerList, client.InNamespace(s.pool.Namespace), selector, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, pkgerrors.Wrap(err, "failed to list Machines")
	}

	machines := map[string]*infrav1.DockerMachinePoolMachine{}
	for i := range machineList.Items {
		m := &machineList.Items[i]
		if ownedByPool(m, s.pool) {
			machines[m.Name] = m
		}
	}
	owners := map[string]*clusterv1.Machine{}
	for i := range ownerList.Items {
		m := &ownerList.Items[i]
		if m.Spec.InfrastructureRef.Kind == "DockerMachinePoolMachine" && m.Spec.InfrastructureRef.APIGroup == infrav1.GroupVersion.Group && s.machineOfPool(m) {
			owners[m.Spec.InfrastructureRef.Name] = m
		}
	}

	s.instances = s.instances[:0]
	seen := map[string]bool{}
	for _, c := range containers {
		seen[c.Name] = true
		s.instances = append(s.instances, &instance{container: c, machine: machines[c.Name], owner: owners[c.Name]})
	}
	s.sortInstances()

	s.orphanMachines = s.orphanMachines[:0]
	for name, m := range machines {
		if !seen[name] {
			s.orphanMachines = append(s.orphanMachines, m)
		}
	}
	sort.Slice(s.orphanMachines, func(a, b int) bool { return s.orphanMachines[a].Name < s.orphanMachines[b].Name })

	s.inventoryListed = true
	ctrl.LoggerFrom(ctx).V(4).Info("Listed the pool's containers", "containers", len(containers), "machines", len(machines), "pool", klog.KObj(s.pool))
	return ctrl.Result{}, nil
}

// inventorySelector selects the pool's DockerMachinePoolMachines and Machines by the labels of
// its Cluster and MachinePool. The labels only narrow what is read; ownership decides. During
// deletion the MachinePool, and so its name label, may be gone.
func (s *poolScope) inventorySelector() client.MatchingLabels {
	selector := client.MatchingLabels{}
	if name := s.clusterName(); name != "" {
		selector[clusterv1.ClusterNameLabel] = name
	}
	if name := s.machinePoolName(); name != "" {
		selector[clusterv1.MachinePoolNameLabel] = format.MustFormatValue(name)
	}
	return selector
}

func ownedByPool(obj client.Object, pool *infrav1.DockerMachinePool) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == pool.UID {
			return true
		}
	}
	return false
}

// sortInstances puts the instances oldest first, the order the status lists them in; scale-down
// walks from the end for the newest.
func (s *poolScope) sortInstances() {
	sort.SliceStable(s.instances, func(a, b int) bool {
		return s.instances[a].container.CreatedAt.Before(s.instances[b].container.CreatedAt)
	})
}
