package main

import (
	_ "github.com/blang/semver/v4"
	_ "github.com/moby/moby/client"
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
	_ "sigs.k8s.io/cluster-api/api/core/v1beta2"
	_ "sigs.k8s.io/cluster-api/core/reconcilers/machinepool"
	_ "sigs.k8s.io/cluster-api/bootstrap/kubeadm/reconcilers/kubeadmconfig"
	_ "sigs.k8s.io/cluster-api/controlplane/kubeadm/reconcilers/kubeadmcontrolplane"
	_ "sigs.k8s.io/cluster-api/test/infrastructure/kind"
	_ "sigs.k8s.io/cluster-api/test/framework"
	_ "sigs.k8s.io/cluster-api/util/patch"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
)

func main() {}
