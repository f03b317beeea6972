// Package config holds CAPDMP's generated manifests as files for kustomize, and embeds the ones
// programs need without the repository at hand: the CRDs and the webhook configuration, which the
// local management plane (internal/managementplane) installs.
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
