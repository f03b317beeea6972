package container

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dockercontainer "github.com/moby/moby/api/types/container"
	dockernetwork "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	. "github.com/onsi/gomega"
)

func TestDockerCreateOptions(t *testing.T) {
	g := NewWithT(t)
	spec := NodeSpec(NodeSpecInput{
		Name:        "pool-a-1",
		Image:       "kindest/node:v1.36.3",
		ClusterName: "c1",
		Network:     "kind",
		Labels:      map[string]string{"infrastructure.capdmp.dev/pool-uid": "u1"},
		ExtraMounts: []Mount{{Source: "/srv", Target: "/srv"}},
		Env:         []string{"A=1"},
	})
	config, hostConfig, networkConfig := dockerCreateOptions(spec)

	g.Expect(config.Image).To(Equal("kindest/node:v1.36.3"))
	g.Expect(config.Hostname).To(Equal("pool-a-1"))
	g.Expect(config.Labels).To(Equal(map[string]string{
		"infrastructure.capdmp.dev/pool-uid": "u1",
		"io.x-k8s.kind.cluster":              "c1",
		"io.x-k8s.kind.role":                 "worker",
	}))
	g.Expect(config.Env).To(Equal([]string{"A=1"}))
	g.Expect(config.Volumes).To(Equal(map[string]struct{}{"/var": {}}))
	g.Expect(config.Tty).To(BeTrue())
	g.Expect(config.StopSignal).To(Equal("SIGRTMIN+3"))
	g.Expect(config.Entrypoint).To(BeEmpty())

	g.Expect(hostConfig.NetworkMode).To(Equal(dockercontainer.NetworkMode("kind")))
	g.Expect(hostConfig.Privileged).To(BeTrue())
	g.Expect(hostConfig.SecurityOpt).To(ConsistOf("seccomp=unconfined", "apparmor=unconfined"))
	g.Expect(hostConfig.CgroupnsMode).To(Equal(dockercontainer.CgroupnsMode("private")))
	g.Expect(hostConfig.Tmpfs).To(Equal(map[string]string{"/tmp": "", "/run": ""}))
	g.Expect(hostConfig.Binds).To(Equal([]string{"/srv:/srv", "/lib/modules:/lib/modules:ro"}))
	g.Expect(hostConfig.RestartPolicy).To(Equal(dockercontainer.RestartPolicy{Name: "on-failure", MaximumRetryCount: 1}))
	g.Expect(hostConfig.Init).To(HaveValue(BeFalse()))
	g.Expect(networkConfig).ToNot(BeNil())

	// The request must not share maps with the spec: the client normalises some fields in place.
	config.Labels["x"] = "y"
	g.Expect(spec.Labels).ToNot(HaveKey("x"))
}

func TestDockerCreateOptionsMinimal(t *testing.T) {
	g := NewWithT(t)
	config, hostConfig, _ := dockerCreateOptions(Spec{Name: "n", Image: "i", Network: "host", Cmd: []string{"sleep", "1"}})
	g.Expect(config.Hostname).To(BeEmpty())
	g.Expect(config.Volumes).To(BeNil())
	g.Expect(config.Cmd).To(Equal([]string{"sleep", "1"}))
	g.Expect(hostConfig.NetworkMode).To(Equal(dockercontainer.NetworkMode("host")))
	g.Expect(hostConfig.RestartPolicy.Name).To(BeEmpty())
	g.Expect(hostConfig.Init).To(BeNil())
	g.Expect(hostConfig.Binds).To(BeEmpty())
}

func TestAddresses(t *testing.T) {
	ep := func(v4, v6 string) *dockernetwork.EndpointSettings {
		e := &dockernetwork.EndpointSettings{}
		if v4 != "" {
			e.IPAddress = netip.MustParseAddr(v4)
		}
		if v6 != "" {
			e.GlobalIPv6Address = netip.MustParseAddr(v6)
		}
		return e
	}
	tests := []struct {
		name         string
		networks     map[string]*dockernetwork.EndpointSettings
		mode         string
		wantV4, want string
	}{
		{name: "no networks"},
		{name: "host network has no address", networks: map[string]*dockernetwork.EndpointSettings{"host": ep("", "")}, mode: "host"},
		{name: "network of the mode", networks: map[string]*dockernetwork.EndpointSettings{"a": ep("10.0.0.2", ""), "kind": ep("172.18.0.3", "fc00::3")}, mode: "kind", wantV4: "172.18.0.3", want: "fc00::3"},
		{name: "first by name otherwise", networks: map[string]*dockernetwork.EndpointSettings{"b": ep("10.0.1.2", ""), "a": ep("10.0.0.2", "")}, mode: "default", wantV4: "10.0.0.2"},
		{name: "stopped container has unspecified addresses", networks: map[string]*dockernetwork.EndpointSettings{"kind": ep("0.0.0.0", "::")}, mode: "kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			v4, v6 := addresses(tt.networks, tt.mode)
			g.Expect(v4).To(Equal(tt.wantV4))
			g.Expect(v6).To(Equal(tt.want))
		})
	}
}

func TestCappedBuffer(t *testing.T) {
	g := NewWithT(t)
	b := &cappedBuffer{max: 5}
	// Write, not WriteString: Write is what enforces the cap.
	n, err := b.Write([]byte("abc")) //nolint:gocritic // see above
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(n).To(Equal(3))
	n, err = b.Write([]byte("defgh")) //nolint:gocritic // see above
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(n).To(Equal(5), "a capped buffer must still accept the whole write")
	_, _ = b.Write([]byte("ij")) //nolint:gocritic // see above
	g.Expect(b.String()).To(Equal("abcde"))
}

func TestSingleFile(t *testing.T) {
	archive := func(headers ...*tar.Header) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range headers {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				if _, err := tw.Write(bytes.Repeat([]byte("v"), int(h.Size))); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	tests := []struct {
		name    string
		archive []byte
		want    string
		wantErr string
	}{
		{name: "a regular file", archive: archive(&tar.Header{Name: "version", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644}), want: "vvv"},
		{name: "an empty file", archive: archive(&tar.Header{Name: "version", Typeflag: tar.TypeReg, Mode: 0o644}), want: ""},
		{name: "the largest file read", archive: archive(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: MaxImageFile, Mode: 0o644}), want: strings.Repeat("v", MaxImageFile)},
		{name: "one byte too large", archive: archive(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: MaxImageFile + 1, Mode: 0o644}), wantErr: "more than"},
		{name: "a symlink is not followed", archive: archive(&tar.Header{Name: "version", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}), wantErr: `symbolic link to "/etc/shadow"`},
		{name: "a directory", archive: archive(&tar.Header{Name: "kind/", Typeflag: tar.TypeDir, Mode: 0o755}), wantErr: "not a regular file"},
		{name: "an empty archive", archive: archive(), wantErr: "failed to read the archive"},
		{name: "not an archive", archive: []byte("garbage"), wantErr: "failed to read the archive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := singleFile(bytes.NewReader(tt.archive))
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(string(got)).To(Equal(tt.want))
		})
	}
}

func TestCallCounts(t *testing.T) {
	g := NewWithT(t)
	c := &Counter{}
	c.Count("ContainerList")
	before := c.Calls()
	c.Count("ContainerList")
	c.Count("ExecCreate")
	g.Expect(c.Calls()).To(Equal(CallCounts{"ContainerList": 2, "ExecCreate": 1}))
	g.Expect(c.Calls().Total()).To(Equal(int64(3)))
	g.Expect(c.Calls().Sub(before)).To(Equal(CallCounts{"ContainerList": 1, "ExecCreate": 1}))
	before["ContainerList"] = 100
	g.Expect(c.Calls()["ContainerList"]).To(Equal(int64(2)), "snapshots are copies")
	c.ResetCalls()
	g.Expect(c.Calls().Total()).To(BeZero())
}

// engineStub answers a few Docker Engine API endpoints the way Docker 20.10 (API 1.41) does, and
// records the requests, so that error mapping and call counting are tested without an engine.
type engineStub struct {
	mu       sync.Mutex
	requests []string
	images   map[string]bool
	// containers maps names to label sets.
	containers map[string]map[string]string
	networks   []string
	// bridgeMTU is the MTU option of the default bridge network, if any.
	bridgeMTU string
	// createRefusals are the messages the next network creates fail with, one each.
	createRefusals []string
}

func (e *engineStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Drop the /v1.41 prefix.
	path := r.URL.Path
	if i := strings.Index(path[1:], "/"); strings.HasPrefix(path, "/v") && i > 0 {
		path = path[i+1:]
	}
	e.requests = append(e.requests, r.Method+" "+path)
	notFound := func(msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
	}
	switch {
	case path == "/_ping":
		w.Header().Set("Api-Version", "1.41")
		_, _ = w.Write([]byte("OK"))
	case r.Method == http.MethodGet && path == "/info":
		// The fields of Docker 20.10's answer that Host reads, among others it ignores.
		_ = json.NewEncoder(w).Encode(map[string]any{"NCPU": 2, "MemTotal": int64(25276203008), "Architecture": "x86_64",
			"OSType": "linux", "DockerRootDir": "/var/lib/docker", "ServerVersion": "20.10.24+dfsg1"})
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/images/") && strings.HasSuffix(path, "/json"):
		name := strings.TrimSuffix(strings.TrimPrefix(path, "/images/"), "/json")
		if !e.images[name] {
			notFound("no such image: " + name)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"Id": "sha256:abc"})
	case r.Method == http.MethodDelete && strings.HasPrefix(path, "/containers/"):
		name := strings.TrimPrefix(path, "/containers/")
		if _, ok := e.containers[name]; !ok {
			notFound("No such container: " + name)
			return
		}
		delete(e.containers, name)
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && path == "/containers/json":
		// Ignore the filters, as an engine with different filter semantics would.
		var out []map[string]any
		for name, labels := range e.containers {
			out = append(out, map[string]any{"Id": "id-" + name, "Names": []string{"/" + name}, "Labels": labels, "State": "running", "Created": 1700000000})
		}
		_ = json.NewEncoder(w).Encode(out)
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/exec"):
		notFound("No such container: x")
	case r.Method == http.MethodGet && path == "/networks":
		var out []map[string]any
		for _, n := range e.networks {
			out = append(out, map[string]any{"Name": n, "Id": "id-" + n})
		}
		_ = json.NewEncoder(w).Encode(out)
	case r.Method == http.MethodGet && path == "/networks/bridge":
		options := map[string]string{}
		if e.bridgeMTU != "" {
			options["com.docker.network.driver.mtu"] = e.bridgeMTU
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"Name": "bridge", "Id": "id-bridge", "Options": options})
	case r.Method == http.MethodPost && path == "/networks/create":
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		e.requests[len(e.requests)-1] += " " + mustJSON(map[string]any{"Options": req["Options"], "EnableIPv6": req["EnableIPv6"], "IPAM": req["IPAM"]})
		if len(e.createRefusals) > 0 {
			msg := e.createRefusals[0]
			e.createRefusals = e.createRefusals[1:]
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
			return
		}
		e.networks = append(e.networks, req["Name"].(string))
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"Id": "n1"})
	default:
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": "unexpected request " + r.Method + " " + path})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (e *engineStub) Requests() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.requests...)
}

func newStubDocker(t *testing.T, e *engineStub) *Docker {
	t.Helper()
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	d, err := NewDocker(client.WithHost("tcp://" + strings.TrimPrefix(srv.URL, "http://")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestDockerAgainstEngineStub(t *testing.T) {
	ctx := context.Background()

	t.Run("Ping negotiates the engine's API version", func(t *testing.T) {
		g := NewWithT(t)
		d := newStubDocker(t, &engineStub{})
		v, err := d.Ping(ctx)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(v).To(Equal("1.41"))
	})

	t.Run("Create with a missing image fails typed and never pulls", func(t *testing.T) {
		g := NewWithT(t)
		e := &engineStub{}
		d := newStubDocker(t, e)
		_, _ = d.Ping(ctx)
		_, err := d.Create(ctx, Spec{Name: "n1", Image: "capdmp.local/missing:v1.36.3"})
		g.Expect(err).To(MatchError(ErrImageNotFound))
		g.Expect(err.Error()).To(ContainSubstring(`"capdmp.local/missing:v1.36.3"`))
		g.Expect(err.Error()).To(ContainSubstring("never pulled"))
		g.Expect(e.Requests()).To(Equal([]string{"HEAD /_ping", "GET /images/capdmp.local/missing:v1.36.3/json"}))
		g.Expect(d.Calls()).To(Equal(CallCounts{"Ping": 1, "ImageInspect": 1}))
	})

	t.Run("Create refuses a mount whose bind Docker would read otherwise, before asking the engine", func(t *testing.T) {
		for _, m := range []Mount{
			{Source: "/srv/a", Target: "/proc:ro"},
			{Source: "/srv/a", Target: "/data:rshared"},
			{Source: "/srv/a:/b", Target: "/data"},
		} {
			g := NewWithT(t)
			e := &engineStub{images: map[string]bool{"kindest/node:v1.36.3": true}}
			d := newStubDocker(t, e)
			_, err := d.Create(ctx, Spec{Name: "n1", Image: "kindest/node:v1.36.3", Mounts: []Mount{{Source: "/srv/data", Target: "/data"}, m}})
			g.Expect(err).To(MatchError(ContainSubstring(`contains ":"`)), "%+v", m)
			g.Expect(err.Error()).To(ContainSubstring(`failed to create container "n1"`))
			g.Expect(e.Requests()).To(BeEmpty(), "%+v: nothing is sent to the engine", m)
		}
	})

	t.Run("Host reads the engine's machine in one Info call", func(t *testing.T) {
		g := NewWithT(t)
		e := &engineStub{}
		d := newStubDocker(t, e)
		h, err := d.Host(ctx)
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(h).To(Equal(Host{CPUs: 2, MemoryBytes: 25276203008, Architecture: "x86_64", OSType: "linux"}))
		g.Expect(e.Requests()).To(Equal([]string{"HEAD /_ping", "GET /info"}), "the client negotiates the API version first")
		g.Expect(d.Calls()).To(Equal(CallCounts{"Info": 1}))
	})

	t.Run("Delete of a missing container is success", func(t *testing.T) {
		g := NewWithT(t)
		d := newStubDocker(t, &engineStub{containers: map[string]map[string]string{}})
		g.Expect(d.Delete(ctx, "gone")).To(Succeed())
		g.Expect(d.Calls()).To(Equal(CallCounts{"ContainerRemove": 1}))
	})

	t.Run("List keeps only containers with all labels, sorted, in one call", func(t *testing.T) {
		g := NewWithT(t)
		d := newStubDocker(t, &engineStub{containers: map[string]map[string]string{
			"b":     {"pool": "p1", "cluster": "c1"},
			"a":     {"pool": "p1", "cluster": "c1", "extra": "x"},
			"other": {"pool": "p2", "cluster": "c1"},
			"bare":  {"pool": "p1"},
		}})
		got, err := d.List(ctx, map[string]string{"pool": "p1", "cluster": "c1"})
		g.Expect(err).ToNot(HaveOccurred())
		g.Expect(got).To(HaveLen(2))
		g.Expect(got[0].Name).To(Equal("a"))
		g.Expect(got[0].Running).To(BeTrue())
		g.Expect(got[0].CreatedAt).To(Equal(time.Unix(1700000000, 0)))
		g.Expect(got[1].Name).To(Equal("b"))
		g.Expect(d.Calls()).To(Equal(CallCounts{"ContainerList": 1}))
	})

	t.Run("List without labels is refused", func(t *testing.T) {
		g := NewWithT(t)
		d := newStubDocker(t, &engineStub{})
		_, err := d.List(ctx, nil)
		g.Expect(err).To(MatchError(ContainSubstring("at least one label")))
		g.Expect(d.Calls().Total()).To(BeZero())
	})

	t.Run("Exec in a missing container is ErrNotFound", func(t *testing.T) {
		g := NewWithT(t)
		d := newStubDocker(t, &engineStub{})
		_, err := d.Exec(ctx, "gone", []string{"true"}, nil)
		g.Expect(err).To(MatchError(ErrNotFound))
	})

	t.Run("EnsureNetwork creates kind's network once, leaves host alone", func(t *testing.T) {
		attempt := func(n int32) string {
			return `"IPAM":{"Config":[{"Subnet":"` + KindIPv6Subnet("kind", n).String() + `"}],"Driver":"","Options":null}`
		}
		const masquerade = `"Options":{"com.docker.network.bridge.enable_ip_masquerade":"true"}`
		const overlap = "Pool overlaps with other one on this address space"
		tests := []struct {
			name      string
			stub      *engineStub
			isolated  bool
			wantPosts []string
			wantErr   string
		}{
			{
				name:      "IPv6 subnet from the name, masquerade, no MTU where the bridge sets none",
				wantPosts: []string{`{"EnableIPv6":true,` + attempt(0) + `,` + masquerade + `}`},
			},
			{
				name:      "the default bridge's MTU",
				stub:      &engineStub{bridgeMTU: "1400"},
				wantPosts: []string{`{"EnableIPv6":true,` + attempt(0) + `,"Options":{"com.docker.network.bridge.enable_ip_masquerade":"true","com.docker.network.driver.mtu":"1400"}}`},
			},
			{
				name:      "isolated: no masquerade",
				isolated:  true,
				wantPosts: []string{`{"EnableIPv6":true,` + attempt(0) + `,"Options":{"com.docker.network.bridge.enable_ip_masquerade":"false"}}`},
			},
			{
				name: "no IPv6 on the engine: IPv4 only",
				stub: &engineStub{createRefusals: []string{"Cannot read IPv6 setup for bridge docker0: open /proc/sys/net/ipv6/conf/docker0/disable_ipv6: no such file or directory"}},
				wantPosts: []string{
					`{"EnableIPv6":true,` + attempt(0) + `,` + masquerade + `}`,
					`{"EnableIPv6":null,"IPAM":null,` + masquerade + `}`,
				},
			},
			{
				name: "subnets taken: the next of kind's",
				stub: &engineStub{createRefusals: []string{overlap, overlap}},
				wantPosts: []string{
					`{"EnableIPv6":true,` + attempt(0) + `,` + masquerade + `}`,
					`{"EnableIPv6":true,` + attempt(1) + `,` + masquerade + `}`,
					`{"EnableIPv6":true,` + attempt(2) + `,` + masquerade + `}`,
				},
			},
			{
				name:    "all five taken: an error",
				stub:    &engineStub{createRefusals: []string{overlap, overlap, overlap, overlap, overlap}},
				wantErr: overlap,
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := NewWithT(t)
				e := cmp.Or(tt.stub, &engineStub{})
				e.networks = []string{"kind-other"}
				d := newStubDocker(t, e)
				d.IsolatedNetworks = tt.isolated
				_, _ = d.Ping(ctx)
				g.Expect(d.EnsureNetwork(ctx, "host")).To(Equal(Network{Name: "host"}))
				_, err := d.EnsureNetwork(ctx, "kind")
				var posts []string
				for _, r := range e.Requests() {
					if post, ok := strings.CutPrefix(r, "POST /networks/create "); ok {
						posts = append(posts, post)
					}
				}
				if tt.wantErr != "" {
					g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
					g.Expect(posts).To(HaveLen(kindSubnetAttempts))
					return
				}
				g.Expect(err).ToNot(HaveOccurred())
				g.Expect(posts).To(Equal(tt.wantPosts))
				requests := len(e.Requests())
				g.Expect(d.EnsureNetwork(ctx, "kind")).To(Equal(Network{Name: "kind"}))
				g.Expect(e.Requests()[requests:]).To(Equal([]string{"GET /networks"}), "an existing network is used as it is")
			})
		}
	})
}

// wedgedEngine is a socket that accepts connections and never answers, as an engine that hangs.
func wedgedEngine(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "unix", filepath.Join(t.TempDir(), "docker.sock"))
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "unix://" + l.Addr().String()
}

func TestDockerEngineUnavailable(t *testing.T) {
	const callTimeout = 200 * time.Millisecond
	calls := []struct {
		name string
		call func(context.Context, *Docker) error
	}{
		{"Ping", func(ctx context.Context, d *Docker) error { _, err := d.Ping(ctx); return err }},
		{"List", func(ctx context.Context, d *Docker) error {
			_, err := d.List(ctx, map[string]string{"a": "b"})
			return err
		}},
		{"Inspect", func(ctx context.Context, d *Docker) error { _, err := d.Inspect(ctx, "n1"); return err }},
		{"Create", func(ctx context.Context, d *Docker) error {
			_, err := d.Create(ctx, Spec{Name: "n1", Image: "kindest/node:v1.36.3"})
			return err
		}},
		{"Exec", func(ctx context.Context, d *Docker) error {
			_, err := d.Exec(ctx, "n1", []string{"true"}, nil)
			return err
		}},
		{"Delete", func(ctx context.Context, d *Docker) error { return d.Delete(ctx, "n1") }},
		{"ImageExists", func(ctx context.Context, d *Docker) error {
			_, err := d.ImageExists(ctx, "kindest/node:v1.36.3")
			return err
		}},
		{"ImageTags", func(ctx context.Context, d *Docker) error { _, err := d.ImageTags(ctx, "kindest/node", ""); return err }},
		{"ImageID", func(ctx context.Context, d *Docker) error {
			_, err := d.ImageID(ctx, "kindest/node:v1.36.3")
			return err
		}},
		{"ReadImageFile", func(ctx context.Context, d *Docker) error {
			_, err := d.ReadImageFile(ctx, "kindest/node:v1.36.3", "/kind/version")
			return err
		}},
		{"EnsureNetwork", func(ctx context.Context, d *Docker) error { _, err := d.EnsureNetwork(ctx, "kind"); return err }},
		{"Host", func(ctx context.Context, d *Docker) error { _, err := d.Host(ctx); return err }},
	}
	engines := []struct {
		name string
		host func(t *testing.T) string
	}{
		{"wedged: accepts and never answers", wedgedEngine},
		{"gone: the socket refuses", func(t *testing.T) string { return "unix://" + filepath.Join(t.TempDir(), "none.sock") }},
	}
	for _, engine := range engines {
		for _, c := range calls {
			t.Run(engine.name+"/"+c.name, func(t *testing.T) {
				g := NewWithT(t)
				d, err := NewDocker(client.WithHost(engine.host(t)), client.WithAPIVersion("1.41"))
				g.Expect(err).ToNot(HaveOccurred())
				t.Cleanup(func() { _ = d.Close() })
				d.CallTimeout = callTimeout

				start := time.Now()
				err = c.call(context.Background(), d)
				g.Expect(err).To(MatchError(ErrEngineUnavailable))
				g.Expect(time.Since(start)).To(BeNumerically("<", 10*callTimeout), "the call returns after its timeout")
			})
		}
	}

	t.Run("a caller that gave up is not told the engine is unavailable", func(t *testing.T) {
		g := NewWithT(t)
		d, err := NewDocker(client.WithHost(wedgedEngine(t)), client.WithAPIVersion("1.41"))
		g.Expect(err).ToNot(HaveOccurred())
		t.Cleanup(func() { _ = d.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err = d.List(ctx, map[string]string{"a": "b"})
		g.Expect(err).To(MatchError(context.DeadlineExceeded))
		g.Expect(err).NotTo(MatchError(ErrEngineUnavailable))
	})
}
