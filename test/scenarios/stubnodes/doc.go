// Package stubnodes is the first tier of CAPDMP's scenarios, on this machine without kind or a
// registry: a management API server (envtest) with Cluster API v1.14.2's own Cluster, Machine,
// MachinePool and KubeadmConfig reconcilers in-process beside CAPDMP's, a workload API server with
// bootstrap token authentication, and a real Docker engine running the stub node images of
// test/stubnode.
//
// TestScenarios runs pkg/conformance's scenario table with the control plane driven at the
// contract level: a goroutine plays a control plane provider, writing the KubeadmControlPlane's
// status.versions as it replaces machines one at a time. The other tests are the pool's
// lifecycle. The same table runs on real nodes in test/scenarios/realnodes and on a deployed
// management cluster in test/e2e; test/smoke is the real node images' smoke test.
package stubnodes
