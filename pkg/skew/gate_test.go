package skew

import (
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// initializedAt is an initialized control plane observed at the given versions.
func initializedAt(versions ...string) ControlPlane {
	return ControlPlane{Initialized: true, Versions: versions}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		in   Input
		// want is the reason; the verdict is Proceed exactly when the reason is Admitted.
		want Reason
		// admitted are the expected AdmittedVersions, in order.
		admitted []string
		// messageContains are substrings of the message, typically the versions it must name.
		messageContains []string
	}{
		// Admitted.
		{
			name:            "equal versions",
			in:              Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.34.0", MachinePoolVersion: "v1.34.0"},
			want:            Admitted,
			admitted:        []string{"v1.34.0"},
			messageContains: []string{"v1.34.0 is admitted by control plane version v1.34.0"},
		},
		{
			name:     "versions without v",
			in:       Input{ControlPlane: initializedAt("1.34.0"), TargetVersion: "1.34.0", MachinePoolVersion: "v1.34.0", RunningVersions: []string{"1.34.0"}},
			want:     Admitted,
			admitted: []string{"v1.34.0"},
		},
		{
			name:     "older patch than the control plane",
			in:       Input{ControlPlane: initializedAt("v1.34.2"), TargetVersion: "v1.34.0", MachinePoolVersion: "v1.34.0"},
			want:     Admitted,
			admitted: []string{"v1.34.0"},
		},
		{
			name:     "MachinePool without version skips the mismatch rule",
			in:       Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.34.0"},
			want:     Admitted,
			admitted: []string{"v1.34.0"},
		},

		// ControlPlaneOlder.
		{
			name:            "newer patch than the control plane",
			in:              Input{ControlPlane: initializedAt("v1.34.2"), TargetVersion: "v1.34.3", MachinePoolVersion: "v1.34.3"},
			want:            ControlPlaneOlder,
			messageContains: []string{"v1.34.3", "v1.34.2"},
		},
		{
			name:            "newer minor than the control plane",
			in:              Input{ControlPlane: initializedAt("v1.34.2"), TargetVersion: "v1.35.0", MachinePoolVersion: "v1.35.0"},
			want:            ControlPlaneOlder,
			messageContains: []string{"v1.35.0 is newer than the oldest control plane version v1.34.2"},
		},
		{
			name:            "HA control plane mid-upgrade: the oldest apiserver bounds the kubelet",
			in:              Input{ControlPlane: initializedAt("v1.34.2", "v1.35.0"), TargetVersion: "v1.35.0", MachinePoolVersion: "v1.35.0"},
			want:            ControlPlaneOlder,
			messageContains: []string{"v1.35.0", "oldest control plane version v1.34.2"},
		},
		{
			name:            "HA control plane mid-upgrade, versions in any order",
			in:              Input{ControlPlane: initializedAt("v1.35.0", "v1.34.2"), TargetVersion: "v1.35.0", MachinePoolVersion: "v1.35.0"},
			want:            ControlPlaneOlder,
			messageContains: []string{"oldest control plane version v1.34.2"},
		},
		{
			name:            "HA control plane mid-upgrade admits the old version",
			in:              Input{ControlPlane: initializedAt("v1.35.0", "v1.34.2"), TargetVersion: "v1.34.2", MachinePoolVersion: "v1.34.2"},
			want:            Admitted,
			admitted:        []string{"v1.34.2"},
			messageContains: []string{"v1.34.2 (oldest) to v1.35.0 (newest)"},
		},
		{
			name: "newer major than the control plane",
			in:   Input{ControlPlane: initializedAt("v1.99.0"), TargetVersion: "v2.0.0", MachinePoolVersion: "v2.0.0"},
			want: ControlPlaneOlder,
		},

		// TooOld: the skew policy allows exactly three minors.
		{
			name:     "exactly three minors behind",
			in:       Input{ControlPlane: initializedAt("v1.34.5"), TargetVersion: "v1.31.0", MachinePoolVersion: "v1.31.0"},
			want:     Admitted,
			admitted: []string{"v1.31.0"},
		},
		{
			name:            "four minors behind",
			in:              Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.30.14", MachinePoolVersion: "v1.30.14"},
			want:            TooOld,
			messageContains: []string{"v1.30.14", "newest control plane version v1.34.0", "at least v1.31"},
		},
		{
			name:            "HA: the newest apiserver bounds how old",
			in:              Input{ControlPlane: initializedAt("v1.34.0", "v1.35.0"), TargetVersion: "v1.31.9", MachinePoolVersion: "v1.31.9"},
			want:            TooOld,
			messageContains: []string{"v1.31.9", "v1.35.0", "at least v1.32"},
		},
		{
			name:     "HA: three minors behind the newest",
			in:       Input{ControlPlane: initializedAt("v1.34.0", "v1.35.0"), TargetVersion: "v1.32.0", MachinePoolVersion: "v1.32.0"},
			want:     Admitted,
			admitted: []string{"v1.32.0"},
		},
		{
			name:     "three minors behind, pre-release: minors count, not pre-releases",
			in:       Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.31.0-rc.1", MachinePoolVersion: "v1.31.0-rc.1"},
			want:     Admitted,
			admitted: []string{"v1.31.0-rc.1"},
		},
		{
			name: "four minors behind a pre-release control plane",
			in:   Input{ControlPlane: initializedAt("v1.35.0-beta.0"), TargetVersion: "v1.31.0", MachinePoolVersion: "v1.31.0"},
			want: TooOld,
		},
		{
			name: "older major",
			in:   Input{ControlPlane: initializedAt("v2.0.0"), TargetVersion: "v1.99.0", MachinePoolVersion: "v1.99.0"},
			want: TooOld,
		},
		{
			name:     "control plane minor below three",
			in:       Input{ControlPlane: initializedAt("v1.2.0"), TargetVersion: "v1.0.0", MachinePoolVersion: "v1.0.0"},
			want:     Admitted,
			admitted: []string{"v1.0.0"},
		},

		// Pre-release and build metadata, as semver orders them.
		{
			name:     "pre-release target, released control plane",
			in:       Input{ControlPlane: initializedAt("v1.37.0"), TargetVersion: "v1.37.0-beta.0", MachinePoolVersion: "v1.37.0-beta.0"},
			want:     Admitted,
			admitted: []string{"v1.37.0-beta.0"},
		},
		{
			name:            "released target, pre-release control plane",
			in:              Input{ControlPlane: initializedAt("v1.37.0-beta.0"), TargetVersion: "v1.37.0", MachinePoolVersion: "v1.37.0"},
			want:            ControlPlaneOlder,
			messageContains: []string{"v1.37.0 is newer than the oldest control plane version v1.37.0-beta.0"},
		},
		{
			name: "later pre-release than the control plane",
			in:   Input{ControlPlane: initializedAt("v1.37.0-beta.0"), TargetVersion: "v1.37.0-beta.1", MachinePoolVersion: "v1.37.0-beta.1"},
			want: ControlPlaneOlder,
		},
		{
			name:     "earlier pre-release than the control plane",
			in:       Input{ControlPlane: initializedAt("v1.37.0-beta.0"), TargetVersion: "v1.37.0-alpha.3", MachinePoolVersion: "v1.37.0-alpha.3"},
			want:     Admitted,
			admitted: []string{"v1.37.0-alpha.3"},
		},
		{
			name:     "build metadata is ignored for ordering",
			in:       Input{ControlPlane: initializedAt("v1.33.1+k3s1"), TargetVersion: "v1.33.1+k3s2", MachinePoolVersion: "v1.33.1+k3s2"},
			want:     Admitted,
			admitted: []string{"v1.33.1+k3s2"},
		},

		// VersionMismatch, and its precedence.
		{
			name:            "image newer than the MachinePool",
			in:              Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.34.0", MachinePoolVersion: "v1.33.1"},
			want:            VersionMismatch,
			messageContains: []string{"v1.34.0", "MachinePool version v1.33.1"},
		},
		{
			name:     "build metadata does not count for the mismatch",
			in:       Input{ControlPlane: initializedAt("v1.33.1"), TargetVersion: "v1.33.1+k3s1", MachinePoolVersion: "v1.33.1"},
			want:     Admitted,
			admitted: []string{"v1.33.1+k3s1"},
		},
		{
			name:     "a MachinePool version with build metadata agrees with its kindest/node image",
			in:       Input{ControlPlane: initializedAt("v1.37.0"), TargetVersion: "v1.37.0", MachinePoolVersion: "v1.37.0+build.1"},
			want:     Admitted,
			admitted: []string{"v1.37.0"},
		},
		{
			name:            "a pre-release counts for the mismatch",
			in:              Input{ControlPlane: initializedAt("v1.37.0"), TargetVersion: "v1.37.0-rc.1", MachinePoolVersion: "v1.37.0"},
			want:            VersionMismatch,
			messageContains: []string{"v1.37.0-rc.1", "MachinePool version v1.37.0"},
		},
		{
			name: "v prefix does not count for the mismatch",
			in:   Input{ControlPlane: initializedAt("v1.33.1"), TargetVersion: "1.33.1", MachinePoolVersion: "v1.33.1"},
			want: Admitted, admitted: []string{"v1.33.1"},
		},
		{
			name: "mismatch before ControlPlaneOlder",
			in:   Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.35.0", MachinePoolVersion: "v1.34.0"},
			want: VersionMismatch,
		},
		{
			name: "mismatch before TooOld",
			in:   Input{ControlPlane: initializedAt("v1.35.0"), TargetVersion: "v1.30.0", MachinePoolVersion: "v1.35.0"},
			want: VersionMismatch,
		},
		{
			name: "mismatch before ControlPlaneUnknown",
			in:   Input{ControlPlane: ControlPlane{}, TargetVersion: "v1.35.0", MachinePoolVersion: "v1.34.0"},
			want: VersionMismatch,
		},

		// ControlPlaneUnknown.
		{
			name:            "control plane not initialized",
			in:              Input{ControlPlane: ControlPlane{Versions: []string{"v1.34.0"}}, TargetVersion: "v1.34.0", MachinePoolVersion: "v1.34.0"},
			want:            ControlPlaneUnknown,
			messageContains: []string{"initialized", "v1.34.0"},
		},
		{
			name:            "initialized control plane without versions",
			in:              Input{ControlPlane: initializedAt(), TargetVersion: "v1.34.0", MachinePoolVersion: "v1.34.0", RunningVersions: []string{"v1.34.0"}},
			want:            ControlPlaneUnknown,
			messageContains: []string{"status.versions", "status.version"},
		},

		// InvalidVersion, before everything else.
		{
			name:            "unparsable target",
			in:              Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.34", MachinePoolVersion: "v1.34.0"},
			want:            InvalidVersion,
			messageContains: []string{"target version", `"v1.34"`},
		},
		{
			name:            "empty target",
			in:              Input{ControlPlane: initializedAt("v1.34.0"), MachinePoolVersion: "v1.34.0"},
			want:            InvalidVersion,
			messageContains: []string{"target version is empty"},
		},
		{
			name:            "unparsable MachinePool version",
			in:              Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.34.0", MachinePoolVersion: "1.34.0 "},
			want:            InvalidVersion,
			messageContains: []string{"MachinePool version", `"1.34.0 "`},
		},
		{
			name:            "unparsable control plane version, even before initialization",
			in:              Input{ControlPlane: ControlPlane{Versions: []string{"v1.34.0", "banana"}}, TargetVersion: "v1.34.0", MachinePoolVersion: "v1.34.0"},
			want:            InvalidVersion,
			messageContains: []string{"control plane version", `"banana"`},
		},
		{
			name:            "empty control plane version",
			in:              Input{ControlPlane: initializedAt(""), TargetVersion: "v1.34.0", MachinePoolVersion: "v1.34.0"},
			want:            InvalidVersion,
			messageContains: []string{"control plane version is empty"},
		},
		{
			name:            "unparsable running version",
			in:              Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.34.0", MachinePoolVersion: "v1.34.0", RunningVersions: []string{"v1.34.0", "v1.34.0_x_y"}},
			want:            InvalidVersion,
			messageContains: []string{"running version", `"v1.34.0_x_y"`},
		},
		{
			name: "invalid before mismatch",
			in:   Input{ControlPlane: initializedAt("v1.34"), TargetVersion: "v1.35.0", MachinePoolVersion: "v1.34.0"},
			want: InvalidVersion,
		},

		// Admitted versions: replacements and scale-up while the gate waits.
		{
			name:            "waiting for the control plane, the running version stays admitted",
			in:              Input{ControlPlane: initializedAt("v1.34.2"), TargetVersion: "v1.35.0", MachinePoolVersion: "v1.35.0", RunningVersions: []string{"v1.34.2", "v1.34.2"}},
			want:            ControlPlaneOlder,
			admitted:        []string{"v1.34.2"},
			messageContains: []string{"new instances may still be created at v1.34.2"},
		},
		{
			name:     "stale image: the target is running and stays admitted",
			in:       Input{ControlPlane: initializedAt("v1.33.1"), TargetVersion: "v1.33.1", MachinePoolVersion: "v1.34.0", RunningVersions: []string{"v1.33.1"}},
			want:     VersionMismatch,
			admitted: []string{"v1.33.1"},
		},
		{
			name:     "stale MachinePool: the running version stays admitted, the new image does not",
			in:       Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.34.0", MachinePoolVersion: "v1.33.1", RunningVersions: []string{"v1.33.1"}},
			want:     VersionMismatch,
			admitted: []string{"v1.33.1"},
		},
		{
			name:     "running version withdrawn once too old",
			in:       Input{ControlPlane: initializedAt("v1.35.0"), TargetVersion: "v1.35.0", MachinePoolVersion: "v1.35.0", RunningVersions: []string{"v1.31.0", "v1.32.0"}},
			want:     Admitted,
			admitted: []string{"v1.32.0", "v1.35.0"},
		},
		{
			name:     "running version newer than the control plane is not admitted",
			in:       Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.34.0", MachinePoolVersion: "v1.34.0", RunningVersions: []string{"v1.35.0"}},
			want:     Admitted,
			admitted: []string{"v1.34.0"},
		},
		{
			name:     "admitted versions are distinct and ascending, builds kept apart",
			in:       Input{ControlPlane: initializedAt("v1.34.1"), TargetVersion: "v1.34.0", MachinePoolVersion: "v1.34.0", RunningVersions: []string{"v1.34.1", "v1.33.5", "v1.34.1+b", "1.34.1", "v1.34.1+a"}},
			want:     Admitted,
			admitted: []string{"v1.33.5", "v1.34.0", "v1.34.1", "v1.34.1+a", "v1.34.1+b"},
		},
		{
			name:            "last admitted version stays admitted with no instance left",
			in:              Input{ControlPlane: initializedAt("v1.34.2"), TargetVersion: "v1.35.0", MachinePoolVersion: "v1.35.0", LastAdmittedVersion: "v1.34.2"},
			want:            ControlPlaneOlder,
			admitted:        []string{"v1.34.2"},
			messageContains: []string{"new instances may still be created at v1.34.2"},
		},
		{
			name:     "last admitted version and running versions together",
			in:       Input{ControlPlane: initializedAt("v1.34.2"), TargetVersion: "v1.34.2", MachinePoolVersion: "v1.33.0", RunningVersions: []string{"v1.33.0"}, LastAdmittedVersion: "1.34.0"},
			want:     VersionMismatch,
			admitted: []string{"v1.33.0", "v1.34.0"},
		},
		{
			name: "last admitted version withdrawn once too old",
			in:   Input{ControlPlane: initializedAt("v1.35.0"), TargetVersion: "v1.36.0", MachinePoolVersion: "v1.36.0", LastAdmittedVersion: "v1.31.5"},
			want: ControlPlaneOlder,
		},
		{
			name:            "unparsable last admitted version",
			in:              Input{ControlPlane: initializedAt("v1.34.2"), TargetVersion: "v1.34.2", MachinePoolVersion: "v1.34.2", LastAdmittedVersion: "kindest/node:v1.34.2"},
			want:            InvalidVersion,
			messageContains: []string{"last admitted version", "kindest/node:v1.34.2"},
		},
		{
			name: "nothing is admitted while the control plane is unknown",
			in:   Input{ControlPlane: ControlPlane{Versions: []string{"v1.34.0"}}, TargetVersion: "v1.34.0", MachinePoolVersion: "v1.34.0", RunningVersions: []string{"v1.34.0"}},
			want: ControlPlaneUnknown,
		},
		{
			name: "nothing is admitted when a version is invalid",
			in:   Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.35", MachinePoolVersion: "v1.34.0", RunningVersions: []string{"v1.34.0"}},
			want: InvalidVersion,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			d := Decide(tt.in)
			g.Expect(d.Reason).To(Equal(tt.want), d.Message)
			if tt.want == Admitted {
				g.Expect(d.Verdict).To(Equal(Proceed))
			} else {
				g.Expect(d.Verdict).To(Equal(Wait))
			}
			if len(tt.admitted) == 0 {
				g.Expect(d.AdmittedVersions).To(BeEmpty())
			} else {
				g.Expect(d.AdmittedVersions).To(Equal(tt.admitted))
			}
			g.Expect(d.Message).ToNot(BeEmpty())
			for _, s := range tt.messageContains {
				g.Expect(d.Message).To(ContainSubstring(s))
			}
		})
	}
}

func TestDecisionAdmits(t *testing.T) {
	d := Decide(Input{
		ControlPlane:       initializedAt("v1.34.2"),
		TargetVersion:      "v1.35.0",
		MachinePoolVersion: "v1.35.0",
		RunningVersions:    []string{"v1.34.2", "v1.33.0+build.1"},
	})

	tests := []struct {
		version string
		want    bool
	}{
		{version: "v1.34.2", want: true},
		{version: "1.34.2", want: true},
		{version: "v1.33.0+build.1", want: true},
		{version: "v1.33.0", want: false}, // another build than the one running
		{version: "v1.35.0", want: false}, // the target, while waiting
		{version: "v1.34.1", want: false}, // never running in the pool
		{version: "v1.34", want: false},
		{version: "", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			g := NewWithT(t)

			g.Expect(d.Admits(tt.version)).To(Equal(tt.want))
		})
	}
}

func TestDecisionCondition(t *testing.T) {
	tests := []struct {
		name       string
		in         Input
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{
			name:       "proceed",
			in:         Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.34.0"},
			wantStatus: metav1.ConditionTrue,
			wantReason: "Admitted",
		},
		{
			name:       "wait",
			in:         Input{ControlPlane: initializedAt("v1.34.0"), TargetVersion: "v1.35.0"},
			wantStatus: metav1.ConditionFalse,
			wantReason: "ControlPlaneOlder",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)

			d := Decide(tt.in)
			c := d.Condition("VersionSkewAdmitted")
			g.Expect(c.Type).To(Equal("VersionSkewAdmitted"))
			g.Expect(c.Status).To(Equal(tt.wantStatus))
			g.Expect(c.Reason).To(Equal(tt.wantReason))
			g.Expect(c.Message).To(Equal(d.Message))
		})
	}
}

// FuzzDecide checks that Decide never panics and that a Proceed never breaks the skew policy.
func FuzzDecide(f *testing.F) {
	f.Add("v1.34.0", "v1.34.0", "v1.34.0", "v1.35.0", "v1.33.0", true)
	f.Add("v1.35.0", "v1.35.0", "v1.34.2", "v1.35.0", "v1.34.2", true)
	f.Add("v1.30.0", "", "v1.34.0", "v1.34.0", "v1.30.0", true)
	f.Add("v1.37.0-beta.0", "v1.37.0-beta.0", "v1.37.0", "v1.37.0-rc.1", "", true)
	f.Add("v1.33.1+k3s1", "v1.33.1", "v1.33.1+k3s2", "v1.33.1", "v1.33.1+k3s1", true)
	f.Add("1.34", "v1.34.0", "v1.34.0", "banana", "v1.34.0", false)
	f.Add("", "", "", "", "", false)
	f.Fuzz(func(t *testing.T, target, pool, cp1, cp2, running string, initialized bool) {
		// The running version doubles as the last admitted one: both are admitted the same way.
		var controlPlane []string
		for _, v := range []string{cp1, cp2} {
			if v != "" {
				controlPlane = append(controlPlane, v)
			}
		}
		var runningVersions []string
		if running != "" {
			runningVersions = []string{running}
		}
		d := Decide(Input{
			ControlPlane:        ControlPlane{Initialized: initialized, Versions: controlPlane},
			TargetVersion:       target,
			MachinePoolVersion:  pool,
			RunningVersions:     runningVersions,
			LastAdmittedVersion: running,
		})

		if d.Message == "" || d.Reason == "" {
			t.Fatalf("decision without reason or message: %+v", d)
		}
		if (d.Verdict == Proceed) != (d.Reason == Admitted) {
			t.Fatalf("verdict %s with reason %s", d.Verdict, d.Reason)
		}
		if !slices.IsSortedFunc(d.AdmittedVersions, func(a, b string) int {
			return semver.MustParse(strings.TrimPrefix(a, "v")).Compare(semver.MustParse(strings.TrimPrefix(b, "v")))
		}) {
			t.Fatalf("admitted versions not ascending: %v", d.AdmittedVersions)
		}
		for _, admitted := range d.AdmittedVersions {
			v, err := ParseVersion(admitted)
			if err != nil {
				t.Fatalf("admitted version %q does not parse: %v", admitted, err)
			}
			for _, s := range controlPlane {
				c := semver.MustParse(strings.TrimPrefix(s, "v"))
				if v.GT(c) {
					t.Fatalf("admitted %s is newer than control plane version %s", admitted, s)
				}
				if v.Major < c.Major || (v.Major == c.Major && c.Minor > v.Minor && c.Minor-v.Minor > 3) {
					t.Fatalf("admitted %s is too old for control plane version %s", admitted, s)
				}
			}
			if !initialized {
				t.Fatalf("admitted %s while the control plane is not initialized", admitted)
			}
		}
		if d.Verdict == Proceed && !d.Admits(target) {
			t.Fatalf("proceeds with target %q but does not admit it", target)
		}
	})
}
