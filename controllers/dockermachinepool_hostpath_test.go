package controllers

import (
	"cmp"
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/internal/hostpath"
)

// TestDockerMachinePoolMountsRecheckedAtCreation: a pool whose extraMounts the manager's
// --allowed-host-paths does not allow (admitted under a wider flag, or stored while webhooks were
// off), or that Docker would read otherwise than written (a ":" in a path) or refuse (a container
// path where every node mounts something of its own), gets no container, says why on
// MachinesCreated and in a warning event naming the field, and waits for an edit rather than
// polling.
func TestDockerMachinePoolMountsRecheckedAtCreation(t *testing.T) {
	tests := []struct {
		name        string
		allowed     []string // nil: the reconciler's zero Policy, the default
		mounts      []infrav1.Mount
		wantCreated int
		// wantReason is MachinesCreated's reason when nothing is created; HostPathNotAllowed when
		// empty.
		wantReason  string
		wantMessage []string // substrings of MachinesCreated's message and the event when refused
	}{
		{
			name:        "no extraMounts: created under the default policy",
			wantCreated: 2,
		},
		{
			name:        "a host path the default policy does not allow: nothing created",
			mounts:      []infrav1.Mount{{ContainerPath: "/data", HostPath: "/srv/data"}},
			wantMessage: []string{"Not creating 2 containers", `spec.template.extraMounts[0].hostPath: host path "/srv/data" is not allowed`, "--allowed-host-paths is empty"},
		},
		{
			name:        "host paths at and below an allowed one: created with the mounts",
			allowed:     []string{"/srv"},
			mounts:      []infrav1.Mount{{ContainerPath: "/data", HostPath: "/srv/data"}, {ContainerPath: "/srv", HostPath: "/srv", ReadOnly: true}},
			wantCreated: 2,
		},
		{
			name:        "one mount of two outside the allowed paths: nothing created, the mount named",
			allowed:     []string{"/srv"},
			mounts:      []infrav1.Mount{{ContainerPath: "/data", HostPath: "/srv/data"}, {ContainerPath: "/etc/host", HostPath: "/etc"}},
			wantMessage: []string{`spec.template.extraMounts[1].hostPath: host path "/etc" is not at or below any of --allowed-host-paths=/srv`},
		},
		{
			name:        "the Docker socket, though its parent is allowed: nothing created",
			allowed:     []string{"/var"},
			mounts:      []infrav1.Mount{{ContainerPath: "/var/run/docker.sock", HostPath: "/var/run/docker.sock"}},
			wantMessage: []string{`host path "/var/run/docker.sock" is /var/run/docker.sock, which no pool may mount whatever --allowed-host-paths says`},
		},
		{
			name:        "a path with a .. element that reads as allowed: nothing created",
			allowed:     []string{"/srv"},
			mounts:      []infrav1.Mount{{ContainerPath: "/host", HostPath: "/srv/../etc"}},
			wantMessage: []string{`host path "/srv/../etc" has a ".." element`},
		},
		{
			name:        "a container path with bind options after a \":\"",
			allowed:     []string{"/srv"},
			mounts:      []infrav1.Mount{{ContainerPath: "/data", HostPath: "/srv/data"}, {ContainerPath: "/proc:ro", HostPath: "/srv/proc"}},
			wantReason:  infrav1.ExtraMountInvalidReason,
			wantMessage: []string{`spec.template.extraMounts[1].containerPath: container path "/proc:ro" contains ":"`},
		},
		{
			name:        "a host path with a \":\" Docker would read as the container path",
			allowed:     []string{"/srv"},
			mounts:      []infrav1.Mount{{ContainerPath: "/data", HostPath: "/srv/a:/b"}},
			wantReason:  infrav1.ExtraMountInvalidReason,
			wantMessage: []string{`spec.template.extraMounts[0].hostPath: host path "/srv/a:/b" contains ":"`},
		},
		{
			name:        "a container path where every node has a tmpfs",
			allowed:     []string{"/srv"},
			mounts:      []infrav1.Mount{{ContainerPath: "/tmp", HostPath: "/srv/tmp"}},
			wantReason:  infrav1.ExtraMountInvalidReason,
			wantMessage: []string{`spec.template.extraMounts[0].containerPath: container path "/tmp"`},
		},
		{
			name:        "a container path where every node mounts the host's kernel modules",
			allowed:     []string{"/srv"},
			mounts:      []infrav1.Mount{{ContainerPath: "/lib/modules/", HostPath: "/srv/modules"}},
			wantReason:  infrav1.ExtraMountInvalidReason,
			wantMessage: []string{`spec.template.extraMounts[0].containerPath: container path "/lib/modules/"`},
		},
		{
			name:    "an invalid mount and a host path the manager does not allow: both named",
			allowed: []string{"/srv"},
			mounts: []infrav1.Mount{
				{ContainerPath: "/run", HostPath: "/srv/run"},
				{ContainerPath: "/etc/host", HostPath: "/etc"},
			},
			wantReason: infrav1.ExtraMountInvalidReason,
			wantMessage: []string{
				`spec.template.extraMounts[0].containerPath: container path "/run"`,
				`spec.template.extraMounts[1].hostPath: host path "/etc" is not at or below any of --allowed-host-paths=/srv`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			w := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true}
			objs := w.objects()
			pool := objs[len(objs)-1].(*infrav1.DockerMachinePool)
			pool.Spec.Template.ExtraMounts = tt.mounts
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
			r, _ := newTestReconciler(g, objs, rt)
			if tt.allowed != nil {
				policy, err := hostpath.NewPolicy(tt.allowed)
				g.Expect(err).ToNot(HaveOccurred())
				r.HostPaths = policy
			}
			events := record.NewFakeRecorder(10)
			r.recorder = events

			result, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: testPool}})
			g.Expect(err).ToNot(HaveOccurred())
			got := &infrav1.DockerMachinePool{}
			g.Expect(r.Client.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: testPool}, got)).To(Succeed())
			created := conditions.Get(got, infrav1.MachinesCreatedCondition)
			g.Expect(created).ToNot(BeNil())

			g.Expect(rt.Containers()).To(HaveLen(tt.wantCreated))
			if len(tt.wantMessage) == 0 {
				g.Expect(created.Status).To(Equal(metav1.ConditionTrue), created.Message)
				for _, c := range rt.Containers() {
					spec, ok := rt.Spec(c.Name)
					g.Expect(ok).To(BeTrue())
					for _, m := range tt.mounts {
						g.Expect(spec.Mounts).To(ContainElement(container.Mount{Source: m.HostPath, Target: m.ContainerPath, ReadOnly: m.ReadOnly}))
					}
				}
				return
			}

			g.Expect(rt.Calls()["Create"]).To(BeZero(), "no container is created")
			g.Expect(created.Status).To(Equal(metav1.ConditionFalse))
			wantReason := cmp.Or(tt.wantReason, infrav1.HostPathNotAllowedReason)
			g.Expect(created.Reason).To(Equal(wantReason))
			// A pool without containers is looked at again only to follow the engine's machine.
			g.Expect(result.RequeueAfter).To(Equal(DefaultHostPeriod), "an edit of the pool, not a timer, changes the answer")
			var event string
			g.Expect(events.Events).To(Receive(&event))
			g.Expect(event).To(HavePrefix(corev1.EventTypeWarning + " " + wantReason + " "))
			for _, want := range tt.wantMessage {
				g.Expect(created.Message).To(ContainSubstring(want))
				g.Expect(event).To(ContainSubstring(want))
			}
		})
	}
}
