// Package manifests tests the files clusterctl and Tilt consume: the kustomize build of config/
// (infrastructure-components.yaml), metadata.yaml and the cluster templates in templates/.
package manifests
