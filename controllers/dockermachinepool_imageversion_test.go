package controllers

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
	"github.com/capdmp/capdmp/internal/nodeimage"
)

// TestImageVersionVerified: an image's tag is a claim; the pool starts a container of an image
// only once the image's content (/kind/version) says the same version, and no more of an image
// one of whose Nodes runs another kubelet. A retagged image, one that records no version, and one
// a Node contradicted start nothing; the check is read once per image ID.
func TestImageVersionVerified(t *testing.T) {
	const retagged = "registry.example/node:v1.31.0"
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name string
		// image sets up customImage on the engine.
		image func(rt *fakeruntime.Runtime)
		// image is the pool's customImage; retagged unless set.
		customImage string
		// contradicted adds a running container of the image whose Node runs v1.32.0.
		contradicted bool
		wantCreated  int
		wantReason   string
		wantMessage  string
	}{
		{name: "content agrees with the tag: created", image: func(rt *fakeruntime.Runtime) { rt.AddNodeImage(retagged) }, wantCreated: 4},
		{name: "a v1.32 image tagged v1.31.0: refused, nothing started",
			image:      func(rt *fakeruntime.Runtime) { rt.SetImageFile(retagged, nodeimage.VersionFile, []byte("v1.32.0\n")) },
			wantReason: infrav1.ImageVersionMismatchReason, wantMessage: "holds Kubernetes v1.32.0 by its /kind/version, not the v1.31.0"},
		{name: "tag@digest whose content is another version: the digest's content decides",
			customImage: retagged + "@" + digest,
			image: func(rt *fakeruntime.Runtime) {
				rt.SetImageFile(retagged+"@"+digest, nodeimage.VersionFile, []byte("v1.32.0"))
			},
			wantReason: infrav1.ImageVersionMismatchReason, wantMessage: "holds Kubernetes v1.32.0"},
		{name: "an image that records no version: refused",
			image:      func(rt *fakeruntime.Runtime) { rt.AddImage(retagged) },
			wantReason: infrav1.ImageVersionNotRecordedReason, wantMessage: "has no /kind/version"},
		{name: "a Node of the image runs another kubelet: no more of it",
			image:        func(rt *fakeruntime.Runtime) { rt.AddNodeImage(retagged) },
			contradicted: true,
			wantReason:   infrav1.ImageContradictedByNodeReason, wantMessage: "runs kubelet v1.32.0, not the v1.31.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			customImage := retagged
			if tt.customImage != "" {
				customImage = tt.customImage
			}
			rt := fakeruntime.New()
			tt.image(rt)
			w := world{controlPlaneVersions: []string{"v1.31.0"}, customImage: customImage, replicas: 4, dataSecret: true}
			objs := w.objects()
			var existing []string
			if tt.contradicted {
				id, err := rt.ImageID(t.Context(), customImage)
				g.Expect(err).ToNot(HaveOccurred())
				c := nodeContainer(g, "workers-first", "v1.31.0", time.Now().Add(-time.Hour))
				c.Image, c.ImageID = id, id
				c.Labels[infrav1.ImageLabel] = customImage
				rt.Add(c)
				m := joinedMachine(c)
				m.Status.NodeKubeletVersion = "v1.32.0"
				objs = append(objs, m)
				existing = append(existing, c.Name)
			}
			r, _ := newTestReconciler(g, objs, rt)
			recorder := record.NewFakeRecorder(50)
			r.recorder = recorder

			var pool *infrav1.DockerMachinePool
			for range 2 {
				pool = reconcilePool(g, r)
			}
			var created []container.Container
			for _, c := range rt.Containers() {
				if len(existing) == 0 || c.Name != existing[0] {
					created = append(created, c)
				}
			}
			g.Expect(created).To(HaveLen(tt.wantCreated))
			g.Expect(rt.Calls()["ReadImageFile"]).To(BeNumerically("==", 1), "the content is read once per image ID")
			if tt.wantReason == "" {
				id, err := rt.ImageID(t.Context(), customImage)
				g.Expect(err).ToNot(HaveOccurred())
				for _, c := range created {
					g.Expect(c.Image).To(Equal(id), "created from the image that was verified, by ID")
					g.Expect(c.Labels).To(HaveKeyWithValue(infrav1.ImageLabel, customImage))
				}
				return
			}
			cond := conditions.Get(pool, infrav1.MachinesCreatedCondition)
			g.Expect(cond).ToNot(BeNil())
			g.Expect(cond.Reason).To(Equal(tt.wantReason), cond.Message)
			g.Expect(cond.Message).To(ContainSubstring(tt.wantMessage))
			var warned bool
			for len(recorder.Events) > 0 {
				if e := <-recorder.Events; strings.HasPrefix(e, "Warning "+tt.wantReason) {
					warned = true
				}
			}
			g.Expect(warned).To(BeTrue(), "a warning event says why")
		})
	}
}
