// Package skewupstream holds the tests that pin pkg/skew to the Cluster API this project builds
// with: the field paths it reads on a KubeadmControlPlane and the kubeadm API version the kubeadm
// bootstrap provider renders. They live in this module, not in pkg/skew's, so that pkg/skew's
// go.mod requires no Cluster API module and an importer keeps the Cluster API version it pins.
package skewupstream
