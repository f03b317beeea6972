package controllers

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/test/builder"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// logRecorder is a logr sink that keeps every line, so that a test can assert what was logged.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 10})
}

func (l *logRecorder) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// TestPoolsOfClusterListError checks that the map functions, which cannot return an error, log a
// failed List instead of dropping it (issue 15, item 9).
func TestPoolsOfClusterListError(t *testing.T) {
	controlPlane := &unstructured.Unstructured{}
	controlPlane.SetGroupVersionKind(builder.ControlPlaneGroupVersion.WithKind(builder.GenericControlPlaneKind))
	controlPlane.SetNamespace(testNamespace)
	controlPlane.SetName("cp")
	controlPlane.SetLabels(map[string]string{clusterv1.ClusterNameLabel: testCluster})
	kubeadmConfig := &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{
		Namespace: testNamespace, Name: "mp-config", Labels: map[string]string{clusterv1.ClusterNameLabel: testCluster},
	}}
	pool := &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{
		Namespace: testNamespace, Name: testPool, Labels: map[string]string{clusterv1.ClusterNameLabel: testCluster},
	}}

	tests := []struct {
		name      string
		mapFunc   func(*DockerMachinePoolReconciler, context.Context, client.Object) []reconcile.Request
		obj       client.Object
		listFails bool
		want      []reconcile.Request
	}{
		{
			name:    "control plane: the pools of its Cluster",
			mapFunc: (*DockerMachinePoolReconciler).controlPlaneToPools,
			obj:     controlPlane,
			want:    []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: testPool}}},
		},
		{
			name:      "control plane: List fails",
			mapFunc:   (*DockerMachinePoolReconciler).controlPlaneToPools,
			obj:       controlPlane,
			listFails: true,
		},
		{
			name:    "KubeadmConfig: the pools of its Cluster",
			mapFunc: (*DockerMachinePoolReconciler).kubeadmConfigToPools,
			obj:     kubeadmConfig,
			want:    []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: testPool}}},
		},
		{
			name:      "KubeadmConfig: List fails",
			mapFunc:   (*DockerMachinePoolReconciler).kubeadmConfigToPools,
			obj:       kubeadmConfig,
			listFails: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			clientBuilder := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(pool.DeepCopy())
			if tt.listFails {
				clientBuilder = clientBuilder.WithInterceptorFuncs(interceptor.Funcs{
					List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
						return errors.New("cache not synced")
					},
				})
			}
			r := &DockerMachinePoolReconciler{Client: clientBuilder.Build()}
			logs := &logRecorder{}
			ctx := ctrl.LoggerInto(context.Background(), logs.logger())

			got := tt.mapFunc(r, ctx, tt.obj)

			g.Expect(got).To(Equal(tt.want))
			if !tt.listFails {
				g.Expect(logs.all()).To(BeEmpty())
				return
			}
			g.Expect(logs.all()).To(HaveLen(1))
			line := logs.all()[0]
			g.Expect(line).To(ContainSubstring(`"msg"="Failed to list DockerMachinePools`))
			g.Expect(line).To(ContainSubstring(`"error"="cache not synced"`))
			g.Expect(line).To(ContainSubstring(`"Cluster"={"name"="` + testCluster + `" "namespace"="` + testNamespace + `"}`))
		})
	}
}

// TestMachineToPool: a Machine of the pool's MachinePool Machines maps to its pool through its
// DockerMachinePoolMachine; other Machines map to nothing.
func TestMachineToPool(t *testing.T) {
	infraMachine := poolMachine("workers-abc")
	tests := []struct {
		name    string
		machine *clusterv1.Machine
		want    []reconcile.Request
	}{
		{name: "a pool Machine", machine: ownerMachine(infraMachine.Name),
			want: []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: testPool}}}},
		{name: "its DockerMachinePoolMachine is gone", machine: ownerMachine("workers-gone")},
		{name: "another provider's Machine", machine: func() *clusterv1.Machine {
			m := ownerMachine(infraMachine.Name)
			m.Spec.InfrastructureRef.APIGroup = "infrastructure.cluster.x-k8s.io"
			return m
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r := &DockerMachinePoolReconciler{Client: fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(infraMachine.DeepCopy()).Build()}
			g.Expect(r.machineToPool(context.Background(), tt.machine)).To(Equal(tt.want))
		})
	}
}

// TestRemediationRequested: the pool follows a Machine's health-check conditions only.
func TestRemediationRequested(t *testing.T) {
	unhealthy := []metav1.Condition{
		machineCondition(clusterv1.MachineHealthCheckSucceededCondition, metav1.ConditionFalse, clusterv1.MachineHealthCheckNodeStartupTimeoutReason),
		machineCondition(clusterv1.MachineOwnerRemediatedCondition, metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason),
	}
	healthy := []metav1.Condition{machineCondition(clusterv1.MachineHealthCheckSucceededCondition, metav1.ConditionTrue, clusterv1.MachineHealthCheckSucceededReason)}
	tests := []struct {
		name     string
		old, new []metav1.Condition
		want     bool
	}{
		{name: "handed to its owner", old: healthy, new: unhealthy, want: true},
		{name: "healthy again", old: unhealthy, new: healthy, want: true},
		{name: "first health check", new: healthy, want: true},
		{name: "no change of health", old: healthy, new: append([]metav1.Condition{machineCondition(clusterv1.ReadyCondition, metav1.ConditionTrue, "Ready")}, healthy...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			e := event.UpdateEvent{ObjectOld: ownerMachine("m", tt.old...), ObjectNew: ownerMachine("m", tt.new...)}
			g.Expect(remediationRequested{}.Update(e)).To(Equal(tt.want))
		})
	}
}
