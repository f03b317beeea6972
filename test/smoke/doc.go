// Package smoke holds the smoke test of CAPDMP's locally built node images
// (hack/node-images, docs/node-images.md): for each Kubernetes version, a control-plane node
// started with CAPD's own container runtime code and run options, kubeadm init behind CAPD's
// haproxy load-balancer image, one worker joined, both Ready and a pod running on the worker.
//
// It needs a Docker engine and the images, and runs only with the build tag e2e_local:
//
//	make test-smoke
package smoke
