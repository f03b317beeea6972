package controllers

import (
	"context"
	"fmt"
	"time"

	pkgerrors "github.com/pkg/errors"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/pkg/skew"
)

// nodeRegistrationRequeue is how soon a bootstrapped machine looks for its Node again: a kubelet
// registers within seconds of kubeadm join, and the Node is not watched.
const nodeRegistrationRequeue = 2 * time.Second

// reconcileNodeProviderID gives the machine's Node its providerID, as CAPD does for its machines:
// a kubelet without a cloud provider registers with an empty one, and Cluster API matches Nodes to
// MachinePool Machines (and counts the pool's nodeRefs) by providerID only. The container's
// hostname is its name, so the Node is found by name.
func (r *DockerMachinePoolMachineReconciler) reconcileNodeProviderID(ctx context.Context, s *machineScope) (ctrl.Result, error) {
	machine := s.machine
	if r.ClusterCache == nil || machine.Spec.ProviderID == "" {
		return ctrl.Result{}, nil
	}
	if conditions.IsTrue(machine, infrav1.NodeProviderIDCondition) && machine.Status.NodeKubeletVersion != "" {
		return ctrl.Result{}, nil
	}
	workload, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(s.cluster))
	if err != nil {
		if pkgerrors.Is(err, clustercache.ErrClusterNotConnected) {
			conditions.Set(machine, metaCondition(infrav1.NodeProviderIDCondition, false, infrav1.WaitingForNodeReason, "Waiting for a connection to the workload cluster"))
			return ctrl.Result{RequeueAfter: nodeRegistrationRequeue}, nil
		}
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to get a client of workload cluster %s", klog.KObj(s.cluster))
	}
	node := &corev1.Node{}
	if err := workload.Get(ctx, client.ObjectKey{Name: machine.Name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			conditions.Set(machine, metaCondition(infrav1.NodeProviderIDCondition, false, infrav1.WaitingForNodeReason, "Waiting for Node "+machine.Name+" to register"))
			return ctrl.Result{RequeueAfter: nodeRegistrationRequeue}, nil
		}
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to get Node %s", machine.Name)
	}
	r.recordKubeletVersion(machine, node)
	switch node.Spec.ProviderID {
	case machine.Spec.ProviderID:
	case "":
		original := node.DeepCopy()
		node.Spec.ProviderID = machine.Spec.ProviderID
		if err := workload.Patch(ctx, node, client.MergeFrom(original)); err != nil {
			return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to set the providerID of Node %s", machine.Name)
		}
		ctrl.LoggerFrom(ctx).Info("Set the providerID of the Node", "node", machine.Name, "providerID", machine.Spec.ProviderID)
	default:
		// providerID is immutable once set: say so rather than fight the kubelet.
		conditions.Set(machine, metaCondition(infrav1.NodeProviderIDCondition, false, infrav1.NodeProviderIDMismatchReason,
			"Node "+machine.Name+" has providerID "+node.Spec.ProviderID+", not "+machine.Spec.ProviderID))
		return ctrl.Result{}, nil
	}
	conditions.Set(machine, metaCondition(infrav1.NodeProviderIDCondition, true, infrav1.NodeProviderIDSetReason, ""))
	return ctrl.Result{}, nil
}

// recordKubeletVersion records the version the Node's kubelet reports, and says so when it is
// not the version the container's image was labelled with: an image tag is a claim, the Node's
// kubeletVersion is what the skew policy is about.
func (r *DockerMachinePoolMachineReconciler) recordKubeletVersion(machine *infrav1.DockerMachinePoolMachine, node *corev1.Node) {
	kubelet := node.Status.NodeInfo.KubeletVersion
	if kubelet == "" {
		return
	}
	machine.Status.NodeKubeletVersion = kubelet
	labelled, labelErr := skew.VersionFromLabelValue(machine.Labels[infrav1.KubernetesVersionLabel])
	if same, err := skew.SameRelease(labelled, kubelet); labelErr == nil && err == nil && same {
		conditions.Set(machine, metaCondition(infrav1.KubeletVersionCondition, true, infrav1.KubeletVersionMatchesReason, ""))
		return
	}
	msg := fmt.Sprintf("Node %s runs kubelet %s, but its image is labelled %q; the version-skew gate counts %s",
		node.Name, kubelet, machine.Labels[infrav1.KubernetesVersionLabel], kubelet)
	if !conditions.IsFalse(machine, infrav1.KubeletVersionCondition) {
		r.eventf(machine, corev1.EventTypeWarning, infrav1.KubeletVersionMismatchReason, "%s", msg)
	}
	conditions.Set(machine, metaCondition(infrav1.KubeletVersionCondition, false, infrav1.KubeletVersionMismatchReason, msg))
}
