package skew

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// controlPlaneObject builds a control plane object of any kind from its status; spec.version is
// always set to something else, so that a test reading it would fail.
func controlPlaneObject(status map[string]interface{}) *unstructured.Unstructured {
	obj := map[string]interface{}{
		"apiVersion": "controlplane.example.com/v1beta2",
		"kind":       "FooControlPlane",
		"metadata":   map[string]interface{}{"name": "cp", "namespace": "default"},
		"spec":       map[string]interface{}{"version": "v9.9.9"},
	}
	if status != nil {
		obj["status"] = status
	}
	return &unstructured.Unstructured{Object: obj}
}

func TestReadControlPlane(t *testing.T) {
	initialized := map[string]interface{}{"controlPlaneInitialized": true}

	tests := []struct {
		name    string
		obj     *unstructured.Unstructured
		want    ControlPlane
		wantErr string
	}{
		{
			name: "status.versions wins over status.version",
			obj: controlPlaneObject(map[string]interface{}{
				"initialization": initialized,
				"version":        "v1.33.4",
				"versions": []interface{}{
					map[string]interface{}{"version": "v1.33.4", "replicas": int64(2)},
					map[string]interface{}{"version": "v1.34.1", "replicas": int64(1)},
				},
			}),
			want: ControlPlane{Initialized: true, Versions: []string{"v1.33.4", "v1.34.1"}},
		},
		{
			name: "status.versions entries without replicas",
			obj: controlPlaneObject(map[string]interface{}{
				"initialization": initialized,
				"versions":       []interface{}{map[string]interface{}{"version": "v1.34.1"}},
			}),
			want: ControlPlane{Initialized: true, Versions: []string{"v1.34.1"}},
		},
		{
			name: "status.version when there is no status.versions",
			obj: controlPlaneObject(map[string]interface{}{
				"initialization": initialized,
				"version":        "v1.33.4",
			}),
			want: ControlPlane{Initialized: true, Versions: []string{"v1.33.4"}},
		},
		{
			name: "status.version when status.versions is empty",
			obj: controlPlaneObject(map[string]interface{}{
				"initialization": initialized,
				"version":        "v1.33.4",
				"versions":       []interface{}{},
			}),
			want: ControlPlane{Initialized: true, Versions: []string{"v1.33.4"}},
		},
		{
			name: "spec-only object: no versions, not initialized, spec.version ignored",
			obj:  controlPlaneObject(nil),
			want: ControlPlane{},
		},
		{
			name: "initialized but no version yet",
			obj:  controlPlaneObject(map[string]interface{}{"initialization": initialized}),
			want: ControlPlane{Initialized: true},
		},
		{
			name: "empty status.version is no version",
			obj:  controlPlaneObject(map[string]interface{}{"initialization": initialized, "version": ""}),
			want: ControlPlane{Initialized: true},
		},
		{
			name: "versions reported before initialization",
			obj: controlPlaneObject(map[string]interface{}{
				"initialization": map[string]interface{}{"controlPlaneInitialized": false},
				"versions":       []interface{}{map[string]interface{}{"version": "v1.34.1"}},
			}),
			want: ControlPlane{Versions: []string{"v1.34.1"}},
		},
		{
			name: "v1beta1 contract status.initialized",
			obj:  controlPlaneObject(map[string]interface{}{"initialized": true, "version": "v1.33.4"}),
			want: ControlPlane{Initialized: true, Versions: []string{"v1.33.4"}},
		},
		{
			name: "v1beta2 field wins over v1beta1 field",
			obj: controlPlaneObject(map[string]interface{}{
				"initialized":    true,
				"initialization": map[string]interface{}{"controlPlaneInitialized": false},
			}),
			want: ControlPlane{},
		},
		{
			name: "unparsable versions are read as written, for Decide to report",
			obj: controlPlaneObject(map[string]interface{}{
				"initialization": initialized,
				"versions":       []interface{}{map[string]interface{}{"version": "banana"}},
			}),
			want: ControlPlane{Initialized: true, Versions: []string{"banana"}},
		},
		{
			name:    "nil object",
			obj:     nil,
			wantErr: "nil",
		},
		{
			name:    "status.versions is not a list",
			obj:     controlPlaneObject(map[string]interface{}{"versions": "v1.34.1"}),
			wantErr: "status.versions",
		},
		{
			name:    "status.versions entry is not an object",
			obj:     controlPlaneObject(map[string]interface{}{"versions": []interface{}{"v1.34.1"}}),
			wantErr: "status.versions[0]",
		},
		{
			name: "status.versions entry without version",
			obj: controlPlaneObject(map[string]interface{}{"versions": []interface{}{
				map[string]interface{}{"version": "v1.34.1"},
				map[string]interface{}{"replicas": int64(1)},
			}}),
			wantErr: "status.versions[1] has no version",
		},
		{
			name:    "status.versions entry version is not a string",
			obj:     controlPlaneObject(map[string]interface{}{"versions": []interface{}{map[string]interface{}{"version": int64(1)}}}),
			wantErr: "status.versions[0].version",
		},
		{
			name:    "status.version is not a string",
			obj:     controlPlaneObject(map[string]interface{}{"version": int64(134)}),
			wantErr: "status.version",
		},
		{
			name:    "controlPlaneInitialized is not a bool",
			obj:     controlPlaneObject(map[string]interface{}{"initialization": map[string]interface{}{"controlPlaneInitialized": "true"}}),
			wantErr: "controlPlaneInitialized",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			got, err := ReadControlPlane(tt.obj)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(got.Initialized).To(Equal(tt.want.Initialized))
			g.Expect(got.Versions).To(ConsistOf(tt.want.Versions))
		})
	}
}

func TestControlPlaneVersionsChanged(t *testing.T) {
	upgrading := map[string]interface{}{
		"initialization": map[string]interface{}{"controlPlaneInitialized": true},
		"versions": []interface{}{
			map[string]interface{}{"version": "v1.33.4", "replicas": int64(2)},
			map[string]interface{}{"version": "v1.34.1", "replicas": int64(1)},
		},
	}
	upgradingFurther := map[string]interface{}{
		"initialization": map[string]interface{}{"controlPlaneInitialized": true},
		"versions": []interface{}{
			map[string]interface{}{"version": "v1.33.4", "replicas": int64(1)},
			map[string]interface{}{"version": "v1.34.1", "replicas": int64(2)},
		},
	}
	upgraded := map[string]interface{}{
		"initialization": map[string]interface{}{"controlPlaneInitialized": true},
		"versions":       []interface{}{map[string]interface{}{"version": "v1.34.1", "replicas": int64(3)}},
		"readyReplicas":  int64(3),
	}
	upgradedAndReady := map[string]interface{}{
		"initialization": map[string]interface{}{"controlPlaneInitialized": true},
		"versions":       []interface{}{map[string]interface{}{"version": "v1.34.1", "replicas": int64(3)}},
		"readyReplicas":  int64(2),
	}

	tests := []struct {
		name     string
		old, new *unstructured.Unstructured
		want     bool
	}{
		{name: "last old machine gone", old: controlPlaneObject(upgrading), new: controlPlaneObject(upgraded), want: true},
		{name: "initialized", old: controlPlaneObject(nil), new: controlPlaneObject(upgraded), want: true},
		{name: "replicas moved between the same versions", old: controlPlaneObject(upgrading), new: controlPlaneObject(upgradingFurther), want: false},
		{name: "unrelated status field", old: controlPlaneObject(upgraded), new: controlPlaneObject(upgradedAndReady), want: false},
		{name: "unreadable object", old: controlPlaneObject(upgraded), new: controlPlaneObject(map[string]interface{}{"versions": "x"}), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			g.Expect(ControlPlaneVersionsChanged(tt.old, tt.new)).To(Equal(tt.want))
		})
	}
}
