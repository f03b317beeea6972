package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/cluster-api/controllers/external"
	capdv1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/clusterops"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/test/testenv"
)

// Template is the clusterctl flavor the clusters are made from: CAPD control plane, CAPDMP pool.
const Template = "templates/cluster-template-machinepool.yaml"

// ClusterSpec is what a scenario's cluster starts as.
type ClusterSpec struct {
	// Name is the Cluster's name and namespace.
	Name                 string
	ControlPlaneVersion  string
	ControlPlaneReplicas int
	PoolVersion          string
	PoolReplicas         int
	// SkipAddons leaves out kube-proxy and CoreDNS (kubeadm's addon phases, and KCP's upgrades of
	// them): the scenarios measure kubelets against kube-apiservers, and on two cores the addons'
	// pods in every cluster cost time the suite does not have. Nodes are Ready without them.
	SkipAddons bool
	// KubeadmTimeout, when set, raises kubeadm's waits for the control plane's components, the
	// kubelet, etcd and the kubelet's TLS bootstrap (2 to 5 minutes by default) on init and join:
	// on a loaded machine a new etcd member, or the joining node's own kube-apiserver that its
	// kubelet bootstraps against, can take longer to start, and the join then fails for good.
	KubeadmTimeout time.Duration
	// ControlPlaneNodeStartupTimeout, when set, replaces the template's 10 minutes a control-plane
	// Machine may take to register its Node before the MachineHealthCheck has KCP replace it.
	ControlPlaneNodeStartupTimeout time.Duration
	// UpstreamPool makes the pool upstream CAPD's DockerMachinePool (infrastructure.cluster.x-k8s.io,
	// no version-skew gate) instead of CAPDMP's: the conformance kit's other provider.
	UpstreamPool bool
	// ControlPlaneBootstrapTimeout, when set, replaces CAPD's limit on a control-plane machine's
	// whole bootstrap (5 minutes by default), which must outlast KubeadmTimeout: CAPD never
	// retries a bootstrap it gave up on, so a join that ends just after the limit leaves a machine
	// that is never ready, and the rollout stalls.
	ControlPlaneBootstrapTimeout time.Duration
}

// Cluster is a workload cluster made from Template.
type Cluster struct {
	// CAPDMPPool is the cluster's pool as the scenarios drive it.
	*CAPDMPPool
	w         *World
	Namespace string
	Name      string
	// Pool is the name of the MachinePool, its KubeadmConfig and its DockerMachinePool.
	Pool         string
	ControlPlane string

	lastObserver atomic.Pointer[observer]
}

// CreateCluster renders Template with clusterctl's variable processor and applies it: the cluster
// comes up as a user's would after `clusterctl generate cluster | kubectl apply -f -`. The pool
// starts at spec.PoolVersion (the template puts the control plane's version everywhere).
func (w *World) CreateCluster(ctx context.Context, spec ClusterSpec) (*Cluster, error) {
	objs, err := renderCluster(spec)
	if err != nil {
		return nil, err
	}
	c := w.Cluster(spec.Name, spec.Name)
	if err := w.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.Namespace}}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", c.Namespace, err)
	}
	for i := range objs {
		if err := w.Client.Create(ctx, &objs[i]); err != nil {
			return nil, fmt.Errorf("creating %s %s: %w", objs[i].GetKind(), objs[i].GetName(), err)
		}
	}
	return c, nil
}

// renderCluster returns Template's objects for spec.
func renderCluster(spec ClusterSpec) ([]unstructured.Unstructured, error) {
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), Template))
	if err != nil {
		return nil, err
	}
	vars := map[string]string{
		"CLUSTER_NAME": spec.Name, "NAMESPACE": spec.Name, "KUBERNETES_VERSION": spec.ControlPlaneVersion,
		"CONTROL_PLANE_MACHINE_COUNT": strconv.Itoa(spec.ControlPlaneReplicas),
		"WORKER_MACHINE_COUNT":        strconv.Itoa(spec.PoolReplicas),
		// The node images' pod network routes node podCIDRs; any private range works.
		"POD_CIDR": `["10.244.0.0/16"]`, "SERVICE_CIDR": `["10.96.0.0/12"]`,
	}
	if spec.ControlPlaneNodeStartupTimeout > 0 {
		vars["CONTROL_PLANE_NODE_STARTUP_TIMEOUT_SECONDS"] = strconv.Itoa(int(spec.ControlPlaneNodeStartupTimeout.Seconds()))
	}
	rendered, err := yamlprocessor.NewSimpleProcessor().Process(raw, func(name string) (string, error) {
		if v, ok := vars[name]; ok {
			return v, nil
		}
		return "", fmt.Errorf("variable %s is not set", name)
	})
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", Template, err)
	}
	objs, err := utilyaml.ToUnstructured(rendered)
	if err != nil {
		return nil, err
	}
	for i := range objs {
		obj := &objs[i]
		if obj.GetKind() == "MachinePool" && spec.PoolVersion != "" {
			if err := unstructured.SetNestedField(obj.Object, spec.PoolVersion, "spec", "template", "spec", "version"); err != nil {
				return nil, err
			}
		}
		if spec.UpstreamPool {
			if err := useUpstreamPool(obj); err != nil {
				return nil, err
			}
		}
		if err := customize(obj, spec); err != nil {
			return nil, fmt.Errorf("customizing %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return objs, nil
}

// customize applies spec's settings for the test tier to the template's objects; the management
// plane's webhooks default them as they would any user's.
func customize(obj *unstructured.Unstructured, spec ClusterSpec) error {
	var typed any
	var change func()
	switch obj.GetKind() {
	case "KubeadmControlPlane":
		kcp := &controlplanev1.KubeadmControlPlane{}
		typed, change = kcp, func() {
			if spec.SkipAddons {
				skipAddons(kcp)
			}
			if spec.KubeadmTimeout > 0 {
				seconds := ptr.To(int32(spec.KubeadmTimeout.Seconds()))
				for _, t := range []*bootstrapv1.Timeouts{&kcp.Spec.KubeadmConfigSpec.InitConfiguration.Timeouts, &kcp.Spec.KubeadmConfigSpec.JoinConfiguration.Timeouts} {
					t.ControlPlaneComponentHealthCheckSeconds, t.KubeletHealthCheckSeconds, t.EtcdAPICallSeconds = seconds, seconds, seconds
				}
				// A control-plane join waits for its kubelet's TLS bootstrap against the node's
				// own kube-apiserver, which a busy host starts minutes late.
				kcp.Spec.KubeadmConfigSpec.JoinConfiguration.Timeouts.TLSBootstrapSeconds = seconds
			}
		}
	case "DockerMachineTemplate":
		dmt := &capdv1.DockerMachineTemplate{} //nolint:staticcheck // CAPD v1.14's DockerMachineTemplate, which the template uses
		typed, change = dmt, func() {
			if spec.ControlPlaneBootstrapTimeout > 0 {
				dmt.Spec.Template.Spec.BootstrapTimeout = &metav1.Duration{Duration: spec.ControlPlaneBootstrapTimeout}
			}
		}
	default:
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, typed); err != nil {
		return err
	}
	change()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		return err
	}
	obj.Object = content
	return nil
}

// useUpstreamPool turns the template's CAPDMP DockerMachinePool, and the MachinePool's reference
// to it, into upstream CAPD's DockerMachinePool of the same name, which makes its containers from
// kindest/node:<MachinePool version>, and leaves the node's name to kubeadm.
func useUpstreamPool(obj *unstructured.Unstructured) error {
	switch {
	case obj.GetKind() == "MachinePool":
		return unstructured.SetNestedField(obj.Object, capdv1.GroupVersion.Group, "spec", "template", "spec", "infrastructureRef", "apiGroup")
	case obj.GetKind() == "DockerMachinePool" && obj.GroupVersionKind().Group == infrav1.GroupVersion.Group:
		obj.SetAPIVersion(capdv1.GroupVersion.String())
		obj.Object["spec"] = map[string]any{"template": map[string]any{}}
	case obj.GetKind() == "KubeadmConfig":
		// CAPD runs the join without cloud-init's templating: kubeadm names the node after the
		// container's hostname by itself.
		unstructured.RemoveNestedField(obj.Object, "spec", "joinConfiguration", "nodeRegistration", "name")
	}
	return nil
}

func skipAddons(kcp *controlplanev1.KubeadmControlPlane) {
	if kcp.Annotations == nil {
		kcp.Annotations = map[string]string{}
	}
	kcp.Annotations[controlplanev1.SkipCoreDNSAnnotation] = ""
	kcp.Annotations[controlplanev1.SkipKubeProxyAnnotation] = ""
	init := &kcp.Spec.KubeadmConfigSpec.InitConfiguration
	init.SkipPhases = append(init.SkipPhases, "addon/coredns", "addon/kube-proxy")
	// A control-plane join's preflight pulls every image kubeadm lists, CoreDNS included, which
	// init leaves out with its addon phase: node images built without CoreDNS (the blocking
	// tier's) would fail it. The control plane's own images are preloaded; CoreDNS is never run.
	join := &kcp.Spec.KubeadmConfigSpec.JoinConfiguration.NodeRegistration
	join.IgnorePreflightErrors = append(join.IgnorePreflightErrors, "ImagePull")
}

// WorkloadConfig is the admin rest config of the workload cluster (its kubeconfig Secret).
func (c *Cluster) WorkloadConfig(ctx context.Context) (*rest.Config, error) {
	// Cluster API deprecated remote.RESTConfig for ClusterCache; a test reads the Secret itself.
	raw, err := kubeconfig.FromSecret(ctx, c.w.Client, client.ObjectKey{Namespace: c.Namespace, Name: c.Name})
	if err != nil {
		return nil, err
	}
	return clientcmd.RESTConfigFromKubeConfig(raw)
}

// ControlPlaneStatus returns the KubeadmControlPlane, read live.
func (c *Cluster) ControlPlaneStatus(ctx context.Context) (*controlplanev1.KubeadmControlPlane, error) {
	return c.controlPlaneFrom(ctx, c.w.Client)
}

func (c *Cluster) controlPlaneFrom(ctx context.Context, r client.Reader) (*controlplanev1.KubeadmControlPlane, error) {
	kcp := &controlplanev1.KubeadmControlPlane{}
	err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.ControlPlane}, kcp)
	return kcp, err
}

func (c *Cluster) poolFrom(ctx context.Context, r client.Reader) (*infrav1.DockerMachinePool, error) {
	pool := &infrav1.DockerMachinePool{}
	err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Pool}, pool)
	return pool, err
}

// ControlPlaneAt tells whether every control-plane machine runs version and is ready.
func (c *Cluster) ControlPlaneAt(ctx context.Context, version string, replicas int32) (bool, string, error) {
	kcp, err := c.ControlPlaneStatus(ctx)
	if err != nil {
		return false, "", err
	}
	s := kcp.Status
	desc := fmt.Sprintf("KCP versions=%v replicas=%d ready=%d upToDate=%d initialized=%t",
		statusVersions(kcp), ptr.Deref(s.Replicas, 0), ptr.Deref(s.ReadyReplicas, 0), ptr.Deref(s.UpToDateReplicas, 0),
		ptr.Deref(s.Initialization.ControlPlaneInitialized, false))
	ok := len(s.Versions) == 1 && s.Versions[0].Version == version && ptr.Deref(s.Replicas, 0) == replicas &&
		ptr.Deref(s.ReadyReplicas, 0) == replicas && ptr.Deref(s.UpToDateReplicas, 0) == replicas
	return ok, desc, nil
}

// SetControlPlaneVersion writes version to the KubeadmControlPlane (conformance.ControlPlaneWriter).
// Template's control-plane machine template names its image by the version's tag, and templates
// are immutable: the KubeadmControlPlane gets, in the same write, a copy of its template at
// version, as Template applied again at that version makes it.
func (c *Cluster) SetControlPlaneVersion(ctx context.Context, version string) error {
	kcp, err := c.ControlPlaneStatus(ctx)
	if err != nil {
		return fmt.Errorf("reading KubeadmControlPlane %s: %w", c.ControlPlane, err)
	}
	patch := client.MergeFrom(kcp.DeepCopy())
	ref := &kcp.Spec.MachineTemplate.Spec.InfrastructureRef
	current, err := external.GetObjectFromContractVersionedRef(ctx, c.w.Client, *ref, c.Namespace)
	if err != nil {
		return fmt.Errorf("reading the control plane's machine template %s %s: %w", ref.Kind, ref.Name, err)
	}
	next, err := machineTemplateAt(current, kcp.Spec.Version, version)
	if err != nil {
		return err
	}
	if next != nil {
		if err := c.w.Client.Create(ctx, next); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating machine template %s %s: %w", next.GetKind(), next.GetName(), err)
		}
		ref.Name = next.GetName()
	}
	kcp.Spec.Version = version
	if err := c.w.Client.Patch(ctx, kcp, patch); err != nil {
		return fmt.Errorf("writing version %s to KubeadmControlPlane %s: %w", version, kcp.Name, err)
	}
	return nil
}

// machineTemplateAt returns the copy of a control plane's machine template, at version from,
// that runs version to: its customImage and its name, which both end in the version, end in to
// (a name that does not gets "-<to>"). A template without a customImage runs whatever CAPD picks
// for the Machine's version: nil, nothing to copy.
func machineTemplateAt(template *unstructured.Unstructured, from, to string) (*unstructured.Unstructured, error) {
	imagePath := []string{"spec", "template", "spec", "customImage"}
	image, _, err := unstructured.NestedString(template.Object, imagePath...)
	if err != nil || image == "" {
		return nil, err
	}
	if !strings.HasSuffix(image, ":"+from) {
		return nil, fmt.Errorf("%s %s runs image %s, not one tagged with the control plane's version %s", template.GetKind(), template.GetName(), image, from)
	}
	next := &unstructured.Unstructured{Object: map[string]any{"spec": runtime.DeepCopyJSONValue(template.Object["spec"])}}
	next.SetAPIVersion(template.GetAPIVersion())
	next.SetKind(template.GetKind())
	next.SetNamespace(template.GetNamespace())
	next.SetLabels(template.GetLabels())
	next.SetOwnerReferences(template.GetOwnerReferences())
	if name, ok := strings.CutSuffix(template.GetName(), from); ok {
		next.SetName(name + to)
	} else {
		next.SetName(template.GetName() + "-" + to)
	}
	if err := unstructured.SetNestedField(next.Object, strings.TrimSuffix(image, from)+to, imagePath...); err != nil {
		return nil, err
	}
	return next, nil
}

// LastRemediation says when KCP last replaced a control-plane Machine the MachineHealthCheck
// found unhealthy, and which; ok is false when it never did.
func (c *Cluster) LastRemediation(ctx context.Context) (machine string, at time.Time, retries int32, ok bool, err error) {
	kcp, err := c.ControlPlaneStatus(ctx)
	if err != nil {
		return "", time.Time{}, 0, false, err
	}
	r := kcp.Status.LastRemediation
	if r.Machine == "" {
		return "", time.Time{}, 0, false, nil
	}
	return r.Machine, r.Time.Time, ptr.Deref(r.RetryCount, 0), true, nil
}

// ControlPlaneMachineConditions lists, for a wait that timed out, every condition of the control
// plane's Machines and their DockerMachines that is not in its healthy state: where a rollout
// stalled, which KCP's counts do not say.
func (c *Cluster) ControlPlaneMachineConditions(ctx context.Context) ([]string, error) {
	machines := &clusterv1.MachineList{}
	if err := c.w.Client.List(ctx, machines, client.InNamespace(c.Namespace),
		client.MatchingLabels{clusterv1.MachineControlPlaneNameLabel: c.ControlPlane}); err != nil {
		return nil, fmt.Errorf("listing the control plane's Machines: %w", err)
	}
	var lines []string
	for _, m := range machines.Items {
		lines = append(lines, notHealthy("Machine "+m.Name, m.Status.Conditions)...)
		dm := &capdv1.DockerMachine{} //nolint:staticcheck // CAPD v1.14's DockerMachine, which the template uses
		if err := c.w.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: m.Spec.InfrastructureRef.Name}, dm); err != nil {
			lines = append(lines, fmt.Sprintf("DockerMachine %s: %v", m.Spec.InfrastructureRef.Name, err))
			continue
		}
		lines = append(lines, notHealthy("DockerMachine "+dm.Name, dm.Status.Conditions)...)
	}
	return lines, nil
}

// negativePolarity are the condition types that are healthy when False.
var negativePolarity = map[string]bool{
	clusterv1.PausedCondition: true, clusterv1.DeletingCondition: true,
	clusterv1.MachineUpdatingCondition: true, clusterv1.RemediatingCondition: true,
}

// notHealthy describes each condition not in its healthy state, with the first line of its
// message and the line of an error: CAPD's messages go on with a command's whole output.
func notHealthy(object string, conditions []metav1.Condition) []string {
	const maxLine = 200
	var lines []string
	for _, cond := range conditions {
		healthy := metav1.ConditionTrue
		if negativePolarity[cond.Type] {
			healthy = metav1.ConditionFalse
		}
		if cond.Status == healthy {
			continue
		}
		first, rest, _ := strings.Cut(strings.TrimSpace(cond.Message), "\n")
		message := cut(first, maxLine)
		// CAPD puts a failed bootstrap command's error on a line of its own after the command.
		for line := range strings.Lines(rest) {
			if strings.HasPrefix(line, "ERROR: ") {
				message += " / " + cut(strings.TrimSpace(line), maxLine)
				break
			}
		}
		lines = append(lines, fmt.Sprintf("%s %s=%s %s: %s", object, cond.Type, cond.Status, cond.Reason, message))
	}
	return lines
}

// cut shortens s to n runes and says so.
func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "..."
	}
	return s
}

// statusVersions is the KubeadmControlPlane's status.versions: the machines' versions, which the
// gate reads through the contract.
func statusVersions(kcp *controlplanev1.KubeadmControlPlane) []string {
	versions := make([]string, 0, len(kcp.Status.Versions))
	for _, v := range kcp.Status.Versions {
		versions = append(versions, v.Version)
	}
	return versions
}

// Delete deletes the Cluster, waits for Cluster API to remove every machine, and checks that no
// container of the cluster is left; leftovers are removed and reported as an error.
func (c *Cluster) Delete(ctx context.Context, timeout time.Duration) error {
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name}}
	if err := c.w.Client.Delete(ctx, cluster); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	waitErr := clusterops.WaitFor(ctx, timeout, nil, func(ctx context.Context) (bool, string, error) {
		err := c.w.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)
		if apierrors.IsNotFound(err) {
			return true, "deleted", nil
		}
		return false, "Cluster still exists", err
	})
	left, err := c.Containers(ctx)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return errors.Join(waitErr, fmt.Errorf("containers left after deleting Cluster %s (removed now): %v", c.Name, left),
			c.w.RemoveClusterContainers(ctx, c.Name))
	}
	return waitErr
}

// RemoveClusterContainers removes every container of cluster name (kind's cluster label), with
// their volumes: the way out when the management plane cannot delete the cluster any more.
func (w *World) RemoveClusterContainers(ctx context.Context, name string) error {
	containers, err := w.engine.List(ctx, map[string]string{container.KindClusterLabel: name})
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range containers {
		errs = append(errs, w.engine.Delete(ctx, c.Name))
	}
	return errors.Join(errs...)
}

// Containers lists the names of the cluster's containers (CAPD's and CAPDMP's carry kind's
// cluster label).
func (c *Cluster) Containers(ctx context.Context) ([]string, error) {
	containers, err := c.w.engine.List(ctx, map[string]string{container.KindClusterLabel: c.Name})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(containers))
	for _, ct := range containers {
		names = append(names, ct.Name)
	}
	slices.Sort(names)
	return names, nil
}
