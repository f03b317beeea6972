package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/bootstrap"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// TestDockerMachinePoolMachineBootstrap: the bootstrap runs in the container, detached, and every
// reconcile reads its state from the container, so a reconcile never waits for it and a restarted
// controller picks it up where it is.
func TestDockerMachinePoolMachineBootstrap(t *testing.T) {
	const name = "workers-abcde"
	running := func(seconds string) container.ExecResult {
		return container.ExecResult{ExitCode: 83, Stdout: []byte(seconds + "\n")}
	}
	tests := []struct {
		name        string
		noContainer bool
		stopped     bool
		// status is what the container's bootstrap status command answers; after a Stop it
		// answers afterStop.
		status          container.ExecResult
		afterStop       container.ExecResult
		wantProvisioned bool
		wantReason      string
		wantMessage     string
		wantStarted     bool // the runner was staged, with the join, and launched
		wantStopped     bool
		wantRequeue     time.Duration
		// containerVersion is the container's version label: v1.31.0 unless set. The test data's
		// JoinConfiguration is v1beta4, which a kubeadm of 1.30 cannot read.
		containerVersion string
		// preLoadImages are the pool's; the engine has busybox:1.36 and nothing else of them.
		preLoadImages []string
		wantSaves     int64 // SaveImages calls
	}{
		{name: "preLoadImages the engine has: saved, then the bootstrap starts", status: container.ExecResult{ExitCode: 80},
			preLoadImages: []string{"busybox:1.36"}, wantSaves: 1,
			wantReason: infrav1.BootstrappingReason, wantStarted: true, wantRequeue: 500 * time.Millisecond},
		{name: "a preLoadImages entry that is no image reference: failed without asking the engine", status: container.ExecResult{ExitCode: 80},
			preLoadImages: []string{"busybox:1.36", "Registry/UPPER:1"},
			wantReason:    infrav1.BootstrapFailedReason, wantMessage: `Loading images failed: spec.template.preLoadImages[1]: "Registry/UPPER:1" is not a valid image reference`},
		{name: "a preLoadImages entry that is an image ID: failed without asking the engine", status: container.ExecResult{ExitCode: 80},
			preLoadImages: []string{"sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"},
			wantReason:    infrav1.BootstrapFailedReason, wantMessage: "an image ID, not a name"},
		{name: "fresh container: starts the bootstrap and comes back to follow it", status: container.ExecResult{ExitCode: 80},
			wantReason: infrav1.BootstrappingReason, wantStarted: true, wantRequeue: 500 * time.Millisecond},
		{name: "already bootstrapped (sentinel): not run again", status: container.ExecResult{ExitCode: 0},
			wantProvisioned: true, wantReason: infrav1.ContainerProvisionedReason},
		{name: "a bootstrap that runs (a restarted controller finds it): waits, starts nothing", status: running("42"),
			wantReason: infrav1.BootstrappingReason, wantMessage: "stopped if it runs longer than 3m0s", wantRequeue: 3 * time.Second},
		{name: "a bootstrap that has just started: looked at again soon", status: running("1"),
			wantReason: infrav1.BootstrappingReason, wantRequeue: 500 * time.Millisecond},
		{name: "a bootstrap that has run 4s: looked at again in 2s", status: running("4"),
			wantReason: infrav1.BootstrappingReason, wantRequeue: 2 * time.Second},
		{name: "a bootstrap past the pool's timeout: stopped, failed with the step it was in",
			status:      running("181"),
			afterStop:   container.ExecResult{ExitCode: 84, Stdout: []byte("stopped\nruncmd[1]\n[kubelet-start] Waiting for the kubelet to perform the TLS Bootstrap\n")},
			wantReason:  infrav1.BootstrapFailedReason,
			wantMessage: "The bootstrap did not finish within 3m0s; Bootstrap step runcmd[1] was stopped: [kubelet-start] Waiting for the kubelet",
			wantStopped: true},
		{name: "a bootstrap stopped at the timeout, read by a reconcile of the machine from before its patch: failed, the timeout named",
			status:      container.ExecResult{ExitCode: 84, Stdout: []byte("stopped\nruncmd[0]\n")},
			wantReason:  infrav1.BootstrapFailedReason,
			wantMessage: "The bootstrap did not finish within 3m0s; Bootstrap step runcmd[0] was stopped"},
		{name: "a failed step: failed with the step named and its output",
			status:      container.ExecResult{ExitCode: 84, Stdout: []byte("1\nruncmd[1]\nerror execution phase preflight\n")},
			wantReason:  infrav1.BootstrapFailedReason,
			wantMessage: "Bootstrap step runcmd[1] exited with code 1: error execution phase preflight"},
		{name: "a failed step that printed a token, a certificate key and a PEM key: failed, the secrets redacted",
			status: container.ExecResult{ExitCode: 84, Stdout: []byte("1\nkubeadm join --token abcdef.0123456789abcdef --certificate-key 6d1f0c\n" +
				"[discovery] token abcdef.0123456789abcdef rejected\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMx\n-----END RSA PRIVATE KEY-----\n")},
			wantReason:  infrav1.BootstrapFailedReason,
			wantMessage: "Bootstrap step kubeadm join --token <redacted> --certificate-key <redacted> exited with code 1: [discovery] token <redacted bootstrap token> rejected\n<redacted PEM block>"},
		{name: "a runner gone without a result: failed, not run twice", status: container.ExecResult{ExitCode: 81},
			wantReason: infrav1.BootstrapFailedReason, wantMessage: "it is not run twice"},
		{name: "systemd still booting: waits, runs nothing", status: container.ExecResult{ExitCode: 82},
			wantReason: infrav1.WaitingForNodeBootReason, wantRequeue: nodeBootRequeue},
		{name: "container gone", noContainer: true, wantReason: infrav1.ContainerNotFoundReason},
		{name: "container stopped", stopped: true, wantReason: infrav1.ContainerNotRunningReason},
		{name: "data re-rendered since the pool checked it, for a kubeadm this node's cannot read: waits, runs nothing",
			containerVersion: "v1.30.0", status: container.ExecResult{ExitCode: 80},
			wantReason: infrav1.WaitingForBootstrapDataReason, wantRequeue: unreadableDataRequeue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}
			objs := w.objects()
			objs = append(objs, poolMachine(name))
			for _, o := range objs {
				if pool, ok := o.(*infrav1.DockerMachinePool); ok {
					pool.Spec.Template.PreLoadImages = tt.preLoadImages
				}
			}
			rt := fakeruntime.NewWithNodeImages()
			rt.AddImage("busybox:1.36")
			if !tt.noContainer {
				version := "v1.31.0"
				if tt.containerVersion != "" {
					version = tt.containerVersion
				}
				c := nodeContainer(g, name, version, time.Now())
				c.Running = !tt.stopped
				rt.Add(c)
			}
			var runner []byte
			launched, stopped := false, false
			rt.ExecHandler = func(_ container.Container, cmd []string, stdin []byte) (container.ExecResult, error) {
				switch {
				case slices.Equal(cmd, bootstrap.StatusCommand().Argv):
					if stopped {
						return tt.afterStop, nil
					}
					return tt.status, nil
				case containsArg(cmd, "setsid"):
					// The staging archive, with the runner, arrives on the launch's stdin.
					launched, runner = true, stdin
				case containsArg(cmd, "kill -TERM"):
					stopped = true
				}
				return container.ExecResult{}, nil
			}
			c := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(objs...).
				WithStatusSubresource(&infrav1.DockerMachinePool{}, &infrav1.DockerMachinePoolMachine{}).Build()
			events := record.NewFakeRecorder(100)
			r := &DockerMachinePoolMachineReconciler{Client: c, APIReader: c, Runtime: rt, recorder: events}
			var log strings.Builder
			ctx := ctrl.LoggerInto(context.Background(), funcr.New(func(prefix, args string) { log.WriteString(prefix + " " + args + "\n") }, funcr.Options{Verbosity: 10}))

			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: name}})
			g.Expect(err).ToNot(HaveOccurred())
			if tt.wantRequeue > 0 {
				g.Expect(res.RequeueAfter).To(Equal(tt.wantRequeue))
			}

			m := &infrav1.DockerMachinePoolMachine{}
			g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: name}, m)).To(Succeed())
			g.Expect(ptr.Deref(m.Status.Initialization.Provisioned, false)).To(Equal(tt.wantProvisioned))
			cond := conditions.Get(m, infrav1.ContainerProvisionedCondition)
			g.Expect(cond).ToNot(BeNil())
			g.Expect(cond.Reason).To(Equal(tt.wantReason), cond.Message)
			g.Expect(cond.Message).To(ContainSubstring(tt.wantMessage))
			g.Expect(launched).To(Equal(tt.wantStarted))
			g.Expect(stopped).To(Equal(tt.wantStopped))
			g.Expect(rt.Calls()["SaveImages"]).To(Equal(tt.wantSaves))
			if tt.wantStarted {
				g.Expect(string(runner)).To(ContainSubstring("kubeadm join"))
				g.Expect(m.Labels).To(HaveKey(infrav1.BootstrapDataHashLabel), "the data the container runs is recorded")
			}
			close(events.Events)
			var recorded []string
			for e := range events.Events {
				recorded = append(recorded, e)
			}
			for _, secret := range []string{"0123456789abcdef", "6d1f0c", "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMx"} {
				g.Expect(cond.Message).ToNot(ContainSubstring(secret), "bootstrap secrets never reach conditions")
				g.Expect(recorded).ToNot(ContainElement(ContainSubstring(secret)), "nor events")
				g.Expect(log.String()).ToNot(ContainSubstring(secret), "nor the log")
			}
			g.Expect(conditions.Get(m, infrav1.ReadyCondition)).ToNot(BeNil())
		})
	}
}

// poolMachine is a machine of the test pool as the pool makes it, reconciled once already.
func poolMachine(name string) *infrav1.DockerMachinePoolMachine {
	return &infrav1.DockerMachinePoolMachine{ObjectMeta: metav1.ObjectMeta{
		Namespace: testNamespace, Name: name,
		Labels:          map[string]string{clusterv1.ClusterNameLabel: testCluster},
		OwnerReferences: []metav1.OwnerReference{poolOwnerRef("pool-uid")},
		Finalizers:      []string{infrav1.MachinePoolMachineFinalizer},
	}, Status: infrav1.DockerMachinePoolMachineStatus{Conditions: []metav1.Condition{notPaused()}}}
}

// TestDockerMachinePoolMachineDelete: a machine being deleted removes its own container and
// releases its finalizer, with or without its Cluster.
func TestDockerMachinePoolMachineDelete(t *testing.T) {
	for _, clusterGone := range []bool{false, true} {
		t.Run(fmt.Sprintf("cluster gone: %t", clusterGone), func(t *testing.T) {
			g := NewWithT(t)
			const name = "workers-gone1"
			now := metav1.Now()
			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}
			var objs []client.Object
			for _, o := range w.objects() {
				if _, ok := o.(*clusterv1.Cluster); ok && clusterGone {
					continue
				}
				objs = append(objs, o)
			}
			objs = append(objs, &infrav1.DockerMachinePoolMachine{ObjectMeta: metav1.ObjectMeta{
				Namespace: testNamespace, Name: name, DeletionTimestamp: &now,
				Labels:          map[string]string{clusterv1.ClusterNameLabel: testCluster},
				OwnerReferences: []metav1.OwnerReference{poolOwnerRef("pool-uid")},
				Finalizers:      []string{infrav1.MachinePoolMachineFinalizer},
			}, Status: infrav1.DockerMachinePoolMachineStatus{Conditions: []metav1.Condition{notPaused()}}})
			rt := fakeruntime.NewWithNodeImages()
			rt.Add(nodeContainer(g, name, "v1.31.0", time.Now()))
			rt.Add(nodeContainer(g, "someone-elses", "v1.31.0", time.Now()))
			c := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(objs...).
				WithStatusSubresource(&infrav1.DockerMachinePoolMachine{}).Build()
			r := &DockerMachinePoolMachineReconciler{Client: c, APIReader: c, Runtime: rt}

			_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: name}})
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(rt.Containers()).To(HaveLen(1))
			g.Expect(rt.Containers()[0].Name).To(Equal("someone-elses"))
			// The finalizer is gone, so the object is.
			err = c.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: name}, &infrav1.DockerMachinePoolMachine{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "DockerMachinePoolMachine still exists: %v", err)
		})
	}
}

// TestDockerMachinePoolMachineForeignContainer: a DockerMachinePoolMachine named after a
// container its pool did not make (another cluster's CAPD node, another pool's container, or
// with no pool at all) never makes CAPDMP exec into that container or remove it.
func TestDockerMachinePoolMachineForeignContainer(t *testing.T) {
	const name = "other-cluster-control-plane"
	capdNode := container.Container{Name: name, Image: "kindest/node:v1.31.0", Running: true,
		Labels: map[string]string{"io.x-k8s.kind.cluster": "other-cluster", "io.x-k8s.kind.role": "control-plane"}}
	otherPools := container.Container{Name: name, Image: "kindest/node:v1.31.0", Running: true,
		Labels: map[string]string{infrav1.PoolUIDLabel: "other-pool-uid", infrav1.PoolNameLabel: testPool, infrav1.ClusterNameLabel: testCluster}}
	otherClusters := container.Container{Name: name, Image: "kindest/node:v1.31.0", Running: true,
		Labels: map[string]string{infrav1.PoolUIDLabel: "pool-uid", infrav1.PoolNameLabel: testPool, infrav1.ClusterNameLabel: "other-cluster"}}
	tests := []struct {
		name      string
		container container.Container
		owner     []metav1.OwnerReference
		deleting  bool
	}{
		{name: "CAPD's node of another cluster", container: capdNode, owner: []metav1.OwnerReference{poolOwnerRef("pool-uid")}},
		{name: "CAPD's node of another cluster, machine deleted", container: capdNode, owner: []metav1.OwnerReference{poolOwnerRef("pool-uid")}, deleting: true},
		{name: "another pool's container", container: otherPools, owner: []metav1.OwnerReference{poolOwnerRef("pool-uid")}},
		{name: "another pool's container, machine deleted", container: otherPools, owner: []metav1.OwnerReference{poolOwnerRef("pool-uid")}, deleting: true},
		{name: "a container of another Cluster", container: otherClusters, owner: []metav1.OwnerReference{poolOwnerRef("pool-uid")}},
		{name: "no owner pool", container: capdNode},
		{name: "no owner pool, machine deleted", container: capdNode, deleting: true},
		{name: "owner reference to a pool of another UID", container: capdNode, owner: []metav1.OwnerReference{poolOwnerRef("forged-uid")}, deleting: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}
			machine := &infrav1.DockerMachinePoolMachine{ObjectMeta: metav1.ObjectMeta{
				Namespace: testNamespace, Name: name,
				Labels:          map[string]string{clusterv1.ClusterNameLabel: testCluster},
				OwnerReferences: tt.owner,
				Finalizers:      []string{infrav1.MachinePoolMachineFinalizer},
			}, Status: infrav1.DockerMachinePoolMachineStatus{Conditions: []metav1.Condition{notPaused()}}}
			if tt.deleting {
				machine.DeletionTimestamp = ptr.To(metav1.Now())
			}
			rt := fakeruntime.NewWithNodeImages()
			rt.Add(tt.container)
			execs := 0
			rt.ExecHandler = func(container.Container, []string, []byte) (container.ExecResult, error) {
				execs++
				return container.ExecResult{}, nil
			}
			c := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(append(w.objects(), machine)...).
				WithStatusSubresource(&infrav1.DockerMachinePoolMachine{}).Build()
			recorder := record.NewFakeRecorder(10)
			r := &DockerMachinePoolMachineReconciler{Client: c, APIReader: c, Runtime: rt, recorder: recorder}

			_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(machine)})
			g.Expect(err).ToNot(HaveOccurred())

			g.Expect(rt.Containers()).To(ConsistOf(HaveField("Name", name)), "the container survives")
			g.Expect(execs).To(BeZero(), "nothing ran in the container")
			g.Expect(recorder.Events).To(Receive(ContainSubstring(infrav1.ContainerNotOwnedReason)))
			got := &infrav1.DockerMachinePoolMachine{}
			err = c.Get(context.Background(), client.ObjectKeyFromObject(machine), got)
			if tt.deleting {
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the object goes, without its container")
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			cond := conditions.Get(got, infrav1.ContainerProvisionedCondition)
			g.Expect(cond).ToNot(BeNil())
			g.Expect(cond.Reason).To(Equal(infrav1.ContainerNotOwnedReason))
			g.Expect(cond.Message).To(ContainSubstring(name))
		})
	}
}

func poolOwnerRef(uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "DockerMachinePool", Name: testPool, UID: uid}
}

func containsArg(cmd []string, s string) bool {
	return slices.ContainsFunc(cmd, func(arg string) bool { return strings.Contains(arg, s) })
}

func TestDockerMachinePoolMachineNodeProviderID(t *testing.T) {
	const name = "workers-node1"
	const providerID = "docker:////" + name
	tests := []struct {
		name        string
		node        *corev1.Node // in the workload cluster; nil: not registered
		wantReason  string
		wantID      string
		wantRequeue bool
		// wantKubelet is the Node's kubeletVersion recorded on the machine, and
		// wantKubeletReason the reason of its KubeletVersionAsLabelled condition.
		wantKubelet       string
		wantKubeletReason string
	}{
		{name: "Node not registered yet: waits and looks again", wantReason: infrav1.WaitingForNodeReason, wantRequeue: true},
		{name: "kubelet registered without providerID: set", node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}},
			wantReason: infrav1.NodeProviderIDSetReason, wantID: providerID},
		{name: "already set: left alone", node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}},
			wantReason: infrav1.NodeProviderIDSetReason, wantID: providerID},
		{name: "another providerID (immutable): reported, not overwritten", node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: "aws:///other"}},
			wantReason: infrav1.NodeProviderIDMismatchReason, wantID: "aws:///other"},
		{name: "kubelet of the labelled version: recorded", node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.31.0"}}},
			wantReason: infrav1.NodeProviderIDSetReason, wantID: providerID, wantKubelet: "v1.31.0", wantKubeletReason: infrav1.KubeletVersionMatchesReason},
		{name: "kubelet of another version than the image's label: recorded and reported", node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.32.1"}}},
			wantReason: infrav1.NodeProviderIDSetReason, wantID: providerID, wantKubelet: "v1.32.1", wantKubeletReason: infrav1.KubeletVersionMismatchReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 1, dataSecret: true}
			objs := append(w.objects(), &infrav1.DockerMachinePoolMachine{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: testNamespace, Name: name,
					Labels:          map[string]string{clusterv1.ClusterNameLabel: testCluster, infrav1.KubernetesVersionLabel: "v1.31.0"},
					OwnerReferences: []metav1.OwnerReference{poolOwnerRef("pool-uid")},
					Finalizers:      []string{infrav1.MachinePoolMachineFinalizer},
				},
				Spec: infrav1.DockerMachinePoolMachineSpec{ProviderID: providerID},
				Status: infrav1.DockerMachinePoolMachineStatus{
					Conditions:     []metav1.Condition{notPaused()},
					Initialization: infrav1.DockerMachinePoolMachineInitializationStatus{Provisioned: ptr.To(true)},
				},
			})
			rt := fakeruntime.NewWithNodeImages()
			rt.Add(nodeContainer(g, name, "v1.31.0", time.Now()))
			c := fake.NewClientBuilder().WithScheme(testScheme(g)).WithObjects(objs...).
				WithStatusSubresource(&infrav1.DockerMachinePoolMachine{}).Build()
			workloadBuilder := fake.NewClientBuilder()
			if tt.node != nil {
				workloadBuilder = workloadBuilder.WithObjects(tt.node)
			}
			workload := workloadBuilder.Build()
			r := &DockerMachinePoolMachineReconciler{Client: c, APIReader: c, Runtime: rt,
				ClusterCache: clustercache.NewFakeClusterCache(workload, client.ObjectKey{Namespace: testNamespace, Name: testCluster})}

			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: name}})
			g.Expect(err).ToNot(HaveOccurred())
			if tt.wantRequeue {
				g.Expect(res.RequeueAfter).To(BeNumerically(">", 0))
			} else {
				g.Expect(res.RequeueAfter).To(BeZero())
			}

			m := &infrav1.DockerMachinePoolMachine{}
			g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: name}, m)).To(Succeed())
			cond := conditions.Get(m, infrav1.NodeProviderIDCondition)
			g.Expect(cond).ToNot(BeNil())
			g.Expect(cond.Reason).To(Equal(tt.wantReason), cond.Message)
			if tt.node != nil {
				node := &corev1.Node{}
				g.Expect(workload.Get(context.Background(), client.ObjectKey{Name: name}, node)).To(Succeed())
				g.Expect(node.Spec.ProviderID).To(Equal(tt.wantID))
			}
			g.Expect(m.Status.NodeKubeletVersion).To(Equal(tt.wantKubelet))
			if tt.wantKubeletReason != "" {
				g.Expect(conditions.GetReason(m, infrav1.KubeletVersionCondition)).To(Equal(tt.wantKubeletReason))
			}
			ready := conditions.Get(m, infrav1.ReadyCondition)
			g.Expect(ready).ToNot(BeNil())
			wantReady := metav1.ConditionFalse
			if tt.wantReason == infrav1.NodeProviderIDSetReason {
				wantReady = metav1.ConditionTrue
			}
			g.Expect(ready.Status).To(Equal(wantReady))
		})
	}
}
