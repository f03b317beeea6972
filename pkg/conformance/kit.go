package conformance

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Instance is one instance of a pool (a container, a VM, a scale-set instance).
type Instance struct {
	// Name identifies the instance; for a MachinePool Machine's instance, its Machine's name
	// where the provider names them alike (paused/scale-and-replace deletes a Machine and looks
	// for its instance by that name).
	Name string
	// Version is the Kubernetes version of the kubelet it runs or is about to run: the version of
	// the image, machine image or template it was made from, as soon as the instance exists, not
	// once its Node registers. The monitor judges it against the kube-apiservers.
	Version string
}

// Pool is what the kit needs from an InfraMachinePool beyond the Cluster API contract.
type Pool interface {
	// Instances lists the instances of the pool that exist now, running a kubelet or about to:
	// what the provider's own API says (the containers, the VMs), not the MachinePool's status,
	// which trails it.
	Instances(ctx context.Context) ([]Instance, error)
	// MakeVersionAvailable makes an image (machine image, template, ...) of version available to
	// the pool before the MachinePool asks for it. A provider whose image follows the
	// MachinePool's version by itself does nothing.
	MakeVersionAvailable(ctx context.Context, version string) error
}

// Cluster is one workload cluster a scenario runs on, made by the caller in the scenario's Shape.
type Cluster interface {
	Pool
	// Client reaches the management cluster: the kit reads and writes the MachinePool, its
	// Cluster, the Cluster's control plane (through its contract-versioned reference) and the
	// MachinePool's bootstrap config with it, as a user's apply does.
	Client() client.Client
	// MachinePool names the pool's MachinePool; its Cluster's control plane is upgraded with it.
	MachinePool() client.ObjectKey
}

// The optional interfaces follow: a Cluster may implement any of them, and a scenario whose
// Needs names one the Cluster lacks is not runnable on it (Scenario.RunnableOn).

// Gated is a Cluster whose pool says why it waits: reason is "" when it does not wait, and
// "ControlPlaneOlder" (skew.ControlPlaneOlder) while it holds back a version the control plane
// does not run yet; message is the user's explanation (a condition's message), which
// pool-alone/ahead-and-back expects to name both versions.
type Gated interface {
	Gate(ctx context.Context) (reason, message string, err error)
}

// ImageWriter is a Cluster whose pool's image is written apart from the MachinePool's version
// (CAPDMP's customImage, a launch template): a user's apply writes it too. SetImage writes the
// image of version, which MakeVersionAvailable made available.
type ImageWriter interface {
	SetImage(ctx context.Context, version string) error
}

// ControlPlaneWriter is a Cluster whose control plane moves to a version by more than its
// spec.version, for instance a machine template that names the image of its version (CAPD's
// DockerMachineTemplate with a customImage): SetControlPlaneVersion writes the version and what
// goes with it at once, as a user's apply of the regenerated manifest does. Scenarios need it
// nowhere; a Cluster without it gets spec.version alone.
type ControlPlaneWriter interface {
	SetControlPlaneVersion(ctx context.Context, version string) error
}

// Restarter is a Cluster whose provider's controllers can be restarted mid-scenario.
// RestartProvider returns once the restarted controllers run.
type Restarter interface {
	RestartProvider(ctx context.Context) error
}

// BootstrapRecorder is a Cluster whose pool records the bootstrap data it used: the data current
// when the pool began to wait (an identifier such as a hash), and the data each instance of
// version joined with, by instance name.
type BootstrapRecorder interface {
	BootstrapDataAtPause(ctx context.Context) (string, error)
	BootstrapData(ctx context.Context, version string) (map[string]string, error)
}

// ControlPlaneWaiter is a Cluster that knows better than the contract when its control plane
// runs version on replicas machines, ready (say, every machine up to date); progress describes
// where it stands. Without it the kit reads the control plane's status.versions.
type ControlPlaneWaiter interface {
	ControlPlaneAt(ctx context.Context, version string, replicas int32) (done bool, progress string, err error)
}

// Observer is a Cluster that samples its versions better than the contract does, for instance
// from the kube-apiservers themselves and the pool's Nodes; without it the kit reads the control
// plane's status.versions and the pool's Instances. Source is called once per scenario run or
// Watch; the Source is closed at the end when it is an io.Closer.
type Observer interface {
	Source() Source
}

// Source reads a cluster's versions for the monitor.
type Source interface {
	// Observe reads the versions as of one moment, within about two seconds (its context's
	// deadline). It reads the control plane before the pool: versions only rise during an
	// upgrade, so a pool read later can only look newer, and a sample errs toward counting a
	// violation, never toward missing one. A sample it could not read whole is an error: the
	// monitor counts it apart (Coverage.Unknown), never as "no violation".
	Observe(ctx context.Context) (Sample, error)
}

// Sample is what a Source read of a cluster at one moment. A Source fills the versions; the
// monitor sets At.
type Sample struct {
	At time.Time
	// APIServers are the versions of the kube-apiservers that serve: read from the servers where
	// the Source can reach them, else the control plane's status.versions.
	APIServers []string
	// Instances are the versions of the pool's instances: the kubelet each runs or is about to.
	Instances []string
	// Kubelets are the kubeletVersions of the pool instances' Nodes, where the Source reads them.
	Kubelets []string
	// ControlPlaneStatus is the control plane's status.versions, what a gate reads; it trails the
	// kube-apiservers while an old machine goes. For the timeline and Latency.FromStatus.
	ControlPlaneStatus []string
	// Gate is the pool's own word on why it waits, "" when it does not or cannot say; for the
	// timeline.
	Gate string
}

// String is the sample as a timeline shows it: each kind of version summarized, the gate's word
// or "admitted".
func (s Sample) String() string {
	gate := s.Gate
	if gate == "" {
		gate = "admitted"
	}
	return fmt.Sprintf("apiservers %-24s control plane status %-16s pool instances %-24s pool kubelets %-24s gate %s",
		summarize(s.APIServers), summarize(s.ControlPlaneStatus), summarize(s.Instances), summarize(s.Kubelets), gate)
}
