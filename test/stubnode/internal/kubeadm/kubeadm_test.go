package kubeadm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

const (
	v1beta3Join = `---
apiVersion: kubeadm.k8s.io/v1beta3
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: 127.0.0.1:6443
    caCertHashes:
    - sha256:abc
    token: abcdef.0123456789abcdef
nodeRegistration:
  name: node-a
  kubeletExtraArgs:
    provider-id: docker:////custom
    node-labels: a=b,c=d
`
	v1beta4Join = `apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: 127.0.0.1:6443
    token: abcdef.0123456789abcdef
    unsafeSkipCAVerification: true
nodeRegistration:
  kubeletExtraArgs:
  - name: provider-id
    value: docker:////x
  - name: provider-id
    value: docker:////y
timeouts:
  discovery: 7s
`
)

func TestReadJoinConfiguration(t *testing.T) {
	tests := []struct {
		name           string
		data           string
		version        string
		wantErr        error
		wantErrText    string
		wantProviderID string
		wantTimeout    time.Duration
	}{
		{name: "v1beta3 read by 1.30", data: v1beta3Join, version: "1.30.13", wantProviderID: "docker:////custom", wantTimeout: 30 * time.Second},
		{name: "v1beta3 read by 1.31", data: v1beta3Join, version: "1.31.9", wantProviderID: "docker:////custom", wantTimeout: 30 * time.Second},
		{name: "v1beta4 refused by 1.30", data: v1beta4Join, version: "1.30.13", wantErr: ErrUnsupportedAPIVersion, wantErrText: `kubeadm v1.30.13 cannot read apiVersion "kubeadm.k8s.io/v1beta4" (it reads kubeadm.k8s.io/v1beta3)`},
		{name: "v1beta4 read by 1.31, list-style extra args, last wins", data: v1beta4Join, version: "1.31.0", wantProviderID: "docker:////y", wantTimeout: 7 * time.Second},
		{name: "v1beta2 refused by 1.29", data: strings.ReplaceAll(v1beta3Join, "v1beta3", "v1beta2"), version: "1.29.14", wantErr: ErrUnsupportedAPIVersion},
		{
			name:    "JoinConfiguration beside a ClusterConfiguration and a KubeletConfiguration",
			data:    "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\n---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n---\n" + v1beta3Join,
			version: "1.33.1", wantProviderID: "docker:////custom", wantTimeout: 30 * time.Second,
		},
		{name: "no JoinConfiguration", data: "apiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\n", version: "1.33.1", wantErrText: "no JoinConfiguration"},
		{name: "not YAML", data: "a: [", version: "1.33.1", wantErrText: "not valid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			jc, err := ReadJoinConfiguration([]byte(tt.data), semver.MustParse(tt.version))
			if tt.wantErr != nil || tt.wantErrText != "" {
				g.Expect(err).To(HaveOccurred())
				if tt.wantErr != nil {
					g.Expect(errors.Is(err, tt.wantErr)).To(BeTrue(), err.Error())
				}
				g.Expect(err.Error()).To(ContainSubstring(tt.wantErrText))
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			args, err := jc.NodeRegistration.KubeletExtraArgsMap()
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(args["provider-id"]).To(Equal(tt.wantProviderID))
			g.Expect(jc.DiscoveryTimeout(30 * time.Second)).To(Equal(tt.wantTimeout))
		})
	}
}

func TestParseToken(t *testing.T) {
	g := NewWithT(t)
	id, err := ParseToken("abcdef.0123456789abcdef")
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(id).To(Equal("abcdef"))
	for _, bad := range []string{"", "abcdef", "ABCDEF.0123456789abcdef", "abcdef.0123456789abcde", "abcdef:0123456789abcdef"} {
		_, err := ParseToken(bad)
		g.Expect(err).To(HaveOccurred(), bad)
	}
}

func TestVersionCommand(t *testing.T) {
	tests := []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{args: []string{"version", "-o", "short"}, wantOut: "v1.33.1\n"},
		{args: []string{"version", "-o=short"}, wantOut: "v1.33.1\n"},
		{args: []string{"version"}, wantOut: `GitVersion:"v1.33.1"`},
		{args: []string{"version", "-o", "json"}, wantOut: `"gitVersion": "v1.33.1"`},
		{args: []string{"version", "-o", "yaml"}, wantCode: ExitUsage},
		{args: []string{"init"}, wantCode: ExitUsage},
		{args: nil, wantCode: ExitUsage},
		{args: []string{"join", "127.0.0.1:6443", "--token", "x"}, wantCode: ExitUsage},
		{args: []string{"join", "--discovery-token", "x"}, wantCode: ExitUsage},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			g := NewWithT(t)
			env, out, _ := testEnv(t, "v1.33.1")
			g.Expect(Main(context.Background(), tt.args, env)).To(Equal(tt.wantCode))
			g.Expect(out.String()).To(ContainSubstring(tt.wantOut))
		})
	}
}

func testEnv(t *testing.T, version string) (Env, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "version"), []byte(version+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	return Env{
		VersionFile:   filepath.Join(dir, "version"),
		KubernetesDir: filepath.Join(dir, "etc-kubernetes"),
		Hostname:      func() (string, error) { return "Host-Name", nil },
		Stdout:        &out,
		Stderr:        &errOut,
	}, &out, &errOut
}

// fakeAPIServer answers the requests the stub makes, as a kube-apiserver with bootstrap token
// authentication, RBAC for the bootstrappers group and a published cluster-info would.
type fakeAPIServer struct {
	*httptest.Server
	validToken string
	noInfo     bool
	// overloaded is how many requests to overloadedPath (or under it, when it ends in "/") answer
	// 429, as an API server shedding load does; -1: all of them.
	overloaded     int
	overloadedPath string

	mu    sync.Mutex
	nodes map[string]*corev1.Node
}

func newFakeAPIServer(t *testing.T, validToken string) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{validToken: validToken, nodes: map[string]*corev1.Node{}}
	f.Server = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPIServer) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.overloaded != 0 && (r.URL.Path == f.overloadedPath || (strings.HasSuffix(f.overloadedPath, "/") && strings.HasPrefix(r.URL.Path, f.overloadedPath))) {
		f.overloaded--
		w.Header().Set("Retry-After", "1")
		http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
		return
	}
	if r.URL.Path == "/api/v1/namespaces/kube-public/configmaps/cluster-info" {
		if f.noInfo {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		kubeconfig := "apiVersion: v1\nkind: Config\nclusters:\n- name: ''\n  cluster:\n    server: " + f.URL + "\n    certificate-authority-data: " +
			base64.StdEncoding.EncodeToString(f.caPEM()) + "\n"
		_ = json.NewEncoder(w).Encode(map[string]any{"data": map[string]string{"kubeconfig": kubeconfig}})
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+f.validToken {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/api":
		_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"]}`))
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/nodes":
		// client-go sends built-in types as protobuf; the deserializer reads that and JSON alike.
		n := &corev1.Node{}
		if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, n); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if _, ok := f.nodes[n.Name]; ok {
			http.Error(w, "exists", http.StatusConflict)
			return
		}
		// The API server's TaintNodesByCondition admission adds this taint on create.
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule})
		f.nodes[n.Name] = n
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(n)
	case r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, "/api/v1/nodes/"):
		name, sub, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/api/v1/nodes/"), "/")
		n, ok := f.nodes[name]
		if !ok {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		// Decoding a merge patch onto a copy of the object applies it: lists are replaced, the
		// rest merged. The status subresource takes only the status, the object all but it.
		patched := n.DeepCopy()
		if err := json.Unmarshal(body, patched); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if sub == "status" {
			n.Status = patched.Status
		} else {
			patched.Status = n.Status
			f.nodes[name], n = patched, patched
		}
		_ = json.NewEncoder(w).Encode(n)
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
	}
}

func TestJoin(t *testing.T) {
	const token = "abcdef.0123456789abcdef"
	tests := []struct {
		name           string
		token          string
		apiVersion     string
		version        string
		pin            string // "" pins the server's CA
		noInfo         bool
		overloaded     int
		overloadedPath string
		alreadyJoined  bool
		extraArgs      []string
		maxPods        string // the kubelet flag max-pods in kubeletExtraArgs
		wantCode       int
		wantErr        string
		wantNode       string
		wantProviderID string
	}{
		{name: "joins", token: token, apiVersion: "v1beta4", version: "v1.31.9", wantNode: "node-a", wantProviderID: "docker:////node-a"},
		{name: "v1beta3 joins on 1.30", token: token, apiVersion: "v1beta3", version: "v1.30.13", wantNode: "node-a", wantProviderID: "docker:////node-a"},
		{name: "v1beta4 refused on 1.30", token: token, apiVersion: "v1beta4", version: "v1.30.13", wantCode: ExitUnsupportedConfig, wantErr: "cannot read apiVersion"},
		{name: "wrong secret", token: "abcdef.ffffffffffffffff", apiVersion: "v1beta3", version: "v1.33.1", wantCode: ExitTokenRejected, wantErr: `rejected bootstrap token "abcdef"`},
		{name: "CA pin mismatch", token: token, apiVersion: "v1beta3", version: "v1.33.1", pin: "sha256:0000", wantCode: ExitUntrustedCA, wantErr: "matches none of the caCertHashes"},
		{name: "no cluster-info", token: token, apiVersion: "v1beta3", version: "v1.33.1", noInfo: true, wantCode: ExitUntrustedCA, wantErr: "cluster-info"},
		{name: "overloaded at discovery, retried", token: token, apiVersion: "v1beta4", version: "v1.33.1", overloaded: 2, overloadedPath: "/api/v1/namespaces/kube-public/",
			wantNode: "node-a", wantProviderID: "docker:////node-a"},
		{name: "overloaded at the token's proof, retried", token: token, apiVersion: "v1beta4", version: "v1.33.1", overloaded: 3, overloadedPath: "/api",
			wantNode: "node-a", wantProviderID: "docker:////node-a"},
		{name: "overloaded at registration, retried", token: token, apiVersion: "v1beta4", version: "v1.33.1", overloaded: 3, overloadedPath: "/api/v1/nodes",
			wantNode: "node-a", wantProviderID: "docker:////node-a"},
		{name: "overloaded past the TLS bootstrap timeout", token: token, apiVersion: "v1beta4", version: "v1.33.1", overloaded: -1, overloadedPath: "/api/v1/nodes",
			wantCode: ExitFailure, wantErr: "registering Node \"node-a\": the TLS bootstrap timeout (6s) passed"},
		{name: "already joined", token: token, apiVersion: "v1beta3", version: "v1.33.1", alreadyJoined: true, wantCode: ExitPreflight, wantErr: "kubelet.conf already exists"},
		{name: "already joined, check ignored", token: token, apiVersion: "v1beta3", version: "v1.33.1", alreadyJoined: true, extraArgs: []string{"--ignore-preflight-errors=SystemVerification,all"}, wantNode: "node-a", wantProviderID: "docker:////node-a"},
		{name: "max-pods, v1beta4", token: token, apiVersion: "v1beta4", version: "v1.31.9", maxPods: "50", wantNode: "node-a", wantProviderID: "docker:////node-a"},
		{name: "max-pods, v1beta3", token: token, apiVersion: "v1beta3", version: "v1.30.13", maxPods: "50", wantNode: "node-a", wantProviderID: "docker:////node-a"},
		{name: "max-pods that is no number: the kubelet would not start", token: token, apiVersion: "v1beta4", version: "v1.31.9", maxPods: "lots",
			wantCode: ExitFailure, wantErr: `max-pods "lots" is not a number of pods`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			srv := newFakeAPIServer(t, token)
			srv.noInfo = tt.noInfo
			srv.overloaded, srv.overloadedPath = tt.overloaded, tt.overloadedPath
			pin := tt.pin
			if pin == "" {
				hashes, err := CACertHashes(srv.caPEM())
				g.Expect(err).ToNot(HaveOccurred())
				pin = hashes[0]
			}
			env, out, errOut := testEnv(t, tt.version)
			if tt.alreadyJoined {
				g.Expect(os.MkdirAll(env.KubernetesDir, 0o755)).To(Succeed())
				g.Expect(os.WriteFile(filepath.Join(env.KubernetesDir, "kubelet.conf"), nil, 0o600)).To(Succeed())
			}
			config := "apiVersion: kubeadm.k8s.io/" + tt.apiVersion + "\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n" +
				"    apiServerEndpoint: " + strings.TrimPrefix(srv.URL, "https://") + "\n    token: " + tt.token + "\n    caCertHashes: [\"" + pin + "\"]\n" +
				"nodeRegistration:\n  name: Node-A\n  taints:\n  - key: node.cluster.x-k8s.io/uninitialized\n    effect: NoSchedule\n"
			switch {
			case tt.maxPods != "" && tt.apiVersion == "v1beta4":
				config += "  kubeletExtraArgs:\n  - name: max-pods\n    value: \"" + tt.maxPods + "\"\n"
			case tt.maxPods != "":
				config += "  kubeletExtraArgs:\n    max-pods: \"" + tt.maxPods + "\"\n"
			}
			if tt.apiVersion == "v1beta4" {
				config += "timeouts:\n  discovery: 6s\n  tlsBootstrap: 6s\n"
			}
			path := filepath.Join(t.TempDir(), "join.yaml")
			g.Expect(os.WriteFile(path, []byte(config), 0o600)).To(Succeed())

			code := Main(context.Background(), append([]string{"join", "--config", path, "-v", "5"}, tt.extraArgs...), env)
			g.Expect(code).To(Equal(tt.wantCode), "stdout:\n%s\nstderr:\n%s", out, errOut)
			if tt.wantCode != 0 {
				g.Expect(errOut.String()).To(ContainSubstring(tt.wantErr))
				g.Expect(srv.nodes).To(BeEmpty())
				return
			}
			n := srv.nodes[tt.wantNode]
			g.Expect(n).ToNot(BeNil(), "stdout:\n%s", out)
			g.Expect(n.Spec.ProviderID).To(Equal(tt.wantProviderID))
			g.Expect(n.Spec.Taints).To(ConsistOf(HaveField("Key", "node.cluster.x-k8s.io/uninitialized")), "the not-ready taint is removed, the configured one kept")
			g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal(tt.version))
			wantPods := cmp.Or(tt.maxPods, "110")
			g.Expect(n.Status.Capacity.Pods().String()).To(Equal(wantPods), "the kubelet's max-pods, else its default")
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
				q := n.Status.Capacity[r]
				g.Expect(q.Sign()).To(Equal(1), "%s read from the machine", r)
			}
			g.Expect(n.Status.Allocatable).To(Equal(n.Status.Capacity))
			g.Expect(n.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
			g.Expect(filepath.Join(env.KubernetesDir, "kubelet.conf")).To(BeAnExistingFile())
			g.Expect(out.String()).To(ContainSubstring("This node has joined the cluster"))
		})
	}
}

// TestMachineReading reads the memory a kubelet reports as procfs writes it (the CPUs are
// k8s.io/utils/cpuset's parse of sysfs' list).
func TestMachineReading(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	meminfo := filepath.Join(dir, "meminfo")
	g.Expect(os.WriteFile(meminfo, []byte("MemTotal:       24683792 kB\nMemFree:         1000 kB\n"), 0o600)).To(Succeed())
	bytes, err := memTotal(meminfo)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(bytes).To(Equal(int64(24683792) * 1024))
	g.Expect(os.WriteFile(meminfo, []byte("MemFree: 1000 kB\n"), 0o600)).To(Succeed())
	_, err = memTotal(meminfo)
	g.Expect(err).To(MatchError(ContainSubstring("no MemTotal")))
}
