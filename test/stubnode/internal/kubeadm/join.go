package kubeadm

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/blang/semver/v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/cpuset"
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
	token := cmp.Or(cfg.Discovery.TLSBootstrapToken, bt.Token)
	tokenID, err := ParseToken(token)
	if err != nil {
		return exitErr(ExitFailure, "discovery.tlsBootstrapToken: %w", err)
	}

	discoveryTimeout := cfg.DiscoveryTimeout(o.DefaultDiscoveryTimeout)
	discoveryCtx, cancel := context.WithTimeoutCause(ctx, discoveryTimeout, fmt.Errorf("the discovery timeout (%s) passed", discoveryTimeout))
	defer cancel()
	logf("[discovery] Discovering the cluster CA at https://%s (anonymous, cluster-info ConfigMap)", bt.APIServerEndpoint)
	ca, err := discoverCA(discoveryCtx, bt, logf)
	if err != nil {
		return err
	}
	server := &rest.Config{
		Host: "https://" + bt.APIServerEndpoint, BearerToken: token, UserAgent: "capdmp-stub-kubeadm", Timeout: 10 * time.Second,
		// Without a CA (unsafeSkipCAVerification), the server is not verified.
		TLSClientConfig: rest.TLSClientConfig{CAData: ca, Insecure: ca == nil},
	}
	nodes, err := corev1client.NewForConfig(server)
	if err != nil {
		return exitErr(ExitFailure, "%w", err)
	}
	logf("[discovery] Proving bootstrap token %q against the API server (GET /api)", tokenID)
	if err := proveToken(discoveryCtx, nodes.RESTClient(), tokenID, o.UnauthorizedGrace, logf); err != nil {
		return err
	}

	name := strings.ToLower(cmp.Or(cfg.NodeRegistration.Name, o.Hostname))
	if name == "" {
		return exitErr(ExitFailure, "no node name: nodeRegistration.name is empty and the hostname is unknown")
	}
	extra, err := cfg.NodeRegistration.KubeletExtraArgsMap()
	if err != nil {
		return exitErr(ExitFailure, "%w", err)
	}
	providerID := cmp.Or(extra["provider-id"], "docker:////"+name)
	kubeletVersion := "v" + o.KubeadmVersion.String()
	logf("[kubelet-start] Registering Node %q (providerID %q, kubelet %s) with the bootstrap token", name, providerID, kubeletVersion)
	registrationTimeout := cfg.TLSBootstrapTimeout(o.DefaultTLSBootstrapTimeout)
	registrationCtx, cancel := context.WithTimeoutCause(ctx, registrationTimeout, fmt.Errorf("the TLS bootstrap timeout (%s) passed", registrationTimeout))
	defer cancel()
	resources, err := machineResources(extra["max-pods"])
	if err != nil {
		return exitErr(ExitFailure, "[kubelet-start] the kubelet cannot report its capacity: %w", err)
	}
	node := nodeFor(name, providerID, kubeletVersion, extra["node-labels"], cfg.NodeRegistration.Taints, resources)
	if err := registerNode(registrationCtx, nodes.Nodes(), node, logf); err != nil {
		return err
	}
	logf("[kubelet-start] Node %q is Ready", name)

	if err := writeKubeletConf(kubeletConf, server, name); err != nil {
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

// unavailable says whether a request failed without an answer, or with one that says the API
// server is overloaded or not ready yet: a client retries it.
func unavailable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err != nil
	}
	code := status.Status().Code
	return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
}

// untilAnswered runs call until it succeeds, fails in a way retry does not accept, or ctx ends,
// waiting longer between attempts as the kubelet does; it returns call's last error. client-go
// itself retries answers that carry Retry-After.
func untilAnswered(ctx context.Context, logf func(string, ...any), what string, retry func(error) bool, call func(context.Context) error) error {
	for backoff := 250 * time.Millisecond; ; backoff = min(2*backoff, 4*time.Second) {
		err := call(ctx)
		if err == nil || !retry(err) {
			return err
		}
		if ctx.Err() == nil {
			logf("%s failed, retrying in %s: %v", what, backoff, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		case <-time.After(backoff):
		}
	}
}

// discoverCA reads the cluster CA from kube-public/cluster-info, as kubeadm's token discovery does,
// and checks it against the caCertHashes pins. The JWS signature of cluster-info is not checked:
// no bootstrap signer runs in the test API server.
func discoverCA(ctx context.Context, bt *BootstrapTokenDiscovery, logf func(string, ...any)) ([]byte, error) {
	// kubeadm reads cluster-info anonymously without verifying the server, then pins its CA.
	anonymous, err := corev1client.NewForConfig(&rest.Config{
		Host: "https://" + bt.APIServerEndpoint, Timeout: 10 * time.Second, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
	})
	if err != nil {
		return nil, exitErr(ExitFailure, "%w", err)
	}
	var clusterInfo *corev1.ConfigMap
	err = untilAnswered(ctx, logf, "[discovery] GET cluster-info", unavailable, func(ctx context.Context) (err error) {
		clusterInfo, err = anonymous.ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
		return err
	})
	switch {
	case unavailable(err):
		return nil, exitErr(ExitFailure, "the API server at %s does not answer: %w", bt.APIServerEndpoint, err)
	case err != nil && bt.UnsafeSkipCAVerification:
		logf("[discovery] cluster-info not readable (%v); unsafeSkipCAVerification: not verifying the API server's certificate", err)
		return nil, nil
	case err != nil:
		return nil, exitErr(ExitUntrustedCA, "cannot discover the cluster CA: GET kube-public/configmaps/cluster-info: %w (kubeadm init publishes it for anonymous reads; a test harness must too)", err)
	}
	kubeconfig, err := clientcmd.Load([]byte(clusterInfo.Data["kubeconfig"]))
	if err != nil || len(kubeconfig.Clusters) == 0 {
		return nil, exitErr(ExitUntrustedCA, "the cluster-info ConfigMap holds no kubeconfig with a cluster (err: %v)", err)
	}
	var ca []byte
	for _, cluster := range kubeconfig.Clusters { // cluster-info holds one cluster
		ca = cluster.CertificateAuthorityData
		break
	}
	if bt.UnsafeSkipCAVerification && len(bt.CACertHashes) == 0 {
		logf("[discovery] unsafeSkipCAVerification: trusting the cluster-info CA without a pin")
		return ca, nil
	}
	hashes, err := CACertHashes(ca)
	if err != nil {
		return nil, exitErr(ExitUntrustedCA, "the cluster-info CA: %w", err)
	}
	for _, h := range hashes {
		if slices.ContainsFunc(bt.CACertHashes, func(pin string) bool { return strings.EqualFold(pin, h) }) {
			logf("[discovery] Cluster CA %s matches a pinned caCertHash", h)
			return ca, nil
		}
	}
	return nil, exitErr(ExitUntrustedCA, "the cluster CA found in cluster-info (%s) matches none of the caCertHashes %v", strings.Join(hashes, ", "), bt.CACertHashes)
}

// CACertHashes returns kubeadm's caCertHashes entry, "sha256:<hex>" of the Subject Public Key
// Info, of each certificate in pemData.
func CACertHashes(pemData []byte) ([]string, error) {
	certs, err := cert.ParseCertsPEM(pemData)
	if err != nil {
		return nil, err
	}
	hashes := make([]string, 0, len(certs))
	for _, c := range certs {
		sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
		hashes = append(hashes, "sha256:"+hex.EncodeToString(sum[:]))
	}
	return hashes, nil
}

// proveToken makes an authenticated GET /api; 401 and 403 mean the token is not accepted.
func proveToken(ctx context.Context, c rest.Interface, tokenID string, grace time.Duration, logf func(string, ...any)) error {
	firstRejection := time.Time{}
	rejected := func(err error) bool { return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) }
	err := untilAnswered(ctx, logf, "[discovery] GET /api", func(err error) bool {
		if rejected(err) && firstRejection.IsZero() {
			firstRejection = time.Now()
		}
		return unavailable(err) || (rejected(err) && time.Since(firstRejection) < grace)
	}, func(ctx context.Context) error {
		return c.Get().AbsPath("/api").Do(ctx).Error()
	})
	switch {
	case err == nil:
		logf("[discovery] The API server accepted bootstrap token %q", tokenID)
		return nil
	case rejected(err):
		return exitErr(ExitTokenRejected, "the API server rejected bootstrap token %q: GET /api answered %s: the token does not exist, its secret does not match or it has expired",
			tokenID, answer(err))
	case unavailable(err):
		return exitErr(ExitFailure, "the API server does not answer GET /api: %w", err)
	default:
		return exitErr(ExitFailure, "GET /api answered %s", answer(err))
	}
}

// answer describes an error with the API server's answer in it as "401 Unauthorized: <message>";
// an APIStatus error alone says only the message.
func answer(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err.Error()
	}
	code := int(status.Status().Code)
	return strings.Replace(err.Error(), status.Status().Message, fmt.Sprintf("%d %s: %s", code, http.StatusText(code), status.Status().Message), 1)
}

func nodeFor(name, providerID, kubeletVersion, nodeLabels string, taints []corev1.Taint, resources corev1.ResourceList) *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: runtime.GOARCH, "beta.kubernetes.io/os": "linux",
	}
	for kv := range strings.SplitSeq(nodeLabels, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k != "" {
			labels[k] = v
		}
	}
	now := metav1.Now()
	condition := func(t corev1.NodeConditionType, status corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: status, Reason: reason, Message: message, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{stubAnnotation: "true"}},
		Spec:       corev1.NodeSpec{ProviderID: providerID, Taints: taints},
		Status: corev1.NodeStatus{
			// The conditions a kubelet posts; Cluster API's NodeHealthy needs all four.
			Conditions: []corev1.NodeCondition{
				condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""),
				condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""),
				condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""),
				condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "stub kubelet of the CAPDMP test node image is posting ready status"),
			},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion: kubeletVersion, OperatingSystem: "linux", Architecture: runtime.GOARCH,
				OSImage: "CAPDMP test node image (busybox)", ContainerRuntimeVersion: "stub://0.0.0",
				KernelVersion: readTrimmed("/proc/sys/kernel/osrelease"), MachineID: readTrimmed("/etc/machine-id"),
				BootID: readTrimmed("/proc/sys/kernel/random/boot_id"),
			},
			Addresses:   []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}},
			Capacity:    resources,
			Allocatable: resources,
		},
	}
}

// defaultMaxPods is the kubelet's maxPods when nothing sets it.
const defaultMaxPods = 110

// machineResources is the capacity a kubelet in this container reports, read where cAdvisor reads
// it: the CPUs online in /sys/devices/system/cpu/online, MemTotal in /proc/meminfo and the size of
// the filesystem of /var (the kubelet's root directory, a volume of the node container); pods is
// the kubelet's max-pods flag (kubeletExtraArgs), else its default.
func machineResources(maxPods string) (corev1.ResourceList, error) {
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	cpus, err := cpuset.Parse(strings.TrimSpace(string(online)))
	if err != nil {
		return nil, fmt.Errorf("reading the online CPUs: %w", err)
	}
	memory, err := memTotal("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs("/var", &fs); err != nil {
		return nil, fmt.Errorf("statfs /var: %w", err)
	}
	pods := int64(defaultMaxPods)
	if maxPods != "" {
		if pods, err = strconv.ParseInt(maxPods, 10, 32); err != nil || pods < 0 {
			return nil, fmt.Errorf("max-pods %q is not a number of pods", maxPods)
		}
	}
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(cpus.Size()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(memory, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(int64(fs.Blocks)*int64(fs.Bsize), resource.BinarySI), //nolint:unconvert // Bsize is int64 on Linux, uint32 on macOS
	}, nil
}

// memTotal reads MemTotal, in bytes, from a meminfo file.
func memTotal(path string) (int64, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(content), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 3 && fields[0] == "MemTotal:" && fields[2] == "kB" {
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("malformed MemTotal in %s: %q", path, line)
			}
			return kib * 1024, nil
		}
	}
	return 0, fmt.Errorf("no MemTotal in %s", path)
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// registerNode creates the Node (or updates the one of the same name, as a restarted kubelet does),
// then reports its status, then removes the not-ready taint the API server added on create:
// the node lifecycle controller would, and none runs in a test API server. Each call is retried
// while the API server is unavailable, until ctx ends.
func registerNode(ctx context.Context, nodes corev1client.NodeInterface, n *corev1.Node, logf func(string, ...any)) error {
	retry := func(what string, call func(context.Context) error) error {
		if err := untilAnswered(ctx, logf, "[kubelet-start] "+what, unavailable, call); err != nil {
			return exitErr(ExitFailure, "%s Node %q: %s", what, n.Name, answer(err))
		}
		return nil
	}
	var current *corev1.Node
	err := retry("registering", func(ctx context.Context) (err error) {
		current, err = nodes.Create(ctx, n, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			current, err = patchNode(ctx, nodes, n.Name, map[string]any{"metadata": map[string]any{"labels": n.Labels, "annotations": n.Annotations}})
		}
		if apierrors.IsForbidden(err) {
			err = fmt.Errorf("%w: the bootstrap token's group needs create/get/update/patch on nodes and nodes/status in the workload cluster", err)
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := retry("reporting the status of", func(ctx context.Context) (err error) {
		current, err = patchNode(ctx, nodes, n.Name, map[string]any{"status": n.Status}, "status")
		return err
	}); err != nil {
		return err
	}
	taints := slices.DeleteFunc(slices.Clone(current.Spec.Taints), func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
	if len(taints) == len(current.Spec.Taints) {
		return nil
	}
	return retry("removing the not-ready taint of", func(ctx context.Context) error {
		_, err := patchNode(ctx, nodes, n.Name, map[string]any{"spec": map[string]any{"taints": taints}})
		return err
	})
}

// patchNode sends a JSON merge patch of the Node, or of its subresource.
func patchNode(ctx context.Context, nodes corev1client.NodeInterface, name string, patch map[string]any, subresource ...string) (*corev1.Node, error) {
	data, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	return nodes.Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{}, subresource...)
}

// writeKubeletConf records that the node joined, where the real kubeadm writes the kubelet's
// kubeconfig; it holds no credentials.
func writeKubeletConf(path string, server *rest.Config, nodeName string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	user := "system:node:" + nodeName
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["default-cluster"] = &clientcmdapi.Cluster{Server: server.Host, CertificateAuthorityData: server.CAData}
	kubeconfig.Contexts["default"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: user}
	kubeconfig.AuthInfos[user] = &clientcmdapi.AuthInfo{}
	kubeconfig.CurrentContext = "default"
	return clientcmd.WriteToFile(*kubeconfig, path)
}
