// Package e2e is CAPDMP's end-to-end suite on Cluster API's test framework
// (sigs.k8s.io/cluster-api/test/framework): a kind management cluster with Cluster API v1.14,
// CAPD and CAPDMP installed by clusterctl, and workload clusters whose workers are CAPDMP
// MachinePools. The suite is built only with the e2e build tag; see README.md for how to run it.
package e2e
