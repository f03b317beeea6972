package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	pkgerrors "github.com/pkg/errors"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/capdmp/capdmp/internal/bootstrap"
)

// reconcileBootstrapConfiguration reads the MachinePool's bootstrap data and records the
// configuration it carries (status.bootstrapData): containers bootstrapped with another one are
// outdated, and the rollout replaces them. CABPK renders a MachinePool's data once and again
// only with a new token, so an edited KubeadmConfig (by a user, or by the topology controller
// when a ClusterClass's bootstrap template changes) would reach the data at the next token
// rotation only: when the KubeadmConfig's spec changed since the data was rendered (its bootstrap
// token aside: CABPK writes a new one into the spec at every rotation), reconcileBootstrapData
// asks CABPK to render it again.
func (r *DockerMachinePoolReconciler) reconcileBootstrapConfiguration(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	name := dataSecretName(s)
	if name == "" {
		return ctrl.Result{}, nil
	}
	data, err := bootstrap.Read(ctx, r.APIReader, s.pool.Namespace, name)
	if apierrors.IsNotFound(err) {
		// reconcileBootstrapData says so when it needs the data; the last configuration stands.
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, pkgerrors.Wrap(err, "failed to read bootstrap data")
	}
	s.data = data

	configName, configHash, err := r.kubeadmConfigSpecHash(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	recorded := &s.pool.Status.BootstrapData
	switch {
	case configName == "":
		recorded.ConfigName, recorded.ConfigHash = "", ""
	case recorded.DataHash != data.Hash || recorded.ConfigName != configName:
		// New data, or a KubeadmConfig swapped in (its data comes when CABPK renders it): the
		// data is taken as rendered from the KubeadmConfig as it is now.
		recorded.ConfigName, recorded.ConfigHash = configName, configHash
	case configHash != recorded.ConfigHash:
		s.renderPending = fmt.Sprintf("KubeadmConfig %s changed after the data was rendered", configName)
	}
	configuration, err := data.Configuration(ctx)
	switch {
	case errors.Is(err, bootstrap.ErrTemplateBudgetExceeded):
		// The data's configuration is unknown: the last one recorded stands (nothing is judged
		// outdated on a guess), and reconcileBootstrapData creates no container with the data.
		s.invalidData = "The configuration of the bootstrap data cannot be computed: " + err.Error()
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, pkgerrors.Wrap(err, "failed to compute the configuration of the bootstrap data")
	}
	recorded.DataHash, recorded.Configuration = data.Hash, configuration
	return ctrl.Result{}, nil
}

// kubeadmConfigSpecHash reads the MachinePool's KubeadmConfig, watches KubeadmConfigs from then
// on, and hashes its spec without the bootstrap token, which CABPK writes into the spec at every
// rotation; an empty name when the bootstrap config is of another kind or is gone.
func (r *DockerMachinePoolReconciler) kubeadmConfigSpecHash(ctx context.Context, s *poolScope) (name, hash string, _ error) {
	ref := s.machinePool.Spec.Template.Spec.Bootstrap.ConfigRef
	if !isKubeadmConfig(ref) {
		return "", "", nil
	}
	config := &unstructured.Unstructured{}
	config.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"))
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.pool.Namespace, Name: ref.Name}, config); err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", nil
		}
		return "", "", pkgerrors.Wrapf(err, "failed to get KubeadmConfig %s", klog.KRef(s.pool.Namespace, ref.Name))
	}
	if r.bootstrapConfigs.Controller != nil {
		if err := r.bootstrapConfigs.Watch(ctrl.LoggerFrom(ctx), config,
			handler.EnqueueRequestsFromMapFunc(r.kubeadmConfigToPools),
			predicate.GenerationChangedPredicate{}); err != nil {
			return "", "", pkgerrors.Wrap(err, "failed to watch KubeadmConfigs")
		}
	}
	spec, _, err := unstructured.NestedMap(config.Object, "spec")
	if err != nil {
		return "", "", pkgerrors.Wrapf(err, "failed to read the spec of KubeadmConfig %s", klog.KObj(config))
	}
	unstructured.RemoveNestedField(spec, "joinConfiguration", "discovery", "bootstrapToken", "token")
	// encoding/json writes map keys in order: the same spec hashes the same.
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", "", pkgerrors.Wrapf(err, "failed to hash the spec of KubeadmConfig %s", klog.KObj(config))
	}
	sum := sha256.Sum256(raw)
	return config.GetName(), hex.EncodeToString(sum[:16]), nil
}

// isKubeadmConfig is true when the bootstrap config is CABPK's KubeadmConfig.
func isKubeadmConfig(ref clusterv1.ContractVersionedObjectReference) bool {
	return ref.IsDefined() && ref.Kind == "KubeadmConfig" && ref.APIGroup == bootstrapv1.GroupVersion.Group
}
