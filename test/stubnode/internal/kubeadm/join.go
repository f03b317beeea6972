package kubeadm

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"sigs.k8s.io/yaml"
)

// Exit codes of the stub, documented in test/stubnode/README.md. The real kubeadm exits 1 on any
// failure; the stub says more so that tests can tell failures apart.
const (
	ExitFailure           = 1 // anything else: unreadable file, API server unreachable, registration failed
	ExitUsage             = 2 // a command or flag the stub does not implement
	ExitUnsupportedConfig = 3 // the configuration's apiVersion is one this kubeadm version cannot read
	ExitTokenRejected     = 4 // the API server answered 401/403 to the bootstrap token
	ExitUntrustedCA       = 5 // the cluster CA could not be discovered or matches no caCertHashes pin
	ExitPreflight         = 6 // a preflight check failed (the node has joined already)
)

// ExitError is an error with the process exit code it stands for.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

func exitErr(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// JoinOptions are the inputs of Join.
type JoinOptions struct {
	ConfigPath string
	// IgnorePreflightErrors are check names (or "all") from --ignore-preflight-errors.
	IgnorePreflightErrors []string
	// KubeadmVersion is the version of the node image (/kind/version).
	KubeadmVersion semver.Version
	// Hostname is the node name when nodeRegistration.name is empty.
	Hostname string
	// KubernetesDir is /etc/kubernetes; the stub writes kubelet.conf there once joined.
	KubernetesDir string
	// DefaultDiscoveryTimeout bounds retries against an API server that does not answer yet,
	// unless the configuration sets a discovery timeout.
	DefaultDiscoveryTimeout time.Duration
	// DefaultTLSBootstrapTimeout bounds retries of the Node's registration against an API server
	// that is unavailable or overloaded, unless the configuration sets timeouts.tlsBootstrap.
	DefaultTLSBootstrapTimeout time.Duration
	// UnauthorizedGrace is how long a 401 is retried: the API server's bootstrap token
	// authenticator sees a new token Secret a moment after it is created.
	UnauthorizedGrace time.Duration
	Out               io.Writer
}

// stubAnnotation marks Nodes registered by this stub rather than by a kubelet.
const stubAnnotation = "test.capdmp.dev/stub-kubelet"

// Join runs `kubeadm join --config`: read the JoinConfiguration, run the preflight check,
// discover and pin the cluster CA, prove the bootstrap token, register the Node as the kubelet
// would (with the token: the test cluster grants the bootstrappers group what the kubelet's
// client certificate would get through the CSR flow), and mark it Ready.
func Join(ctx context.Context, o JoinOptions) error {
	logf := func(format string, args ...any) { _, _ = fmt.Fprintf(o.Out, format+"\n", args...) }

	logf("[preflight] Reading configuration from the %q file", o.ConfigPath)
	data, err := os.ReadFile(o.ConfigPath)
	if err != nil {
		return exitErr(ExitFailure, "unable to read config from %q: %w", o.ConfigPath, err)
	}
	cfg, err := ReadJoinConfiguration(data, o.KubeadmVersion)
	if err != nil {
		if errors.Is(err, ErrUnsupportedAPIVersion) {
			return &ExitError{Code: ExitUnsupportedConfig, Err: err}
		}
		return exitErr(ExitFailure, "%w", err)
	}
	logf("[preflight] Read a JoinConfiguration of apiVersion %s with kubeadm v%s", cfg.APIVersion, o.KubeadmVersion)

	logf("[preflight] Running pre-flight checks")
	kubeletConf := filepath.Join(o.KubernetesDir, "kubelet.conf")
	if _, err := os.Stat(kubeletConf); err == nil && !ignored(o.IgnorePreflightErrors, "FileAvailable--etc-kubernetes-kubelet.conf") {
		return exitErr(ExitPreflight, "[preflight] Some fatal errors occurred:\n\t[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: %s already exists (this node has joined already)", kubeletConf)
	}

	bt := cfg.Discovery.BootstrapToken
	if bt == nil {
		return exitErr(ExitFailure, "this stub implements only discovery.bootstrapToken (discovery.file is not supported)")
	}
	if bt.APIServerEndpoint == "" {
		return exitErr(ExitFailure, "discovery.bootstrapToken.apiServerEndpoint is empty")
	}
	if len(bt.CACertHashes) == 0 && !bt.UnsafeSkipCAVerification {
		return exitErr(ExitFailure, "discovery.bootstrapToken: using token-based discovery without caCertHashes can be unsafe; set unsafeSkipCAVerification to continue")
	}
	if _, err := ParseToken(bt.Token); err != nil {
		return exitErr(ExitFailure, "discovery.bootstrapToken.token: %w", err)
	}
	token := cfg.Discovery.TLSBootstrapToken
	if token == "" {
		token = bt.Token
	}
	tokenID, err := ParseToken(token)
	if err != nil {
		return exitErr(ExitFailure, "discovery.tlsBootstrapToken: %w", err)
	}

	deadline := time.Now().Add(cfg.DiscoveryTimeout(o.DefaultDiscoveryTimeout))
	logf("[discovery] Discovering the cluster CA at https://%s (anonymous, cluster-info ConfigMap)", bt.APIServerEndpoint)
	ca, err := discoverCA(ctx, bt, deadline, logf)
	if err != nil {
		return err
	}

	c := &apiClient{endpoint: bt.APIServerEndpoint, token: token, ca: ca}
	logf("[discovery] Proving bootstrap token %q against the API server (GET /api)", tokenID)
	if err := c.proveToken(ctx, tokenID, deadline, o.UnauthorizedGrace, logf); err != nil {
		return err
	}

	name := cfg.NodeRegistration.Name
	if name == "" {
		name = o.Hostname
	}
	name = strings.ToLower(name)
	if name == "" {
		return exitErr(ExitFailure, "no node name: nodeRegistration.name is empty and the hostname is unknown")
	}
	extra, err := cfg.NodeRegistration.KubeletExtraArgsMap()
	if err != nil {
		return exitErr(ExitFailure, "%w", err)
	}
	providerID := extra["provider-id"]
	if providerID == "" {
		providerID = "docker:////" + name
	}
	kubeletVersion := "v" + o.KubeadmVersion.String()
	logf("[kubelet-start] Registering Node %q (providerID %q, kubelet %s) with the bootstrap token", name, providerID, kubeletVersion)
	registrationDeadline := time.Now().Add(cfg.TLSBootstrapTimeout(o.DefaultTLSBootstrapTimeout))
	if err := c.registerNode(ctx, nodeFor(name, providerID, kubeletVersion, extra["node-labels"], cfg.NodeRegistration.Taints), registrationDeadline, logf); err != nil {
		return err
	}
	logf("[kubelet-start] Node %q is Ready", name)

	if err := writeKubeletConf(kubeletConf, bt.APIServerEndpoint, ca, name); err != nil {
		return exitErr(ExitFailure, "writing %s: %w", kubeletConf, err)
	}
	logf("")
	logf("This node has joined the cluster:")
	logf("* The stub kubelet registered Node %q, reported Ready with kubelet version %s.", name, kubeletVersion)
	logf("* No kubelet runs in this node (CAPDMP test node image).")
	return nil
}

func ignored(list []string, check string) bool {
	return slices.ContainsFunc(list, func(s string) bool {
		return strings.EqualFold(s, "all") || strings.EqualFold(s, check)
	})
}

// discoverCA reads the cluster CA from kube-public/cluster-info, as kubeadm's token discovery does,
// and checks it against the caCertHashes pins. The JWS signature of cluster-info is not checked:
// no bootstrap signer runs in the test API server.
func discoverCA(ctx context.Context, bt *BootstrapTokenDiscovery, deadline time.Time, logf func(string, ...any)) ([]byte, error) {
	insecure := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // kubeadm reads cluster-info insecurely, then pins the CA
	}
	url := "https://" + bt.APIServerEndpoint + "/api/v1/namespaces/kube-public/configmaps/cluster-info"
	var resp *http.Response
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
		if err != nil {
			return nil, exitErr(ExitFailure, "%w", err)
		}
		resp, err = insecure.Do(req)
		if err == nil && !unavailable(resp.StatusCode) {
			break
		}
		if err == nil {
			_ = resp.Body.Close()
			err = fmt.Errorf("cluster-info answered %s", resp.Status)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, exitErr(ExitFailure, "the API server at %s does not answer: %w", bt.APIServerEndpoint, err)
		}
		logf("[discovery] Failed to reach %s, retrying: %v", bt.APIServerEndpoint, err)
		time.Sleep(time.Second)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if bt.UnsafeSkipCAVerification {
			logf("[discovery] cluster-info not readable (%s); unsafeSkipCAVerification: not verifying the API server's certificate", resp.Status)
			return nil, nil
		}
		return nil, exitErr(ExitUntrustedCA, "cannot discover the cluster CA: GET kube-public/configmaps/cluster-info answered %s (kubeadm init publishes it for anonymous reads; a test harness must too)", resp.Status)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(body, &cm); err != nil {
		return nil, exitErr(ExitUntrustedCA, "reading the cluster-info ConfigMap: %w", err)
	}
	var kubeconfig struct {
		Clusters []struct {
			Cluster struct {
				CertificateAuthorityData []byte `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["kubeconfig"]), &kubeconfig); err != nil || len(kubeconfig.Clusters) == 0 {
		return nil, exitErr(ExitUntrustedCA, "the cluster-info ConfigMap holds no kubeconfig with a cluster (err: %v)", err)
	}
	ca := kubeconfig.Clusters[0].Cluster.CertificateAuthorityData
	if bt.UnsafeSkipCAVerification && len(bt.CACertHashes) == 0 {
		logf("[discovery] unsafeSkipCAVerification: trusting the cluster-info CA without a pin")
		return ca, nil
	}
	hashes, err := caHashes(ca)
	if err != nil {
		return nil, exitErr(ExitUntrustedCA, "the cluster-info CA: %w", err)
	}
	for _, h := range hashes {
		for _, pin := range bt.CACertHashes {
			if strings.EqualFold(pin, h) {
				logf("[discovery] Cluster CA %s matches a pinned caCertHash", h)
				return ca, nil
			}
		}
	}
	return nil, exitErr(ExitUntrustedCA, "the cluster CA found in cluster-info (%s) matches none of the caCertHashes %v", strings.Join(hashes, ", "), bt.CACertHashes)
}

// caHashes returns "sha256:<hex>" of the Subject Public Key Info of each certificate in pemData,
// kubeadm's caCertHashes format.
func caHashes(pemData []byte) ([]string, error) {
	var out []string
	for rest := pemData; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
		out = append(out, "sha256:"+hex.EncodeToString(sum[:]))
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// CACertHash is kubeadm's caCertHashes entry for a PEM CA certificate (the first in pemData).
func CACertHash(pemData []byte) (string, error) {
	h, err := caHashes(pemData)
	if err != nil {
		return "", err
	}
	return h[0], nil
}

// apiClient talks to the workload API server with the bootstrap token.
type apiClient struct {
	endpoint string
	token    string
	ca       []byte // nil: do not verify the server (unsafeSkipCAVerification)
	client   *http.Client
}

func (c *apiClient) http() *http.Client {
	if c.client != nil {
		return c.client
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.ca == nil {
		tlsConfig.InsecureSkipVerify = true // only with unsafeSkipCAVerification
	} else {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(c.ca)
		tlsConfig.RootCAs = pool
		if host, _, err := net.SplitHostPort(c.endpoint); err == nil {
			tlsConfig.ServerName = host
		}
	}
	c.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	return c.client
}

// do sends a request with the bootstrap token and returns the status code and body.
func (c *apiClient) do(ctx context.Context, method, path, contentType string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://"+c.endpoint+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "capdmp-stub-kubeadm")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, nil
}

// proveToken makes an authenticated GET /api; 401 and 403 mean the token is not accepted.
func (c *apiClient) proveToken(ctx context.Context, tokenID string, deadline time.Time, grace time.Duration, logf func(string, ...any)) error {
	var firstRejection time.Time
	for {
		code, body, err := c.do(ctx, http.MethodGet, "/api", "", nil)
		switch {
		case err != nil:
			if time.Now().After(deadline) || ctx.Err() != nil {
				return exitErr(ExitFailure, "the API server at %s does not answer: %w", c.endpoint, err)
			}
			logf("[discovery] GET /api failed, retrying: %v", err)
		case code == http.StatusOK:
			logf("[discovery] The API server accepted bootstrap token %q", tokenID)
			return nil
		case code == http.StatusUnauthorized || code == http.StatusForbidden:
			if firstRejection.IsZero() {
				firstRejection = time.Now()
			}
			if time.Since(firstRejection) >= grace {
				return exitErr(ExitTokenRejected, "the API server rejected bootstrap token %q: GET /api answered %d %s: the token does not exist, its secret does not match or it has expired",
					tokenID, code, http.StatusText(code))
			}
		case unavailable(code) && time.Now().Before(deadline) && ctx.Err() == nil:
			logf("[discovery] GET /api answered %d, retrying", code)
		default:
			return exitErr(ExitFailure, "GET /api answered %d: %s", code, truncate(body))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func truncate(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// node is the part of a core/v1 Node the stub writes.
type node struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   nodeMetadata `json:"metadata"`
	Spec       nodeSpec     `json:"spec"`
	Status     *nodeStatus  `json:"status,omitempty"`
}

type nodeMetadata struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type nodeSpec struct {
	ProviderID string  `json:"providerID,omitempty"`
	Taints     []Taint `json:"taints,omitempty"`
}

type nodeStatus struct {
	Conditions  []map[string]string `json:"conditions"`
	NodeInfo    map[string]string   `json:"nodeInfo"`
	Addresses   []map[string]string `json:"addresses,omitempty"`
	Capacity    map[string]string   `json:"capacity,omitempty"`
	Allocatable map[string]string   `json:"allocatable,omitempty"`
}

func nodeFor(name, providerID, kubeletVersion, nodeLabels string, taints []Taint) node {
	labels := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     runtime.GOARCH,
		"beta.kubernetes.io/os":  "linux",
	}
	for kv := range strings.SplitSeq(nodeLabels, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k != "" {
			labels[k] = v
		}
	}
	now := time.Now().UTC().Format(time.RFC3339)
	resources := map[string]string{"cpu": "2", "memory": "2Gi", "pods": "110", "ephemeral-storage": "10Gi"}
	return node{
		APIVersion: "v1",
		Kind:       "Node",
		Metadata: nodeMetadata{
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{stubAnnotation: "true"},
		},
		Spec: nodeSpec{ProviderID: providerID, Taints: taints},
		Status: &nodeStatus{
			// The conditions a kubelet posts; Cluster API's NodeHealthy needs all four.
			Conditions: []map[string]string{
				{"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "lastHeartbeatTime": now, "lastTransitionTime": now},
				{"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure", "lastHeartbeatTime": now, "lastTransitionTime": now},
				{"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID", "lastHeartbeatTime": now, "lastTransitionTime": now},
				{
					"type": "Ready", "status": "True", "reason": "KubeletReady",
					"message":           "stub kubelet of the CAPDMP test node image is posting ready status",
					"lastHeartbeatTime": now, "lastTransitionTime": now,
				},
			},
			NodeInfo: map[string]string{
				"kubeletVersion":          kubeletVersion,
				"operatingSystem":         "linux",
				"architecture":            runtime.GOARCH,
				"osImage":                 "CAPDMP test node image (busybox)",
				"kernelVersion":           readTrimmed("/proc/sys/kernel/osrelease"),
				"containerRuntimeVersion": "stub://0.0.0",
				"machineID":               readTrimmed("/etc/machine-id"),
				"systemUUID":              "",
				"bootID":                  readTrimmed("/proc/sys/kernel/random/boot_id"),
			},
			Addresses:   []map[string]string{{"type": "Hostname", "address": name}},
			Capacity:    resources,
			Allocatable: resources,
		},
	}
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// unavailable says whether an answer means the API server is overloaded or not ready yet: a
// client retries it.
func unavailable(code int) bool {
	return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
}

// doUntil is do, retried until deadline while the API server cannot be reached or answers that
// it is unavailable, as the kubelet retries its registration.
func (c *apiClient) doUntil(ctx context.Context, deadline time.Time, logf func(string, ...any), method, path, contentType string, body any) (int, []byte, error) {
	backoff := 250 * time.Millisecond
	for {
		code, b, err := c.do(ctx, method, path, contentType, body)
		if (err == nil && !unavailable(code)) || time.Now().After(deadline) || ctx.Err() != nil {
			return code, b, err
		}
		logf("[kubelet-start] %s %s failed (%v, answered %d), retrying in %s", method, path, err, code, backoff)
		time.Sleep(backoff)
		backoff = min(2*backoff, 4*time.Second)
	}
}

// registerNode creates the Node (or updates the one of the same name, as a restarted kubelet does),
// then reports its status, then removes the not-ready taint the API server added on create:
// the node lifecycle controller would, and none runs in a test API server. Each call is retried
// until deadline while the API server is unavailable.
func (c *apiClient) registerNode(ctx context.Context, n node, deadline time.Time, logf func(string, ...any)) error {
	status := n.Status
	code, body, err := c.doUntil(ctx, deadline, logf, http.MethodPost, "/api/v1/nodes", "application/json", n)
	switch {
	case err != nil:
		return exitErr(ExitFailure, "registering Node %q: %w", n.Metadata.Name, err)
	case code == http.StatusCreated || code == http.StatusOK:
	case code == http.StatusConflict:
		patch := map[string]any{"metadata": map[string]any{"labels": n.Metadata.Labels, "annotations": n.Metadata.Annotations}}
		code, body, err = c.doUntil(ctx, deadline, logf, http.MethodPatch, "/api/v1/nodes/"+n.Metadata.Name, "application/merge-patch+json", patch)
		if err != nil || code != http.StatusOK {
			return exitErr(ExitFailure, "updating the existing Node %q: %v %d %s", n.Metadata.Name, err, code, truncate(body))
		}
	case code == http.StatusForbidden:
		return exitErr(ExitFailure, "registering Node %q: forbidden (%s): the bootstrap token's group needs create/get/update/patch on nodes and nodes/status in the workload cluster", n.Metadata.Name, truncate(body))
	default:
		return exitErr(ExitFailure, "registering Node %q: %d %s", n.Metadata.Name, code, truncate(body))
	}

	code, body, err = c.doUntil(ctx, deadline, logf, http.MethodPatch, "/api/v1/nodes/"+n.Metadata.Name+"/status", "application/merge-patch+json", map[string]any{"status": status})
	if err != nil || code != http.StatusOK {
		return exitErr(ExitFailure, "reporting the status of Node %q: %v %d %s", n.Metadata.Name, err, code, truncate(body))
	}

	var current node
	if err := json.Unmarshal(body, &current); err != nil {
		return exitErr(ExitFailure, "reading Node %q: %w", n.Metadata.Name, err)
	}
	taints := slices.DeleteFunc(slices.Clone(current.Spec.Taints), func(t Taint) bool { return t.Key == "node.kubernetes.io/not-ready" })
	if len(taints) != len(current.Spec.Taints) {
		patch := map[string]any{"spec": map[string]any{"taints": taints}}
		code, body, err = c.doUntil(ctx, deadline, logf, http.MethodPatch, "/api/v1/nodes/"+n.Metadata.Name, "application/merge-patch+json", patch)
		if err != nil || code != http.StatusOK {
			return exitErr(ExitFailure, "removing the not-ready taint of Node %q: %v %d %s", n.Metadata.Name, err, code, truncate(body))
		}
	}
	return nil
}

// writeKubeletConf records that the node joined, where the real kubeadm writes the kubelet's
// kubeconfig; it holds no credentials.
func writeKubeletConf(path, endpoint string, ca []byte, nodeName string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	kubeconfig := map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []any{map[string]any{"name": "default-cluster", "cluster": map[string]any{
			"server": "https://" + endpoint, "certificate-authority-data": ca,
		}}},
		"contexts":        []any{map[string]any{"name": "default", "context": map[string]any{"cluster": "default-cluster", "user": "system:node:" + nodeName}}},
		"current-context": "default",
		"users":           []any{map[string]any{"name": "system:node:" + nodeName, "user": map[string]any{}}},
	}
	b, err := yaml.Marshal(kubeconfig)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
