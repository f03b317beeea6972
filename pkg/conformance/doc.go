// Package conformance checks that an InfraMachinePool honours the Kubernetes version skew policy
// when a user upgrades the control plane and the MachinePool at once, whatever the provider. It
// holds the table of scenarios every CAPDMP test tier runs and the monitor that judges them with
// the rule of pkg/skew: no kubelet newer than a kube-apiserver it may talk to (a newer patch counts,
// as the gate's rule has it), none more than three minors older. A provider runs the same table
// on its own clusters.
//
// # What a provider implements
//
// A provider implements Cluster for one workload cluster its test made:
//
//   - Client returns a client of the management cluster. The scenarios act as a user's apply
//     does, through the Cluster API contract only: they write the control plane's spec.version
//     (found through the Cluster's spec.controlPlaneRef), the MachinePool's
//     spec.template.spec.version and spec.replicas, delete the pool's Machines, and append to
//     the spec.files of the pool's bootstrap config (a CABPK KubeadmConfig). They read the
//     control plane's status.versions and initialization, and the MachinePool's readyReplicas
//     and nodeRefs.
//   - MachinePool names the MachinePool whose Cluster's control plane is upgraded with it.
//   - Instances lists the pool's instances as the provider's own API shows them (containers,
//     VMs), each with the Kubernetes version of the kubelet it runs or will run: the version of
//     its image, from the moment the instance exists. The monitor judges these versions, so an
//     instance made too new shows before its Node registers.
//   - MakeVersionAvailable makes an image of a version usable by the pool before the scenario
//     writes that version (build or look up a machine image); a pool whose image follows the
//     MachinePool's version by itself does nothing.
//
// A Cluster may also implement optional interfaces; a scenario that needs one the Cluster lacks
// is not runnable on it (Scenario.RunnableOn names what is missing, from Scenario.Needs):
//
//   - Gated: the pool says why it waits ("ControlPlaneOlder" while it holds back a version the
//     control plane does not run yet), with a message for the user. Most scenarios wait for it.
//   - ImageWriter: the pool's image is written apart from the MachinePool's version (a launch
//     template, CAPDMP's customImage), and a user's apply writes it too.
//   - Restarter: the provider's controllers can be restarted mid-scenario.
//   - BootstrapRecorder: the pool records the bootstrap data current at its pause and the data
//     each new instance joined with.
//   - ControlPlaneWaiter: the caller knows better than status.versions when its control plane
//     is done (every machine ready and up to date).
//   - Observer: a Source that samples the versions better than the contract does, for instance
//     by asking each kube-apiserver its /version and reading the pool's Nodes. Without it the
//     monitor reads the control plane's status.versions, then Instances.
//   - ControlPlaneWriter: the control plane moves to a version by more than its spec.version (a
//     machine template that names the image of its version); no scenario needs it, and without
//     it the kit writes spec.version alone.
//
// # Running the scenarios
//
// Scenarios returns the table (copies; Lookup finds one by name). For each scenario the caller
// makes a cluster of Scenario.Shape (control plane and pool replicas) at Scenario.From(versions),
// the oldest version the scenario needs of the caller's chain; when Shape.CustomImage is set it
// writes the pool's image of that version first (ImageWriter). Then Scenario.Run drives it and
// returns the Report. Options give the chain of versions (oldest first), the monitor's sampling
// interval, a Budgets per wait for the provider's machines, the bootstrap token's TTL (which
// paused/outlives-token-ttl waits out) and callbacks for the steps and the timeline.
//
// A scenario's name is a group and a case joined by one '/': both-at-once/... upgrade the control
// plane and the MachinePool with one apply, in each order, gap and shape; paused/... act while
// the pool waits for the control plane (a token TTL passes, a scale-up and a deleted Machine, an
// edited bootstrap config, a restarted provider); pool-alone/... upgrade the pool alone. Names
// are stable: they are the same in every tier and report. Kubernetes object names cannot hold a
// '/': a caller naming a cluster after a scenario replaces it (strings.ReplaceAll(name, "/", "-")).
//
// A Go test that runs each scenario as a subtest, t.Run(s.Name, ...), gets two levels for each
// name: go test's -run splits its pattern at each '/' and matches each level's part, unanchored,
// against that level of the name. So -run 'TestScenarios/paused/' selects the paused group and
// -run 'TestScenarios/both-at-once/machinepool-first' that one scenario: no group name is part of
// another, nor any case name of another (anchor with ^...$ to be strict). An alternation must be
// made per level, -run 'TestScenarios/(both-at-once|paused)/(machinepool-first|provider-restart)',
// not across the '/'. Ginkgo's --focus matches the whole text, '/' included.
//
// # The report
//
// Run returns an error when a step failed (a wait that passed its budget says where it stood) or
// when the monitor could not judge most of its samples (Coverage.Blind); the skew verdict is in
// the Report, for the caller to assert: a conformant pool has no Report.Violations. Each
// Violation says when, what the sample saw and which rule broke. Coverage counts the samples by
// what they could judge, the unreadable ones apart; Timeline is every change the monitor saw;
// Latencies are how long the gate took to admit each new version once the control plane ran it;
// SampleInterval and LongestGap say how densely the monitor sampled.
//
// Watch samples and judges a cluster the same way while the caller's own steps change it (an
// upgrade a provider drives itself, a scale-up, a fault), and returns the same Report.
package conformance
