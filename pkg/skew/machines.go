package skew

import "slices"

// ControlPlaneMachine is one machine of a control plane, for WithoutGoneMachines: what the
// provider's own objects and infrastructure say of it, not what the control plane reports.
type ControlPlaneMachine struct {
	// Name identifies the machine in messages.
	Name string
	// Versions are every Kubernetes version the machine may run now, with or without a leading
	// "v": for a Cluster API Machine, its spec.version and its Node's kubelet version
	// (status.nodeInfo.kubeletVersion), which is what KubeadmControlPlane reports. The two differ
	// while the machine is updated in place, and a machine counts under each. A machine with no
	// versions cannot be accounted for.
	Versions []string
	// Gone is true only on positive proof that nothing of the machine runs any more, so that no
	// kubelet can reach its kube-apiserver: for Cluster API, the Machine is being deleted (or is
	// gone), its infrastructure object is not found on a live read, and the container or VM that
	// hosted it is absent from its infrastructure. Anything less, including an error while
	// looking, is false.
	Gone bool
}

// WithoutGoneMachines returns the control plane without the versions that only gone machines
// ran, and the names of those machines, so that a gate waiting for the control plane to report
// that its old machines are gone re-opens as soon as that is proven, before the control plane
// provider writes its next status.
//
// machines must be every machine of the control plane the caller knows of: those its objects
// list now and those it saw being deleted since. A caller that cannot account for something
// running (say, a container of the control plane that belongs to no machine it knows) must not
// call it. The result only ever narrows what the control plane reports:
//
//   - a reported version is dropped when at least one machine runs it and every machine that
//     runs it is Gone; a version no machine runs stays;
//   - a version no reported version matches is never added;
//   - the control plane is returned unchanged when it is not initialized, when a machine has no
//     versions, when a reported or a machine's version does not parse (Decide reports the
//     former), or when every reported version would be dropped: nothing would be left to judge a
//     kubelet by.
func (cp ControlPlane) WithoutGoneMachines(machines []ControlPlaneMachine) (ControlPlane, []string) {
	if !cp.Initialized || len(cp.Versions) == 0 {
		return cp, nil
	}
	type holders struct{ all, gone []string }
	byVersion := map[string]*holders{}
	for _, m := range machines {
		if len(m.Versions) == 0 {
			return cp, nil
		}
		held := map[string]bool{}
		for _, version := range m.Versions {
			v, err := CanonicalVersion(version)
			if err != nil {
				return cp, nil
			}
			if held[v] {
				continue
			}
			held[v] = true
			h := byVersion[v]
			if h == nil {
				h = &holders{}
				byVersion[v] = h
			}
			h.all = append(h.all, m.Name)
			if m.Gone {
				h.gone = append(h.gone, m.Name)
			}
		}
	}
	narrowed := ControlPlane{Initialized: true}
	var gone []string
	for _, reported := range cp.Versions {
		v, err := CanonicalVersion(reported)
		if err != nil {
			return cp, nil
		}
		if h := byVersion[v]; h != nil && len(h.gone) == len(h.all) {
			gone = append(gone, h.gone...)
			continue
		}
		narrowed.Versions = append(narrowed.Versions, reported)
	}
	if len(gone) == 0 || len(narrowed.Versions) == 0 {
		return cp, nil
	}
	slices.Sort(gone)
	return narrowed, slices.Compact(gone)
}
