// Package kind tests a management cluster deployed the way users deploy CAPDMP: the kind cluster
// of `make kind-management` (hack/kind-management.sh), on which `clusterctl init` installed
// cert-manager, Cluster API, kubeadm, CAPD and CAPDMP from the local repository. Its tests carry
// the build tag kind and run with `make test-kind` against the cluster KUBECONFIG names; `make
// test` does not run them.
package kind
