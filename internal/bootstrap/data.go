// Package bootstrap reads Cluster API bootstrap data and turns it into the commands that bootstrap
// a node container: cloud-init's cloud-config and Ignition, as CABPK renders them for kubeadm join,
// become a list of exec steps run with /bin/sh inside the node.
//
// Bootstrap data holds credentials (the bootstrap token, sometimes keys). Nothing in this package
// logs it, and Data prints as a summary (format and hash) whatever the formatter.
package bootstrap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// FormatCloudConfig is cloud-init's cloud-config, the default format of Cluster API bootstrap data.
	FormatCloudConfig = "cloud-config"
	// FormatIgnition is Ignition JSON (CABPK renders spec version 2.3).
	FormatIgnition = "ignition"

	// valueKey and formatKey are the keys of a bootstrap data Secret, as the Cluster API bootstrap
	// provider contract defines them.
	valueKey  = "value"
	formatKey = "format"
)

// Data is the bootstrap data of a node.
type Data struct {
	// Value is the raw data: a cloud-config document or Ignition JSON.
	Value []byte
	// Format is FormatCloudConfig or FormatIgnition.
	Format string
	// Hash is the hex sha256 of Value. It identifies the data on a container (a Docker label) and
	// tells fresh data from stale without keeping a copy. At 64 characters it is one too long for
	// a Kubernetes label value: see HashLabelValue.
	Hash string
	// Templates are the templates the bootstrap provider rendered files of the data from, by path
	// (Read fills them in from the KubeadmConfig that renders the data): Configuration takes out
	// of those files the control plane version CABPK substitutes. They are not part of Hash.
	Templates []FileTemplate
}

// NewData returns the Data of a value; an empty format means cloud-config.
func NewData(value []byte, format string) (*Data, error) {
	if format == "" {
		format = FormatCloudConfig
	}
	if format != FormatCloudConfig && format != FormatIgnition {
		return nil, fmt.Errorf("unsupported bootstrap data format %q: must be %q or %q", format, FormatCloudConfig, FormatIgnition)
	}
	if len(value) == 0 {
		return nil, fmt.Errorf("bootstrap data is empty")
	}
	sum := sha256.Sum256(value)
	return &Data{Value: value, Format: format, Hash: hex.EncodeToString(sum[:])}, nil
}

// hashLabelLength keeps a hash within a Kubernetes label value (63 characters at most).
const hashLabelLength = 32

// HashLabelValue shortens a Hash to fit a Kubernetes label value: its first 32 hex digits (128
// bits), plenty to tell two renderings of bootstrap data apart. Docker labels take the full Hash;
// compare the two through this function.
func HashLabelValue(hash string) string {
	if len(hash) > hashLabelLength {
		return hash[:hashLabelLength]
	}
	return hash
}

// Read reads the bootstrap data Secret namespace/name. Pass a reader that goes to the API server
// (the manager's APIReader), not the cache: the data changes in place when the bootstrap provider
// refreshes its token, and caching every Secret of the cluster is what a controller must not do.
//
// When a KubeadmConfig controls the Secret, Read also reads its templated files (Templates, and
// the Secrets they take content from), so that every reader of the data computes the same
// Configuration: the pool's status and the labels of its containers are compared.
func Read(ctx context.Context, c client.Reader, namespace, name string) (*Data, error) {
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
		return nil, fmt.Errorf("failed to read bootstrap data Secret %s/%s: %w", namespace, name, err)
	}
	value, ok := secret.Data[valueKey]
	if !ok || len(value) == 0 {
		return nil, fmt.Errorf("bootstrap data Secret %s/%s has no %q", namespace, name, valueKey)
	}
	data, err := NewData(value, string(secret.Data[formatKey]))
	if err != nil {
		return nil, fmt.Errorf("bootstrap data Secret %s/%s: %w", namespace, name, err)
	}
	if data.Templates, err = kubeadmConfigTemplates(ctx, c, secret); err != nil {
		return nil, err
	}
	return data, nil
}

// String describes the data without its content.
func (d Data) String() string {
	return fmt.Sprintf("bootstrap data (%s, %d bytes, sha256 %s)", d.Format, len(d.Value), d.Hash)
}

// GoString keeps %#v from printing the content.
func (d Data) GoString() string {
	return d.String()
}

// MarshalLog keeps logr loggers from printing the content.
func (d Data) MarshalLog() any {
	return d.summary()
}

// MarshalJSON keeps JSON log encoders from printing the content. Data is not meant to be stored.
func (d Data) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.summary())
}

func (d Data) summary() map[string]any {
	return map[string]any{"format": d.Format, "bytes": len(d.Value), "sha256": d.Hash}
}
