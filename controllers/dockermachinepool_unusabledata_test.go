package controllers

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	fakeruntime "github.com/capdmp/capdmp/internal/container/fake"
)

// TestUnusableBootstrapDataHoldsCreationBack: data no container can be bootstrapped with (a
// KubeadmConfig template past the rendering budget, gzip content past its limit) costs the
// reconcile little, and creates no container: the pool says why on BootstrapDataFresh and
// MachinesCreated, naming the file and the limit.
func TestUnusableBootstrapDataHoldsCreationBack(t *testing.T) {
	const joinConfigPath = "/run/kubeadm/kubeadm-join-config.yaml"
	tests := []struct {
		name string
		// template is the content of a contentFormat Template file of the KubeadmConfig that
		// renders the data, at the path of the data's join configuration.
		template string
		// extraFile is a write_files entry added to the data.
		extraFile   string
		wantMessage []string
	}{
		{
			name:        "a template past the rendering budget",
			template:    "{{range 1000000}}{{range 1000000}}{{end}}{{end}}",
			wantMessage: []string{"file " + joinConfigPath, "50000 steps"},
		},
		{
			name:        "gzip content past its limit",
			extraFile:   "- path: /etc/big\n  encoding: gz+b64\n  content: " + gzipBase64Zeros(t, 16<<20+1) + "\n",
			wantMessage: []string{"write_files[1] /etc/big", "16 MiB"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rt := fakeruntime.NewWithNodeImages(image(g, "v1.31.0"))
			objs := world{controlPlaneVersions: []string{"v1.31.0"}, machinePoolVersion: "v1.31.0", replicas: 2, dataSecret: true}.objects()
			for _, obj := range objs {
				switch o := obj.(type) {
				case *bootstrapv1.KubeadmConfig:
					o.UID = "config-uid"
					if tt.template != "" {
						o.Spec.Files = []bootstrapv1.File{{Path: joinConfigPath, Content: tt.template, ContentFormat: bootstrapv1.FileContentFormatTemplate}}
					}
				case *corev1.Secret:
					// As CABPK writes it: the KubeadmConfig controls its data.
					o.OwnerReferences = []metav1.OwnerReference{{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig",
						Name: "mp-config", UID: "config-uid", Controller: ptr.To(true)}}
					o.Data["value"] = []byte(strings.Replace(string(o.Data["value"]), "runcmd:", tt.extraFile+"runcmd:", 1))
				}
			}
			r, _ := newTestReconciler(g, objs, rt)

			done := make(chan error, 1)
			go func() {
				_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: testNamespace, Name: testPool}})
				done <- err
			}()
			select {
			case err := <-done:
				g.Expect(err).ToNot(HaveOccurred())
			case <-time.After(time.Minute):
				// A bounded reconcile takes milliseconds; this one holds its worker.
				t.Fatal("the reconcile did not return within a minute")
			}
			pool := &infrav1.DockerMachinePool{}
			g.Expect(r.Client.Get(context.Background(), client.ObjectKey{Namespace: testNamespace, Name: testPool}, pool)).To(Succeed())
			fresh := conditions.Get(pool, infrav1.BootstrapDataFreshCondition)
			g.Expect(fresh).ToNot(BeNil())
			g.Expect(fresh.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(fresh.Reason).To(Equal(infrav1.InvalidBootstrapDataReason))
			for _, want := range tt.wantMessage {
				g.Expect(fresh.Message).To(ContainSubstring(want))
			}
			g.Expect(conditions.GetReason(pool, infrav1.MachinesCreatedCondition)).To(Equal(infrav1.InvalidBootstrapDataReason))
			g.Expect(rt.Containers()).To(BeEmpty(), "no container is created for data it cannot be bootstrapped with")
		})
	}
}

// gzipBase64Zeros is n zero bytes compressed with gzip, in base64: a few kilobytes.
func gzipBase64Zeros(t *testing.T, n int) string {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}
