// Package config holds CAPDMP's generated manifests as files for kustomize, and embeds the ones
// programs need without the repository at hand: the CRDs, the webhook configuration and the
// manager's ClusterRole, which the local management plane (internal/test/apiserver) installs.
package config

import "embed"

// CRDs are the CustomResourceDefinitions `make generate` writes to crd/bases.
//
//go:embed crd/bases/*.yaml
var CRDs embed.FS

// WebhookManifests is the webhook configuration `make generate` writes.
//
//go:embed webhook/manifests.yaml
var WebhookManifests []byte

// ManagerRole is the manager's ClusterRole `make generate` writes from the controllers' RBAC
// markers: what the manager may do, and all it may do.
//
//go:embed rbac/role.yaml
var ManagerRole []byte
