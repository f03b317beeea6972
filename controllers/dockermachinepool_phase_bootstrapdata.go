package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	pkgerrors "github.com/pkg/errors"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/metrics"
	"github.com/capdmp/capdmp/pkg/skew"
)

const (
	// BootstrapRefreshRequestedAnnotation is set on the KubeadmConfig, with the time, when the pool
	// has CABPK re-render bootstrap data that is older than a pause.
	BootstrapRefreshRequestedAnnotation = "infrastructure.capdmp.dev/bootstrap-refresh-requested"

	// refreshRetryPeriod is how long the pool waits for CABPK to re-render before asking again.
	refreshRetryPeriod = 30 * time.Second

	// imageRetryPeriod is how often a pool whose image is missing looks for it again.
	imageRetryPeriod = 30 * time.Second

	// unreadableJoinConfigurationReason: the data's JoinConfiguration API cannot be read by the
	// kubeadm of the version the next container would run.
	unreadableJoinConfigurationReason = "UnreadableJoinConfiguration"
)

// reconcileBootstrapData plans scale-up and makes sure the data of the next container is fresh:
// newer than any unfinished pause and readable by the kubeadm it will run. Data older than the
// pause is re-rendered by the bootstrap provider (CABPK): the pool deletes the workload cluster's
// bootstrap token Secret, once no container is mid-join, and touches the KubeadmConfig; the new
// token CABPK writes into the KubeadmConfig's spec, after the data, then wakes the pool. It does this as soon as a pause begins if a rollout waits
// on the gate, so that the gate's re-opening does not wait for it; when nothing is to be created
// it revokes no token, and a pause the gate has ended is over.
func (r *DockerMachinePoolReconciler) reconcileBootstrapData(ctx context.Context, s *poolScope) (ctrl.Result, error) {
	s.creation = s.planCreation()
	gate := &s.pool.Status.VersionGate
	if s.renderPending != "" {
		if result, refreshing, err := r.renderEditedConfig(ctx, s); err != nil || refreshing {
			return result, err
		}
	}
	if s.creation.count == 0 && !s.rolloutWaitsOnGate() {
		if s.decision != nil && s.decision.Verdict == skew.Proceed {
			gate.WaitingSince, gate.BootstrapDataHashAtPause = nil, ""
		}
		if s.invalidData != "" {
			conditions.Set(s.pool, metaCondition(infrav1.BootstrapDataFreshCondition, false, infrav1.InvalidBootstrapDataReason, s.invalidData))
			return ctrl.Result{}, nil
		}
		conditions.Set(s.pool, metaCondition(infrav1.BootstrapDataFreshCondition, true, infrav1.BootstrapDataFreshReason, ""))
		return ctrl.Result{}, nil
	}
	pauseUnfinished := gate.WaitingSince != nil && gate.BootstrapDataHashAtPause != ""

	name := dataSecretName(s)
	if name == "" {
		conditions.Set(s.pool, metaCondition(infrav1.BootstrapDataFreshCondition, false, infrav1.WaitingForBootstrapDataReason,
			"The bootstrap provider has not written the MachinePool's data secret yet"))
		if s.creation.count > 0 && s.creation.blockedReason == "" {
			s.creation.blockedReason = infrav1.WaitingForBootstrapDataReason
			s.creation.blockedMessage = "Waiting for the bootstrap provider to write the MachinePool's data secret"
		}
		return ctrl.Result{}, nil
	}
	// reconcileBootstrapConfiguration read the data and recorded its configuration; it leaves
	// s.data nil only when the Secret could not be found, which this read reports.
	data, configuration := s.data, s.pool.Status.BootstrapData.Configuration
	if data == nil {
		var err error
		if data, err = bootstrap.Read(ctx, r.APIReader, s.pool.Namespace, name); err != nil {
			return ctrl.Result{}, pkgerrors.Wrap(err, "failed to read bootstrap data")
		}
		if configuration, err = data.Configuration(ctx); err != nil {
			return ctrl.Result{}, pkgerrors.Wrap(err, "failed to compute the configuration of the bootstrap data")
		}
	}
	s.creation.dataSecretName, s.creation.dataHash, s.creation.configuration = name, data.Hash, configuration
	if s.invalidData == "" {
		// Every container's bootstrap would fail on data that cannot become commands.
		if _, err := bootstrap.Commands(data, bootstrap.Vars{Hostname: s.pool.Name}); err != nil {
			s.invalidData = "The bootstrap data cannot be run: " + err.Error()
		}
	}
	if s.invalidData != "" {
		conditions.Set(s.pool, metaCondition(infrav1.BootstrapDataFreshCondition, false, infrav1.InvalidBootstrapDataReason, s.invalidData))
		if s.creation.count > 0 && s.creation.blockedReason == "" {
			s.creation.blockedReason, s.creation.blockedMessage = infrav1.InvalidBootstrapDataReason, s.invalidData
		}
		return ctrl.Result{}, nil
	}

	if pauseUnfinished && data.Hash == gate.BootstrapDataHashAtPause {
		why := "the data predates the pause that began at " + gate.WaitingSince.UTC().Format(time.RFC3339)
		target, notRefreshable, err := r.refreshTargetOf(ctx, s, data)
		if err != nil {
			return ctrl.Result{}, err
		}
		if notRefreshable != "" {
			r.notRefreshable(s, why, notRefreshable)
			// The data is used as it is: still, no kubeadm gets data it cannot read.
			_, err := blockIfUnreadable(s, data, "; it cannot be refreshed: "+notRefreshable)
			return ctrl.Result{}, err
		}
		if s.creation.blockedReason == "" && s.creation.count > 0 {
			s.creation.blockedReason = infrav1.WaitingForBootstrapDataReason
			s.creation.blockedMessage = "Waiting for bootstrap data newer than the pause that began at " + gate.WaitingSince.UTC().Format(time.RFC3339)
		}
		return r.requestBootstrapRefresh(ctx, s, target, why)
	}

	unreadable, err := blockIfUnreadable(s, data, "")
	if err != nil {
		return ctrl.Result{}, err
	}
	if unreadable == "" {
		conditions.Set(s.pool, metaCondition(infrav1.BootstrapDataFreshCondition, true, infrav1.BootstrapDataFreshReason, ""))
		return ctrl.Result{}, nil
	}
	if s.creation.version != s.targetVersion {
		return ctrl.Result{}, nil
	}
	// Rendered for another version: a re-render uses the MachinePool's version.
	target, notRefreshable, err := r.refreshTargetOf(ctx, s, data)
	if err != nil {
		return ctrl.Result{}, err
	}
	if notRefreshable != "" {
		conditions.Set(s.pool, metaCondition(infrav1.BootstrapDataFreshCondition, false, unreadableJoinConfigurationReason,
			unreadable+"; it cannot be refreshed: "+notRefreshable))
		return ctrl.Result{}, nil
	}
	return r.requestBootstrapRefresh(ctx, s, target, unreadable)
}

// renderEditedConfig has CABPK render the data of a KubeadmConfig edited since it rendered it
// (s.renderPending), holding back new containers meanwhile: they would get the configuration
// about to be replaced. It returns refreshing false when the data cannot be refreshed (no
// bootstrap token of its own to revoke): then the edit reaches the data at CABPK's next token
// rotation.
func (r *DockerMachinePoolReconciler) renderEditedConfig(ctx context.Context, s *poolScope) (_ ctrl.Result, refreshing bool, _ error) {
	target, notRefreshable, err := r.refreshTargetOf(ctx, s, s.data)
	if err != nil {
		return ctrl.Result{}, false, err
	}
	if notRefreshable != "" {
		ctrl.LoggerFrom(ctx).V(4).Info("Edited KubeadmConfig not rendered yet; its data cannot be refreshed", "reason", s.renderPending, "whyNot", notRefreshable)
		return ctrl.Result{}, false, nil
	}
	if s.creation.count > 0 && s.creation.blockedReason == "" {
		s.creation.blockedReason = infrav1.WaitingForBootstrapDataReason
		s.creation.blockedMessage = "Waiting for bootstrap data rendered from the edited KubeadmConfig: " + s.renderPending
	}
	result, err := r.requestBootstrapRefresh(ctx, s, target, s.renderPending)
	return result, true, err
}

// blockIfUnreadable holds the creation when the kubeadm of the containers to create cannot read
// the data's JoinConfiguration, and says so in BootstrapDataFresh (its message ends with
// suffix). It returns why, "" when the data is readable or nothing is to be created.
func blockIfUnreadable(s *poolScope, data *bootstrap.Data, suffix string) (string, error) {
	if s.creation.count == 0 || s.creation.version == "" {
		return "", nil
	}
	msg, err := unreadableBy(data, s.creation.version)
	if err != nil || msg == "" {
		return "", err
	}
	s.creation.blockedReason, s.creation.blockedMessage = unreadableJoinConfigurationReason, msg
	conditions.Set(s.pool, metaCondition(infrav1.BootstrapDataFreshCondition, false, unreadableJoinConfigurationReason, msg+suffix))
	return msg, nil
}

// unreadableBy says why the kubeadm of version cannot read the data's JoinConfiguration, ""
// when it can or the data is not kubeadm join data. The pool checks it before it creates a
// container, the machine again before it bootstraps one: the data may be re-rendered between.
func unreadableBy(data *bootstrap.Data, version string) (string, error) {
	apiVersion, err := bootstrap.JoinConfigurationAPIVersion(data)
	if errors.Is(err, bootstrap.ErrNoJoinConfiguration) {
		return "", nil
	}
	if err != nil {
		return "", pkgerrors.Wrap(err, "failed to read the JoinConfiguration of the bootstrap data")
	}
	readable, err := skew.KubeadmAPIVersionReadable(version, apiVersion)
	if err != nil {
		return "", pkgerrors.Wrap(err, "failed to check the JoinConfiguration API version")
	}
	if readable {
		return "", nil
	}
	return fmt.Sprintf("The bootstrap data's JoinConfiguration is %s, which the kubeadm of %s cannot read", apiVersion, version), nil
}

// refreshTarget is what a refresh of the pool's bootstrap data acts on: the pool's own
// KubeadmConfig and the bootstrap token its data joins with.
type refreshTarget struct {
	config  *unstructured.Unstructured
	tokenID string
}

// refreshTargetOf finds what a refresh of the pool's data would act on, or says why the data
// cannot be refreshed: it is not the data of the MachinePool's own KubeadmConfig, it joins
// without a bootstrap token (file or URL discovery, another bootstrap provider), or another data
// Secret of the Cluster joins with the same token, which revoking it would break.
func (r *DockerMachinePoolReconciler) refreshTargetOf(ctx context.Context, s *poolScope, data *bootstrap.Data) (*refreshTarget, string, error) {
	ref := s.machinePool.Spec.Template.Spec.Bootstrap.ConfigRef
	if !isKubeadmConfig(ref) {
		return nil, fmt.Sprintf("the bootstrap config is a %s of %s; only a KubeadmConfig's data can be refreshed", ref.Kind, ref.APIGroup), nil
	}
	// Read live: the annotation of a request this pool made a moment ago may not be in the cache
	// yet, and a stale copy would have it ask again.
	config := &unstructured.Unstructured{}
	config.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"))
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.pool.Namespace, Name: ref.Name}, config); err != nil {
		return nil, "", pkgerrors.Wrapf(err, "failed to get KubeadmConfig %s", klog.KRef(s.pool.Namespace, ref.Name))
	}
	dataSecret := dataSecretName(s)
	if own, _, _ := unstructured.NestedString(config.Object, "status", "dataSecretName"); own != dataSecret {
		return nil, fmt.Sprintf("the MachinePool's data Secret %s is not the one KubeadmConfig %s wrote (%q)", dataSecret, ref.Name, own), nil
	}
	tokenID, err := bootstrap.BootstrapTokenID(data)
	switch {
	case errors.Is(err, bootstrap.ErrNoJoinConfiguration):
		return nil, "the data holds no kubeadm JoinConfiguration", nil
	case errors.Is(err, bootstrap.ErrNoBootstrapToken):
		return nil, "the kubeadm JoinConfiguration discovers the cluster without a bootstrap token", nil
	case err != nil:
		return nil, "", pkgerrors.Wrap(err, "failed to find the bootstrap token in the data")
	}
	shared, err := r.tokenSharedWith(ctx, s, dataSecret, tokenID)
	if err != nil {
		return nil, "", err
	}
	if shared != "" {
		return nil, fmt.Sprintf("of its bootstrap token %s, %s", tokenID, shared), nil
	}
	return &refreshTarget{config: config, tokenID: tokenID}, "", nil
}

// tokenSharedWith says which other data Secret of the pool's Cluster joins, or may join, with
// tokenID, "" when none does. Bootstrap data (a Secret with a format, as CABPK writes it) that
// cannot be read may hold the token: revoking it could break another pool's joins, so it counts
// as shared.
func (r *DockerMachinePoolReconciler) tokenSharedWith(ctx context.Context, s *poolScope, dataSecret, tokenID string) (string, error) {
	names, err := r.dataSecretsOfCluster(ctx, s)
	if err != nil {
		return "", err
	}
	for _, name := range names {
		if name == dataSecret {
			continue
		}
		secret := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.pool.Namespace, Name: name}, secret); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return "", pkgerrors.Wrapf(err, "failed to get data Secret %s", klog.KRef(s.pool.Namespace, name))
		}
		_, isBootstrapData := secret.Data["format"]
		other, err := bootstrap.NewData(secret.Data["value"], string(secret.Data["format"]))
		if err != nil {
			if isBootstrapData {
				return fmt.Sprintf("the data Secret %s may hold it too and cannot be read (%v)", secret.Name, err), nil
			}
			continue // not bootstrap data as Cluster API's providers write it
		}
		id, err := bootstrap.BootstrapTokenID(other)
		switch {
		case err == nil && id == tokenID:
			return "it is also in the data Secret " + secret.Name, nil
		case err != nil && isBootstrapData && !errors.Is(err, bootstrap.ErrNoJoinConfiguration) && !errors.Is(err, bootstrap.ErrNoBootstrapToken):
			return fmt.Sprintf("the data Secret %s may hold it too and cannot be read (%v)", secret.Name, err), nil
		case err != nil && bytes.Contains(other.Value, []byte(tokenID+".")):
			// A JoinConfiguration that does not parse is not one the reader finds, yet the
			// token in it may still be used.
			return fmt.Sprintf("the data Secret %s names it in data that cannot be read as a JoinConfiguration", secret.Name), nil
		}
	}
	return "", nil
}

// dataSecretsOfCluster names, sorted, the bootstrap data Secrets of the pool's Cluster: those its
// MachinePools and Machines bootstrap from, and those its KubeadmConfigs rendered, which their
// owner may not name yet. Found from these objects, not by listing Secrets: the manager may only
// get a Secret by name, so that its role reads no Secret it has no reason to.
func (r *DockerMachinePoolReconciler) dataSecretsOfCluster(ctx context.Context, s *poolScope) ([]string, error) {
	namespace, cluster := s.pool.Namespace, s.cluster.Name
	names := sets.New[string]()
	pools := &clusterv1.MachinePoolList{}
	if err := r.Client.List(ctx, pools, client.InNamespace(namespace)); err != nil {
		return nil, pkgerrors.Wrapf(err, "failed to list the MachinePools of Cluster %s", klog.KObj(s.cluster))
	}
	for _, mp := range pools.Items {
		if mp.Spec.ClusterName == cluster {
			names.Insert(ptr.Deref(mp.Spec.Template.Spec.Bootstrap.DataSecretName, ""))
		}
	}
	machines := &clusterv1.MachineList{}
	if err := r.Client.List(ctx, machines, client.InNamespace(namespace)); err != nil {
		return nil, pkgerrors.Wrapf(err, "failed to list the Machines of Cluster %s", klog.KObj(s.cluster))
	}
	for _, m := range machines.Items {
		if m.Spec.ClusterName == cluster {
			names.Insert(ptr.Deref(m.Spec.Bootstrap.DataSecretName, ""))
		}
	}
	configs := &unstructured.UnstructuredList{}
	configs.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfigList"))
	err := r.Client.List(ctx, configs, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster})
	switch {
	case meta.IsNoMatchError(err):
		// CABPK is not installed: no KubeadmConfig rendered anything.
	case err != nil:
		return nil, pkgerrors.Wrapf(err, "failed to list the KubeadmConfigs of Cluster %s", klog.KObj(s.cluster))
	}
	for _, c := range configs.Items {
		name, _, _ := unstructured.NestedString(c.Object, "status", "dataSecretName")
		names.Insert(name)
	}
	names.Delete("")
	return sets.List(names), nil
}

// notRefreshable reports, once, that data older than the pause stays as it is: containers the
// gate admits are created with it rather than never. A pause the gate has ended is then over.
func (r *DockerMachinePoolReconciler) notRefreshable(s *poolScope, why, whyNot string) {
	msg := fmt.Sprintf("Refresh needed (%s), but %s; containers are created with the current data", why, whyNot)
	if !conditions.IsFalse(s.pool, infrav1.BootstrapDataFreshCondition) ||
		conditions.GetReason(s.pool, infrav1.BootstrapDataFreshCondition) != infrav1.BootstrapDataNotRefreshableReason {
		r.eventf(s.pool, corev1.EventTypeWarning, infrav1.BootstrapDataNotRefreshableReason, "%s", msg)
	}
	conditions.Set(s.pool, metaCondition(infrav1.BootstrapDataFreshCondition, false, infrav1.BootstrapDataNotRefreshableReason, msg))
	if s.decision != nil && s.decision.Verdict == skew.Proceed {
		gate := &s.pool.Status.VersionGate
		gate.WaitingSince, gate.BootstrapDataHashAtPause = nil, ""
	}
}

// requestBootstrapRefresh has CABPK re-render the pool's bootstrap data with a new token. It
// never deletes the data Secret nor writes CABPK's status; it waits while a container may still
// be joining with the current token, and revokes only the token of target, the pool's own.
func (r *DockerMachinePoolReconciler) requestBootstrapRefresh(ctx context.Context, s *poolScope, target *refreshTarget, why string) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	setRefreshing := func(msg string) {
		conditions.Set(s.pool, metaCondition(infrav1.BootstrapDataFreshCondition, false, infrav1.BootstrapDataRefreshingReason, msg))
	}

	now, timeout := r.clock(), bootstrapTimeoutOf(s.pool)
	for _, i := range s.active() {
		if i.joining(now, timeout) {
			setRefreshing(fmt.Sprintf("Refresh needed (%s); waiting for container %s to finish joining, at most until %s",
				why, i.name(), i.container.CreatedAt.Add(joinWindow(timeout)).UTC().Format(time.RFC3339)))
			// Its machine's changes wake the pool; the window's end may come first.
			return ctrl.Result{RequeueAfter: i.container.CreatedAt.Add(joinWindow(timeout)).Sub(now)}, nil
		}
	}

	config, tokenID := target.config, target.tokenID
	pauseStart := s.pool.Status.VersionGate.WaitingSince
	if requested, err := time.Parse(time.RFC3339Nano, config.GetAnnotations()[BootstrapRefreshRequestedAnnotation]); err == nil {
		age := r.clock().Sub(requested)
		if (pauseStart == nil || requested.After(pauseStart.Time)) && age < refreshRetryPeriod {
			setRefreshing(fmt.Sprintf("Waiting for the bootstrap provider to re-render the data (%s), requested at %s", why, requested.UTC().Format(time.RFC3339)))
			return ctrl.Result{RequeueAfter: refreshRetryPeriod - age}, nil
		}
	}

	if r.ClusterCache == nil {
		return ctrl.Result{}, pkgerrors.New("no ClusterCache to reach the workload cluster")
	}
	workload, err := r.ClusterCache.GetClient(ctx, util.ObjectKey(s.cluster))
	if err != nil {
		return ctrl.Result{}, pkgerrors.Wrap(err, "failed to get a client for the workload cluster")
	}
	tokenSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstraputil.BootstrapTokenSecretName(tokenID)}}
	if err := workload.Delete(ctx, tokenSecret); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to delete the workload cluster's bootstrap token %s", tokenID)
	}

	patch := client.MergeFrom(config.DeepCopy())
	annotations := config.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[BootstrapRefreshRequestedAnnotation] = now.UTC().Format(time.RFC3339Nano)
	config.SetAnnotations(annotations)
	if err := r.Client.Patch(ctx, config, patch); err != nil {
		return ctrl.Result{}, pkgerrors.Wrapf(err, "failed to touch KubeadmConfig %s", klog.KObj(config))
	}
	log.Info("Requested fresh bootstrap data", "KubeadmConfig", klog.KObj(config), "reason", why)
	metrics.BootstrapDataRefreshes.WithLabelValues(s.pool.Namespace, s.pool.Name).Inc()
	r.eventf(s.pool, corev1.EventTypeNormal, infrav1.BootstrapDataRefreshingReason, "Requested fresh bootstrap data from KubeadmConfig %s: %s", config.GetName(), why)
	setRefreshing(fmt.Sprintf("Waiting for the bootstrap provider to re-render the data (%s)", why))
	return ctrl.Result{RequeueAfter: refreshRetryPeriod}, nil
}

// dataSecretName is the MachinePool's bootstrap data Secret, empty until the provider wrote it.
func dataSecretName(s *poolScope) string {
	return ptr.Deref(s.machinePool.Spec.Template.Spec.Bootstrap.DataSecretName, "")
}

func metaCondition(conditionType string, ok bool, reason, message string) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: message}
}

func itoa(n int) string { return strconv.Itoa(n) }
