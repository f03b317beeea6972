package bootstrap

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/util/tokens"
	"sigs.k8s.io/yaml"
)

var (
	// ErrNoJoinConfiguration is returned when the data holds no kubeadm JoinConfiguration, e.g. it
	// was not rendered by CABPK for a joining node.
	ErrNoJoinConfiguration = errors.New("no kubeadm JoinConfiguration in the bootstrap data")

	// ErrNoBootstrapToken is returned when the JoinConfiguration discovers the cluster without a
	// bootstrap token (a discovery kubeconfig file): there is no token to keep fresh.
	ErrNoBootstrapToken = errors.New("the kubeadm JoinConfiguration has no bootstrap token")
)

const kubeadmGroup = "kubeadm.k8s.io"

// anyBootstrapToken finds bootstrap tokens wherever they are in a text, to hash data without
// them (Configuration) or to redact them (Redact): k8s.io/cluster-bootstrap's token format
// (bootstrapapi.BootstrapTokenPattern, "<id>.<secret>" in [a-z0-9]), unanchored.
var anyBootstrapToken = regexp.MustCompile(fmt.Sprintf(`\b[a-z0-9]{%d}\.[a-z0-9]{%d}\b`,
	bootstrapapi.BootstrapTokenIDBytes, bootstrapapi.BootstrapTokenSecretBytes))

// joinConfiguration is the part of a kubeadm JoinConfiguration (v1beta3, v1beta4) read here.
type joinConfiguration struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Discovery  struct {
		BootstrapToken *struct {
			Token string `json:"token"`
		} `json:"bootstrapToken"`
		TLSBootstrapToken string `json:"tlsBootstrapToken"`
	} `json:"discovery"`
	NodeRegistration struct {
		// KubeletExtraArgs is a map in v1beta3, a list of name and value in v1beta4.
		KubeletExtraArgs json.RawMessage `json:"kubeletExtraArgs"`
	} `json:"nodeRegistration"`
	Patches *struct {
		Directory string `json:"directory"`
	} `json:"patches"`
}

// JoinConfigurationAPIVersion returns the apiVersion of the kubeadm JoinConfiguration in the data,
// e.g. "kubeadm.k8s.io/v1beta4". CABPK picks it from the joining Machine's Kubernetes version when
// it renders the data (v1beta3 up to 1.30, v1beta4 from 1.31), so it tells which versions the data
// was rendered for: a kubeadm older than 1.31 cannot read v1beta4.
func JoinConfigurationAPIVersion(data *Data) (string, error) {
	jc, err := findJoinConfiguration(data)
	if err != nil {
		return "", err
	}
	return jc.APIVersion, nil
}

// BootstrapTokenID returns the ID (the public part) of the bootstrap token the data joins with; a
// workload cluster keeps that token in kube-system/bootstrap-token-<id>. The secret part is never
// returned.
func BootstrapTokenID(data *Data) (string, error) { //nolint:revive // "bootstrap token" is the Kubernetes term; a TokenID could be any token
	jc, err := findJoinConfiguration(data)
	if err != nil {
		return "", err
	}
	token := jc.Discovery.TLSBootstrapToken
	if jc.Discovery.BootstrapToken != nil && jc.Discovery.BootstrapToken.Token != "" {
		token = jc.Discovery.BootstrapToken.Token
	}
	if token == "" {
		return "", ErrNoBootstrapToken
	}
	id, _, err := tokens.ParseToken(token)
	if err != nil {
		// Not wrapping err, which quotes the token: it is a credential.
		return "", fmt.Errorf("the bootstrap token of the kubeadm JoinConfiguration is malformed: not of the form %q", bootstrapapi.BootstrapTokenPattern)
	}
	return id, nil
}

// findJoinConfiguration looks for a JoinConfiguration in every file the data writes, whatever
// its path: CABPK uses /run/kubeadm/kubeadm-join-config.yaml in cloud-config and
// /etc/kubeadm.yml in Ignition.
func findJoinConfiguration(data *Data) (*joinConfiguration, error) {
	if data == nil {
		return nil, ErrNoJoinConfiguration
	}
	files, err := dataFiles(data)
	if err != nil {
		return nil, fmt.Errorf("failed to read files of %s: %w", data.Format, err)
	}
	for _, f := range files {
		if !bytes.Contains(f.Content, []byte("JoinConfiguration")) {
			continue
		}
		reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(f.Content)))
		for {
			doc, err := reader.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("failed to read YAML documents of %s: %w", f.Path, err)
			}
			jc := &joinConfiguration{}
			if err := yaml.Unmarshal(doc, jc); err != nil {
				// Not every file is YAML; only a well-formed JoinConfiguration counts.
				continue
			}
			group, _, _ := strings.Cut(jc.APIVersion, "/")
			if jc.Kind == "JoinConfiguration" && group == kubeadmGroup {
				return jc, nil
			}
		}
	}
	return nil, ErrNoJoinConfiguration
}

// dataFiles returns the files the data writes, decoded, without substituting instance variables.
func dataFiles(data *Data) ([]file, error) {
	switch data.Format {
	case FormatCloudConfig, "":
		// Instance variables do not matter here, but unrendered ones could break the YAML.
		value, err := renderJinja(data.Value, Vars{Hostname: "node", InstanceID: "node"})
		if err != nil {
			value = data.Value
		}
		cfg, _, err := parseCloudConfig(value)
		if err != nil {
			return nil, err
		}
		return cloudConfigFiles(cfg)
	case FormatIgnition:
		cfg, err := parseIgnition(data.Value)
		if err != nil {
			return nil, err
		}
		return ignitionFiles(cfg)
	}
	return nil, fmt.Errorf("unsupported format %q", data.Format)
}

// IgnoredModules lists what the data asks for that Commands does not do, e.g. to tell the user
// in an event: cloud-config modules other than bootcmd, write_files and runcmd (ntp: containers
// share the host's clock; users, disk_setup, mounts: nodes are not logged into and have no disks
// of their own), Ignition users, disks, filesystems and networkd units.
func IgnoredModules(data *Data) ([]string, error) {
	if data == nil {
		return nil, nil
	}
	switch data.Format {
	case FormatCloudConfig, "":
		_, keys, err := parseCloudConfig(data.Value)
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(keys, func(k string) bool { return slices.Contains(cloudConfigModules, k) }), nil
	case FormatIgnition:
		cfg, err := parseIgnition(data.Value)
		if err != nil {
			return nil, err
		}
		var ignored []string
		for _, s := range []struct {
			name  string
			count int
		}{
			{"passwd.users", len(cfg.Passwd.Users)},
			{"storage.disks", len(cfg.Storage.Disks)},
			{"storage.raid", len(cfg.Storage.Raid)},
			{"storage.filesystems", len(cfg.Storage.Filesystems)},
			{"networkd.units", len(cfg.Networkd.Units)},
		} {
			if s.count > 0 {
				ignored = append(ignored, s.name)
			}
		}
		return ignored, nil
	}
	return nil, fmt.Errorf("unsupported format %q", data.Format)
}
