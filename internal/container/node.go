package container

import (
	"maps"
	"strings"
)

const (
	// KindClusterLabel is the label kind and CAPD put on every node container, with the cluster name.
	KindClusterLabel = "io.x-k8s.kind.cluster"
	// KindRoleLabel is the label kind and CAPD put on every node container, with the node's role.
	KindRoleLabel = "io.x-k8s.kind.role"
	// KindWorkerRole is the role of every MachinePool node: pools never host control planes.
	KindWorkerRole = "worker"
	// KindControlPlaneRole is the role kind and CAPD label control-plane node containers with.
	KindControlPlaneRole = "control-plane"

	// kindStopSignal makes systemd, PID 1 of a kind node, shut down cleanly (kindest/node's STOPSIGNAL).
	kindStopSignal = "SIGRTMIN+3"
)

// NodeSpecInput is what differs between the node containers of a pool.
type NodeSpecInput struct {
	// Name is the container name; it is also the hostname, and kubeadm's default node name.
	Name  string
	Image string
	// ClusterName is the value of the kind cluster label (the Cluster API Cluster's name).
	ClusterName string
	// Network is the Docker network to join; "host" shares the host's network namespace.
	Network string
	// Labels are added to the kind labels (CAPDMP's own labels: pool, version, data hash...).
	Labels      map[string]string
	ExtraMounts []Mount
	// Env is passed to the node's entrypoint, e.g. proxy settings.
	Env []string
	// IPv6 enables IPv6 inside the node, as kind does for IPv6 and dual-stack clusters.
	IPv6 bool
}

// NodeSpec returns the spec of a kind worker node container: the run options kind and CAPD use
// for kindest/node images, which boot systemd and run containerd and the kubelet inside.
func NodeSpec(in NodeSpecInput) Spec {
	labels := map[string]string{}
	maps.Copy(labels, in.Labels)
	// The kind labels go last so that a caller cannot make a node look like another cluster's.
	labels[KindClusterLabel] = in.ClusterName
	labels[KindRoleLabel] = KindWorkerRole

	spec := Spec{
		Name:    in.Name,
		Image:   in.Image,
		Network: in.Network,
		Labels:  labels,
		Env:     append([]string(nil), in.Env...),
		// Nested containers need privileges; --privileged also sets up mounts (e.g. /dev, /sys
		// read-write) that kindest/node relies on, which capabilities alone would not give.
		Privileged:  true,
		SecurityOpt: []string{"seccomp=unconfined", "apparmor=unconfined"},
		// kindest/node images since kind 0.20 expect their own cgroup namespace; it is also what
		// lets the kubelet see a consistent cgroup root with cgroups v1 hosts.
		CgroupnsMode: "private",
		Tmpfs: map[string]string{
			"/tmp": "", // various things depend on a working /tmp
			"/run": "", // systemd wants a writable /run
		},
		// Pods, images and logs live in an anonymous volume, not in the container's overlay
		// layer, and go away with the container.
		Volumes: []string{"/var"},
		// Tty so that the entrypoint and systemd write readable logs.
		Tty:        true,
		StopSignal: kindStopSignal,
		// Restart on engine restarts but do not retry a node that failed for good.
		RestartPolicy: "on-failure",
		MaxRestarts:   1,
		// The node's entrypoint must be PID 1, not docker-init.
		Init: new(bool),
	}
	if sharesHostname(in.Network) {
		// Docker rejects a hostname for containers that share another namespace's UTS.
		spec.Hostname = ""
	} else {
		spec.Hostname = in.Name
	}
	spec.Mounts = append(spec.Mounts, in.ExtraMounts...)
	// Some Kubernetes components read kernel modules information.
	spec.Mounts = append(spec.Mounts, Mount{Source: "/lib/modules", Target: "/lib/modules", ReadOnly: true})
	// Docker refuses network sysctls in the host's network namespace.
	if in.IPv6 && in.Network != HostNetwork {
		spec.Sysctls = map[string]string{
			"net.ipv6.conf.all.disable_ipv6": "0",
			"net.ipv6.conf.all.forwarding":   "1",
		}
	}
	return spec
}

// sharesHostname tells whether containers on this network use another namespace's hostname.
func sharesHostname(network string) bool {
	return network == HostNetwork || strings.HasPrefix(network, "container:")
}
