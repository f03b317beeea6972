// Package local runs CAPDMP's scenarios on this machine, without kind or a registry: a management
// API server (envtest) with Cluster API v1.14.2's own Cluster, Machine, MachinePool and
// KubeadmConfig reconcilers in-process beside CAPDMP's, a workload API server with bootstrap token
// authentication, and a real Docker engine running the stub node images of test/nodeimage.
//
// The control plane is driven at the contract level: tests write the KubeadmControlPlane's
// status.versions as a control plane provider would while it upgrades machine by machine. The
// real tier, with real kubelets and the real KubeadmControlPlane, is test/local/real (on
// test/realworld); test/realnode is the node images' smoke test.
package local
