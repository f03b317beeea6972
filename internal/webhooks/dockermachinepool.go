package webhooks

import (
	"context"
	"fmt"

	pkgerrors "github.com/pkg/errors"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/hostpath"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-infrastructure-capdmp-dev-v1alpha1-dockermachinepool,mutating=true,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.capdmp.dev,resources=dockermachinepools,versions=v1alpha1,name=default.dockermachinepool.infrastructure.capdmp.dev,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-capdmp-dev-v1alpha1-dockermachinepool,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.capdmp.dev,resources=dockermachinepools,versions=v1alpha1,name=validation.dockermachinepool.infrastructure.capdmp.dev,sideEffects=None,admissionReviewVersions=v1

// DockerMachinePool defaults and validates DockerMachinePools.
//
// The spec of a pool stays mutable: the MachinePool contract rolls a pool out by updating its
// InfraMachinePool in place (the topology controller does the same from a ClusterClass).
type DockerMachinePool struct {
	// HostPaths are the host paths the pool's extraMounts may mount; the zero Policy is the
	// default one.
	HostPaths hostpath.Policy

	// Client finds the pools that hold the UID a pool's PoolUIDAnnotation records, through
	// PoolUIDIndex; SetupWebhookWithManager sets the manager's client when it is nil.
	Client client.Reader
}

// PoolUIDIndex is the field index of DockerMachinePools by the UIDs they hold: their own and the
// one their PoolUIDAnnotation records (IndexPoolUIDs). SetupWebhookWithManager registers it on the
// manager's cache; whoever else needs it uses it from there, since the cache refuses a second
// registration of the same name.
const PoolUIDIndex = "poolUIDs"

// IndexPoolUIDs is the indexer of PoolUIDIndex.
func IndexPoolUIDs(o client.Object) []string {
	pool, ok := o.(*infrav1.DockerMachinePool)
	if !ok {
		panic(fmt.Sprintf("Expected a DockerMachinePool but got a %T", o))
	}
	var uids []string
	if pool.UID != "" {
		uids = append(uids, string(pool.UID))
	}
	if uid := pool.Annotations[infrav1.PoolUIDAnnotation]; uid != "" && uid != string(pool.UID) {
		uids = append(uids, uid)
	}
	return uids
}

var (
	_ admission.Defaulter[*infrav1.DockerMachinePool] = &DockerMachinePool{}
	_ admission.Validator[*infrav1.DockerMachinePool] = &DockerMachinePool{}
)

// SetupWebhookWithManager registers the DockerMachinePool webhooks with the manager.
func (webhook *DockerMachinePool) SetupWebhookWithManager(mgr ctrl.Manager) error {
	if webhook.Client == nil {
		webhook.Client = mgr.GetClient()
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &infrav1.DockerMachinePool{}, PoolUIDIndex, IndexPoolUIDs); err != nil {
		return pkgerrors.Wrapf(err, "failed to index DockerMachinePools by %s", PoolUIDIndex)
	}
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.DockerMachinePool{}).
		WithDefaulter(webhook).
		WithValidator(webhook).
		Complete()
}

// Default fills the empty fields of a DockerMachinePool.
func (webhook *DockerMachinePool) Default(_ context.Context, pool *infrav1.DockerMachinePool) error {
	defaultMachineTemplate(&pool.Spec.Template)
	return nil
}

// ValidateCreate validates a new DockerMachinePool.
func (webhook *DockerMachinePool) ValidateCreate(ctx context.Context, pool *infrav1.DockerMachinePool) (admission.Warnings, error) {
	return webhook.validate(ctx, nil, pool)
}

// ValidateUpdate validates a changed DockerMachinePool.
func (webhook *DockerMachinePool) ValidateUpdate(ctx context.Context, oldPool, newPool *infrav1.DockerMachinePool) (admission.Warnings, error) {
	return webhook.validate(ctx, oldPool, newPool)
}

// ValidateDelete allows every deletion.
func (webhook *DockerMachinePool) ValidateDelete(_ context.Context, _ *infrav1.DockerMachinePool) (admission.Warnings, error) {
	return nil, nil
}

func (webhook *DockerMachinePool) validate(ctx context.Context, oldPool, newPool *infrav1.DockerMachinePool) (admission.Warnings, error) {
	uidPath := field.NewPath("metadata", "annotations").Key(infrav1.PoolUIDAnnotation)
	var allErrs field.ErrorList
	// The pool's containers carry the UID recorded there: changed or removed, the pool would lose
	// them. A new pool may bring one (clusterctl move creates the pool with its annotations), and
	// the pool clusterctl move deletes from its source loses it: move marks it by replacing every
	// annotation with its own, the pool on the target keeps the UID.
	if _, deletedForMove := newPool.Annotations[clusterctlv1.DeleteForMoveAnnotation]; oldPool != nil && !deletedForMove {
		if uid, ok := oldPool.Annotations[infrav1.PoolUIDAnnotation]; ok && newPool.Annotations[infrav1.PoolUIDAnnotation] != uid {
			allErrs = append(allErrs, field.Forbidden(uidPath,
				"the pool's containers carry the UID recorded here ("+uid+"); it cannot change or be removed"))
		}
	}
	// A UID another pool holds would give this pool that pool's containers: a pool copied from
	// another (kubectl get -o yaml, renamed) brings its annotation along.
	holder, err := webhook.poolHoldingRecordedUID(ctx, oldPool, newPool)
	if err != nil {
		return nil, apierrors.NewInternalError(pkgerrors.Wrapf(err, "failed to look up the pools holding UID %s", newPool.Annotations[infrav1.PoolUIDAnnotation]))
	}
	if holder != nil {
		allErrs = append(allErrs, field.Forbidden(uidPath, fmt.Sprintf(
			"UID %s is held by DockerMachinePool %s, whose containers carry it; a pool copied from another must not keep this annotation, remove it",
			newPool.Annotations[infrav1.PoolUIDAnnotation], klog.KObj(holder))))
	}
	// A pool whose template is unchanged is not checked again, so that a pool admitted before a
	// rule existed never blocks unrelated updates, such as the controller writing providerIDList.
	changed := oldPool == nil
	if !changed {
		if changed, err = webhook.specChanged(ctx, oldPool, newPool); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
	}
	var warnings admission.Warnings
	if changed {
		var templateErrs field.ErrorList
		templateErrs, warnings = validateMachineTemplate(&newPool.Spec.Template, field.NewPath("spec", "template"), webhook.HostPaths)
		allErrs = append(allErrs, templateErrs...)
		allErrs = append(allErrs, validateStrategy(newPool.Spec.Strategy, field.NewPath("spec", "strategy"))...)
		allErrs = append(allErrs, validateRemediation(newPool.Spec.Remediation, field.NewPath("spec", "remediation"))...)
	}
	if len(allErrs) > 0 {
		return warnings, apierrors.NewInvalid(infrav1.GroupVersion.WithKind("DockerMachinePool").GroupKind(), newPool.Name, allErrs)
	}
	return warnings, nil
}

// specChanged says whether an update changes what validate checks of a pool's spec. The pools are
// compared defaulted alike: the defaulting webhook fills, on every update, what a pool stored with
// webhooks off lacks, which is no change.
func (webhook *DockerMachinePool) specChanged(ctx context.Context, oldPool, newPool *infrav1.DockerMachinePool) (bool, error) {
	oldDefaulted, newDefaulted := oldPool.DeepCopy(), newPool.DeepCopy()
	if err := webhook.Default(ctx, oldDefaulted); err != nil {
		return false, pkgerrors.Wrap(err, "failed to default the stored DockerMachinePool")
	}
	if err := webhook.Default(ctx, newDefaulted); err != nil {
		return false, pkgerrors.Wrap(err, "failed to default the updated DockerMachinePool")
	}
	return !equality.Semantic.DeepEqual(oldDefaulted.Spec.Template, newDefaulted.Spec.Template) ||
		!equality.Semantic.DeepEqual(oldDefaulted.Spec.Strategy, newDefaulted.Spec.Strategy) ||
		!equality.Semantic.DeepEqual(oldDefaulted.Spec.Remediation, newDefaulted.Spec.Remediation), nil
}

// poolHoldingRecordedUID returns another pool (another namespace or name) that holds the UID
// newPool's PoolUIDAnnotation records, as its own UID or as its recorded one, or nil. It looks
// only at an annotation that is new: on create, or on an update of a pool that had none (validate
// keeps a recorded one from changing). A pool recording its own UID, as the controller does, is
// not looked up: no other pool can have that UID.
func (webhook *DockerMachinePool) poolHoldingRecordedUID(ctx context.Context, oldPool, newPool *infrav1.DockerMachinePool) (*infrav1.DockerMachinePool, error) {
	uid := newPool.Annotations[infrav1.PoolUIDAnnotation]
	if uid == "" || uid == string(newPool.UID) {
		return nil, nil
	}
	if oldPool != nil {
		if _, recorded := oldPool.Annotations[infrav1.PoolUIDAnnotation]; recorded {
			return nil, nil
		}
	}
	if webhook.Client == nil {
		return nil, pkgerrors.New("the webhook has no client (SetupWebhookWithManager sets one)")
	}
	pools := &infrav1.DockerMachinePoolList{}
	if err := webhook.Client.List(ctx, pools, client.MatchingFields{PoolUIDIndex: uid}); err != nil {
		return nil, err
	}
	for i := range pools.Items {
		if pool := &pools.Items[i]; pool.Namespace != newPool.Namespace || pool.Name != newPool.Name {
			return pool, nil
		}
	}
	return nil, nil
}
