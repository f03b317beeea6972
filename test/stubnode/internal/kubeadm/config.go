// Package kubeadm is the stub kubeadm of CAPDMP's test node image: it implements `kubeadm join
// --config <file>` far enough to prove a bootstrap token against a real kube-apiserver and to
// register the Node the kubelet would register, and `kubeadm version`. It runs no kubelet.
package kubeadm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cluster-bootstrap/util/tokens"
	"sigs.k8s.io/yaml"
)

const kubeadmGroup = "kubeadm.k8s.io"

// JoinConfiguration is the part of a kubeadm JoinConfiguration (v1beta3 or v1beta4) the stub reads.
type JoinConfiguration struct {
	APIVersion       string           `json:"apiVersion"`
	Kind             string           `json:"kind"`
	Discovery        Discovery        `json:"discovery"`
	NodeRegistration NodeRegistration `json:"nodeRegistration"`
	// Timeouts is v1beta4's; v1beta3 has discovery.timeout and no TLS bootstrap timeout.
	Timeouts *struct {
		Discovery    *metav1.Duration `json:"discovery,omitempty"`
		TLSBootstrap *metav1.Duration `json:"tlsBootstrap,omitempty"`
	} `json:"timeouts,omitempty"`
}

// Discovery says how the node finds and trusts the cluster.
type Discovery struct {
	BootstrapToken *BootstrapTokenDiscovery `json:"bootstrapToken,omitempty"`
	// TLSBootstrapToken authenticates the node's registration; it defaults to the discovery token.
	TLSBootstrapToken string           `json:"tlsBootstrapToken,omitempty"`
	Timeout           *metav1.Duration `json:"timeout,omitempty"`
	File              *struct {
		KubeConfigPath string `json:"kubeConfigPath"`
	} `json:"file,omitempty"`
}

// BootstrapTokenDiscovery is discovery.bootstrapToken.
type BootstrapTokenDiscovery struct {
	Token                    string   `json:"token"`
	APIServerEndpoint        string   `json:"apiServerEndpoint"`
	CACertHashes             []string `json:"caCertHashes,omitempty"`
	UnsafeSkipCAVerification bool     `json:"unsafeSkipCAVerification,omitempty"`
}

// NodeRegistration is nodeRegistration.
type NodeRegistration struct {
	Name             string          `json:"name,omitempty"`
	KubeletExtraArgs json.RawMessage `json:"kubeletExtraArgs,omitempty"`
	Taints           []corev1.Taint  `json:"taints,omitempty"`
}

// ErrUnsupportedAPIVersion says that this kubeadm version cannot read the configuration's API.
var ErrUnsupportedAPIVersion = errors.New("unsupported kubeadm configuration API version")

// ReadJoinConfiguration finds the JoinConfiguration among the YAML documents of a kubeadm config
// file and checks that a kubeadm of kubeadmVersion can read its apiVersion.
func ReadJoinConfiguration(data []byte, kubeadmVersion semver.Version) (*JoinConfiguration, error) {
	var found *JoinConfiguration
	documents := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := documents.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading document %d: %w", i, err)
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("document %d is not valid YAML: %w", i, err)
		}
		if meta.Kind == "" {
			continue
		}
		group, _, _ := strings.Cut(meta.APIVersion, "/")
		if group != kubeadmGroup {
			// kubeadm reads component configs (KubeletConfiguration...) beside its own kinds.
			continue
		}
		if err := CheckAPIVersion(meta.APIVersion, kubeadmVersion); err != nil {
			return nil, err
		}
		if meta.Kind != "JoinConfiguration" {
			continue
		}
		jc := &JoinConfiguration{}
		if err := yaml.Unmarshal(doc, jc); err != nil {
			return nil, fmt.Errorf("reading the JoinConfiguration: %w", err)
		}
		found = jc
	}
	if found == nil {
		return nil, errors.New("no JoinConfiguration (apiVersion kubeadm.k8s.io/...) in the configuration file")
	}
	return found, nil
}

// kubeadmAPIVersions are the kubeadm configuration APIs and the kubeadm minor versions that read
// them: v1beta3 from 1.22, v1beta4 from 1.31 (v1beta2 was removed in 1.26).
var kubeadmAPIVersions = map[string]struct{ firstMinor, lastMinor uint64 }{
	"kubeadm.k8s.io/v1beta2": {15, 25},
	"kubeadm.k8s.io/v1beta3": {22, 1<<63 - 1},
	"kubeadm.k8s.io/v1beta4": {31, 1<<63 - 1},
}

// CheckAPIVersion returns ErrUnsupportedAPIVersion when a kubeadm of kubeadmVersion cannot read
// configuration of apiVersion, as the real one fails to decode it.
func CheckAPIVersion(apiVersion string, kubeadmVersion semver.Version) error {
	r, ok := kubeadmAPIVersions[apiVersion]
	if ok && kubeadmVersion.Major == 1 && kubeadmVersion.Minor >= r.firstMinor && kubeadmVersion.Minor <= r.lastMinor {
		return nil
	}
	return fmt.Errorf("%w: kubeadm v%s cannot read apiVersion %q (it reads %s)",
		ErrUnsupportedAPIVersion, kubeadmVersion, apiVersion, strings.Join(ReadableAPIVersions(kubeadmVersion), ", "))
}

// ReadableAPIVersions lists the kubeadm configuration APIs a kubeadm of this version reads.
func ReadableAPIVersions(kubeadmVersion semver.Version) []string {
	var out []string
	for _, v := range []string{"kubeadm.k8s.io/v1beta2", "kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4"} {
		r := kubeadmAPIVersions[v]
		if kubeadmVersion.Major == 1 && kubeadmVersion.Minor >= r.firstMinor && kubeadmVersion.Minor <= r.lastMinor {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

// KubeletExtraArgsMap returns nodeRegistration.kubeletExtraArgs, a map in v1beta3 and a list of
// {name, value} in v1beta4; for a repeated name in v1beta4 the last value wins.
func (n NodeRegistration) KubeletExtraArgsMap() (map[string]string, error) {
	out := map[string]string{}
	raw := bytes.TrimSpace(n.KubeletExtraArgs)
	if len(raw) == 0 || string(raw) == "null" {
		return out, nil
	}
	if raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, fmt.Errorf("reading nodeRegistration.kubeletExtraArgs: %w", err)
		}
		return out, nil
	}
	var list []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("reading nodeRegistration.kubeletExtraArgs: %w", err)
	}
	for _, a := range list {
		out[a.Name] = a.Value
	}
	return out, nil
}

// DiscoveryTimeout is how long discovery may retry an API server that does not answer yet.
func (c *JoinConfiguration) DiscoveryTimeout(def time.Duration) time.Duration {
	if c.Timeouts != nil && c.Timeouts.Discovery != nil && c.Timeouts.Discovery.Duration > 0 {
		return c.Timeouts.Discovery.Duration
	}
	if c.Discovery.Timeout != nil && c.Discovery.Timeout.Duration > 0 {
		return c.Discovery.Timeout.Duration
	}
	return def
}

// TLSBootstrapTimeout is how long the node's registration may retry an API server that is
// unavailable or overloaded, as the kubelet's TLS bootstrap does.
func (c *JoinConfiguration) TLSBootstrapTimeout(def time.Duration) time.Duration {
	if c.Timeouts != nil && c.Timeouts.TLSBootstrap != nil && c.Timeouts.TLSBootstrap.Duration > 0 {
		return c.Timeouts.TLSBootstrap.Duration
	}
	return def
}

// ParseToken checks a bootstrap token "<id>.<secret>" and returns its ID; its error does not
// hold the token.
func ParseToken(token string) (id string, err error) {
	if id, _, err = tokens.ParseToken(token); err != nil {
		return "", errors.New(`the bootstrap token does not match the format "[a-z0-9]{6}.[a-z0-9]{16}"`)
	}
	return id, nil
}
