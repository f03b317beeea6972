package controllers

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// errEngineDown is what the Docker runtime returns when the engine does not answer in time.
var errEngineDown = fmt.Errorf("%w at unix:///run/docker.sock: context deadline exceeded", container.ErrEngineUnavailable)

// TestEngineUnavailable: a pool and a machine whose engine does not answer say so on Ready, and
// the reconcile fails so that it is retried with backoff; any other engine error does not claim
// the engine is down.
func TestEngineUnavailable(t *testing.T) {
	tests := []struct {
		name              string
		failing           string // the Runtime method that fails
		err               error
		wantReady         string
		wantCreatedReason string
	}{
		{name: "list does not answer", failing: "List", err: errEngineDown, wantReady: infrav1.EngineUnavailableReason},
		{name: "list fails otherwise", failing: "List", err: errors.New("permission denied"), wantReady: infrav1.InventoryUnknownReason},
		{name: "create does not answer", failing: "Create", err: errEngineDown,
			wantReady: infrav1.EngineUnavailableReason, wantCreatedReason: infrav1.EngineUnavailableReason},
		{name: "create refused by the engine", failing: "Create", err: errors.New("conflicting options"),
			wantCreatedReason: infrav1.ContainerCreateFailedReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
			rt.SetError(tt.failing, tt.err)
			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}
			r, _ := newTestReconciler(g, w.objects(), rt)

			_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: testPool}})
			g.Expect(err).To(MatchError(tt.err), "a failed call is retried with backoff")
			pool := &infrav1.DockerMachinePool{}
			g.Expect(r.Client.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: testPool}, pool)).To(Succeed())
			g.Expect(rt.Containers()).To(BeEmpty())
			if tt.wantReady != "" {
				ready := conditions.Get(pool, infrav1.ReadyCondition)
				g.Expect(ready).NotTo(BeNil())
				g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(ready.Reason).To(Equal(tt.wantReady), ready.Message)
				if tt.wantReady == infrav1.EngineUnavailableReason {
					g.Expect(ready.Message).To(ContainSubstring("unix:///run/docker.sock"), "says which engine")
				}
			}
			if tt.wantCreatedReason != "" {
				created := conditions.Get(pool, infrav1.MachinesCreatedCondition)
				g.Expect(created).NotTo(BeNil())
				g.Expect(created.Reason).To(Equal(tt.wantCreatedReason), created.Message)
			}
		})
	}

	t.Run("a machine whose engine does not answer", func(t *testing.T) {
		g := NewWithT(t)
		const name = "workers-abcde"
		w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}
		objs := append(w.objects(), poolMachine(name))
		rt := fakeruntime.NewWithNodeImages()
		rt.Add(nodeContainer(g, name, "v1.31.0", time.Now()))
		rt.SetError("Inspect", errEngineDown)
		c := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(objs...).
			WithStatusSubresource(&infrav1.DockerMachinePool{}, &infrav1.DockerMachinePoolMachine{}).Build()
		r := &DockerMachinePoolMachineReconciler{Client: c, APIReader: c, Runtime: rt, recorder: record.NewFakeRecorder(10)}

		_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: name}})
		g.Expect(err).To(MatchError(container.ErrEngineUnavailable))
		m := &infrav1.DockerMachinePoolMachine{}
		g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: name}, m)).To(Succeed())
		ready := conditions.Get(m, infrav1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(infrav1.EngineUnavailableReason), ready.Message)
	})
}
