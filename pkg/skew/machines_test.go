package skew

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestWithoutGoneMachines(t *testing.T) {
	upgrading := ControlPlane{Initialized: true, Versions: []string{"v1.36.3", "v1.37.2"}}

	tests := []struct {
		name     string
		cp       ControlPlane
		machines []ControlPlaneMachine
		want     ControlPlane
		wantGone []string
	}{
		{
			name: "the only old machine is gone: its version is dropped",
			cp:   upgrading,
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"v1.36.3"}, Gone: true},
				{Name: "new", Versions: []string{"v1.37.2"}},
			},
			want:     ControlPlane{Initialized: true, Versions: []string{"v1.37.2"}},
			wantGone: []string{"old"},
		},
		{
			name: "versions compare canonically: with or without the v",
			cp:   upgrading,
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"1.36.3"}, Gone: true},
				{Name: "new", Versions: []string{"1.37.2"}},
			},
			want:     ControlPlane{Initialized: true, Versions: []string{"v1.37.2"}},
			wantGone: []string{"old"},
		},
		{
			name: "one of two old machines still runs: nothing is dropped",
			cp:   upgrading,
			machines: []ControlPlaneMachine{
				{Name: "old-a", Versions: []string{"v1.36.3"}, Gone: true},
				{Name: "old-b", Versions: []string{"v1.36.3"}},
				{Name: "new", Versions: []string{"v1.37.2"}},
			},
			want: upgrading,
		},
		{
			name: "a machine updated in place holds both its versions: the old one stays",
			cp:   upgrading,
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"v1.36.3"}, Gone: true},
				{Name: "updating", Versions: []string{"v1.37.2", "v1.36.3"}},
			},
			want: upgrading,
		},
		{
			name: "a machine whose versions are unknown: nothing is dropped",
			cp:   upgrading,
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"v1.36.3"}, Gone: true},
				{Name: "unknown"},
			},
			want: upgrading,
		},
		{
			name: "a gone machine updated in place: both its versions go with it",
			cp:   upgrading,
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"v1.37.2", "v1.36.3"}, Gone: true},
				{Name: "new", Versions: []string{"v1.37.2"}},
			},
			want:     ControlPlane{Initialized: true, Versions: []string{"v1.37.2"}},
			wantGone: []string{"old"},
		},
		{
			name: "every old machine of an HA control plane is gone",
			cp:   ControlPlane{Initialized: true, Versions: []string{"v1.36.3", "v1.37.2"}},
			machines: []ControlPlaneMachine{
				{Name: "old-b", Versions: []string{"v1.36.3"}, Gone: true},
				{Name: "old-a", Versions: []string{"v1.36.3"}, Gone: true},
				{Name: "new-a", Versions: []string{"v1.37.2"}},
				{Name: "new-b", Versions: []string{"v1.37.2"}},
			},
			want:     ControlPlane{Initialized: true, Versions: []string{"v1.37.2"}},
			wantGone: []string{"old-a", "old-b"},
		},
		{
			name: "the old machine is being deleted but not proven gone",
			cp:   upgrading,
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"v1.36.3"}},
				{Name: "new", Versions: []string{"v1.37.2"}},
			},
			want: upgrading,
		},
		{
			name:     "a reported version no machine was made at stays",
			cp:       upgrading,
			machines: []ControlPlaneMachine{{Name: "new", Versions: []string{"v1.37.2"}}},
			want:     upgrading,
		},
		{
			name:     "no machines known: unchanged",
			cp:       upgrading,
			machines: nil,
			want:     upgrading,
		},
		{
			name: "a machine's version is never added",
			cp:   ControlPlane{Initialized: true, Versions: []string{"v1.36.3"}},
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"v1.35.0"}, Gone: true},
				{Name: "new", Versions: []string{"v1.37.2"}},
			},
			want: ControlPlane{Initialized: true, Versions: []string{"v1.36.3"}},
		},
		{
			name: "every reported version gone: unchanged, nothing would be left to judge by",
			cp:   ControlPlane{Initialized: true, Versions: []string{"v1.36.3"}},
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"v1.36.3"}, Gone: true},
			},
			want: ControlPlane{Initialized: true, Versions: []string{"v1.36.3"}},
		},
		{
			name: "the newest version's machines are gone (a downgrade): it is dropped",
			cp:   upgrading,
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"v1.36.3"}},
				{Name: "new", Versions: []string{"v1.37.2"}, Gone: true},
			},
			want:     ControlPlane{Initialized: true, Versions: []string{"v1.36.3"}},
			wantGone: []string{"new"},
		},
		{
			name: "not initialized: unchanged",
			cp:   ControlPlane{Versions: []string{"v1.36.3", "v1.37.2"}},
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"v1.36.3"}, Gone: true},
				{Name: "new", Versions: []string{"v1.37.2"}},
			},
			want: ControlPlane{Versions: []string{"v1.36.3", "v1.37.2"}},
		},
		{
			name: "a machine's version does not parse: unchanged",
			cp:   upgrading,
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"v1.36.3"}, Gone: true},
				{Name: "odd", Versions: []string{"latest"}},
			},
			want: upgrading,
		},
		{
			name: "a reported version does not parse: unchanged, for Decide to report",
			cp:   ControlPlane{Initialized: true, Versions: []string{"v1.36.3", "next"}},
			machines: []ControlPlaneMachine{
				{Name: "old", Versions: []string{"v1.36.3"}, Gone: true},
			},
			want: ControlPlane{Initialized: true, Versions: []string{"v1.36.3", "next"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, gone := tt.cp.WithoutGoneMachines(tt.machines)
			g.Expect(got).To(Equal(tt.want))
			g.Expect(gone).To(Equal(tt.wantGone))
		})
	}
}

// TestWithoutGoneMachinesNeverOpensEarly: whatever machines are known, a target version newer
// than a machine that is not Gone is never admitted after the narrowing.
func TestWithoutGoneMachinesNeverOpensEarly(t *testing.T) {
	g := NewWithT(t)
	versions := []string{"v1.36.3", "v1.37.2"}
	// Every assignment of two old and one new machine to gone or not.
	for mask := range 8 {
		machines := []ControlPlaneMachine{
			{Name: "old-a", Versions: []string{"v1.36.3"}, Gone: mask&1 != 0},
			{Name: "old-b", Versions: []string{"v1.36.3"}, Gone: mask&2 != 0},
			{Name: "new", Versions: []string{"v1.37.2"}, Gone: mask&4 != 0},
		}
		cp, _ := ControlPlane{Initialized: true, Versions: versions}.WithoutGoneMachines(machines)
		d := Decide(Input{ControlPlane: cp, TargetVersion: "v1.37.2", MachinePoolVersion: "v1.37.2"})
		oldRuns := !machines[0].Gone || !machines[1].Gone
		if oldRuns {
			g.Expect(d.Verdict).To(Equal(Wait), "machines %+v", machines)
		}
	}
}
