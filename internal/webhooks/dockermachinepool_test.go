package webhooks

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func poolWith(template infrav1.DockerMachinePoolMachineTemplate) *infrav1.DockerMachinePool {
	return &infrav1.DockerMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "default"},
		Spec:       infrav1.DockerMachinePoolSpec{Template: template},
	}
}

func TestDockerMachinePoolDefault(t *testing.T) {
	tests := []struct {
		name    string
		timeout *metav1.Duration
		want    time.Duration
	}{
		{name: "empty bootstrapTimeout defaults to 3m", timeout: nil, want: 3 * time.Minute},
		{name: "bootstrapTimeout set is kept", timeout: &metav1.Duration{Duration: 10 * time.Minute}, want: 10 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			pool := poolWith(infrav1.DockerMachinePoolMachineTemplate{BootstrapTimeout: tt.timeout})
			g.Expect((&DockerMachinePool{}).Default(context.Background(), pool)).To(Succeed())
			g.Expect(pool.Spec.Template.BootstrapTimeout).ToNot(BeNil())
			g.Expect(pool.Spec.Template.BootstrapTimeout.Duration).To(Equal(tt.want))
		})
	}
}

func TestDockerMachinePoolValidateCreate(t *testing.T) {
	tests := []struct {
		name         string
		template     infrav1.DockerMachinePoolMachineTemplate
		wantErrs     []string // substrings of the error, field paths first
		wantWarnings []string
	}{
		{
			name:     "empty template",
			template: infrav1.DockerMachinePoolMachineTemplate{},
		},
		{
			name:     "customImage tagged with a version",
			template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node:v1.35.0"},
		},
		{
			name:     "customImage with registry port, version tag and digest",
			template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "localhost:5000/kindest/node:v1.35.0@" + testDigest},
		},
		{
			name:     "customImage with build metadata written with _ as in OCI tags",
			template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "registry.example/node:v1.35.0_k3s1"},
		},
		{
			name:     "customImage whose version tag lacks the v",
			template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "registry.example:443/node:1.35.0"},
			wantErrs: []string{`spec.template.customImage: Invalid value: "registry.example:443/node:1.35.0"`, "not a Kubernetes version"},
		},
		{
			name:     "customImage with a tag that is not a version",
			template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node:latest"},
			wantErrs: []string{`spec.template.customImage: Invalid value: "kindest/node:latest"`, "version-skew gate"},
		},
		{
			name:     "customImage without a tag",
			template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node"},
			wantErrs: []string{"spec.template.customImage", "has no tag"},
		},
		{
			name:     "customImage whose registry port is not a tag",
			template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "localhost:5000/kindest/node"},
			wantErrs: []string{"spec.template.customImage", "has no tag"},
		},
		{
			name:     "customImage pinned by digest only",
			template: infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node@" + testDigest},
			wantErrs: []string{"spec.template.customImage"},
		},
		{
			name: "preLoadImages are image references",
			template: infrav1.DockerMachinePoolMachineTemplate{PreLoadImages: []string{
				"nginx:1.27", "registry.k8s.io/pause:3.10", "busybox@" + testDigest, "localhost:5000/app",
			}},
		},
		{
			name: "preLoadImages entries that are not image references",
			template: infrav1.DockerMachinePoolMachineTemplate{PreLoadImages: []string{
				"nginx:1.27", "Registry/UPPER:1", "nginx:bad tag", testDigest,
			}},
			wantErrs: []string{
				`spec.template.preLoadImages[1]: Invalid value: "Registry/UPPER:1"`,
				`spec.template.preLoadImages[2]: Invalid value: "nginx:bad tag"`,
				// Not the repository "sha256" tagged with the hex: an image loaded into
				// containerd needs a name.
				`spec.template.preLoadImages[3]: Invalid value: "` + testDigest + `"`, "an image ID, not a name",
			},
		},
		{
			name: "preLoadImages naming one image twice warn",
			template: infrav1.DockerMachinePoolMachineTemplate{PreLoadImages: []string{
				"nginx", "docker.io/library/nginx:latest",
			}},
			wantWarnings: []string{"spec.template.preLoadImages[1]", "spec.template.preLoadImages[0]"},
		},
		{
			name: "extraMounts with distinct container paths",
			template: infrav1.DockerMachinePoolMachineTemplate{ExtraMounts: []infrav1.Mount{
				{ContainerPath: "/data", HostPath: "/srv/data"},
				{ContainerPath: "/data/cache", HostPath: "/srv/cache", ReadOnly: true},
			}},
		},
		{
			name: "extraMounts with one container path twice",
			template: infrav1.DockerMachinePoolMachineTemplate{ExtraMounts: []infrav1.Mount{
				{ContainerPath: "/data", HostPath: "/srv/a"},
				{ContainerPath: "/cache", HostPath: "/srv/b"},
				{ContainerPath: "/data/", HostPath: "/srv/c"},
			}},
			wantErrs: []string{`spec.template.extraMounts[2].containerPath: Duplicate value: "/data/"`, "spec.template.extraMounts[0].containerPath"},
		},
		{
			name: "extraMounts of a host path outside --allowed-host-paths",
			template: infrav1.DockerMachinePoolMachineTemplate{ExtraMounts: []infrav1.Mount{
				{ContainerPath: "/data", HostPath: "/srv/data"},
				{ContainerPath: "/certs", HostPath: "/etc/ssl/certs", ReadOnly: true},
			}},
			wantErrs: []string{`spec.template.extraMounts[1].hostPath: Forbidden: host path "/etc/ssl/certs" is not at or below any of --allowed-host-paths=/srv`},
		},
		{
			name: "extraMounts of the Docker socket, whatever the flag says",
			template: infrav1.DockerMachinePoolMachineTemplate{ExtraMounts: []infrav1.Mount{
				{ContainerPath: "/var/run/docker.sock", HostPath: "/var/run/docker.sock"},
			}},
			wantErrs: []string{`spec.template.extraMounts[0].hostPath: Forbidden: host path "/var/run/docker.sock" is /var/run/docker.sock, which no pool may mount whatever --allowed-host-paths says`},
		},
		{
			name: "extraMounts container paths with a \":\" that Docker would read as bind options",
			template: infrav1.DockerMachinePoolMachineTemplate{ExtraMounts: []infrav1.Mount{
				{ContainerPath: "/proc:ro", HostPath: "/srv/a"},
				{ContainerPath: "/data:rshared", HostPath: "/srv/b"},
			}},
			wantErrs: []string{
				`spec.template.extraMounts[0].containerPath: Invalid value: "/proc:ro"`,
				`spec.template.extraMounts[1].containerPath: Invalid value: "/data:rshared"`,
				`contains ":"`,
			},
		},
		{
			name: "extraMounts host path with a \":\" that Docker would read as the container path",
			template: infrav1.DockerMachinePoolMachineTemplate{ExtraMounts: []infrav1.Mount{
				{ContainerPath: "/data", HostPath: "/srv/a:/b"},
			}},
			wantErrs: []string{`spec.template.extraMounts[0].hostPath: Invalid value: "/srv/a:/b"`, `contains ":"`},
		},
		{
			name: "extraMounts on the mount points every node has",
			template: infrav1.DockerMachinePoolMachineTemplate{ExtraMounts: []infrav1.Mount{
				{ContainerPath: "/lib/modules", HostPath: "/srv/modules"},
				{ContainerPath: "/tmp/", HostPath: "/srv/tmp"},
				{ContainerPath: "/run", HostPath: "/srv/run"},
				{ContainerPath: "/var", HostPath: "/srv/var"},
			}},
			wantErrs: []string{
				`spec.template.extraMounts[0].containerPath: Forbidden: container path "/lib/modules"`,
				`spec.template.extraMounts[1].containerPath: Forbidden: container path "/tmp/"`,
				`spec.template.extraMounts[2].containerPath: Forbidden: container path "/run"`,
				`spec.template.extraMounts[3].containerPath: Forbidden: container path "/var"`,
			},
		},
		{
			name: "extraMounts below the node's own mount points",
			template: infrav1.DockerMachinePoolMachineTemplate{ExtraMounts: []infrav1.Mount{
				{ContainerPath: "/var/lib/data", HostPath: "/srv/data"},
				{ContainerPath: "/run/secrets", HostPath: "/srv/secrets", ReadOnly: true},
			}},
		},
		{
			name: "every error is reported at once",
			template: infrav1.DockerMachinePoolMachineTemplate{
				CustomImage:   "kindest/node:main",
				PreLoadImages: []string{"::"},
				ExtraMounts:   []infrav1.Mount{{ContainerPath: "/a", HostPath: "/x"}, {ContainerPath: "/a", HostPath: "/y"}},
			},
			wantErrs: []string{"spec.template.customImage", "spec.template.preLoadImages[0]", "spec.template.extraMounts[1].containerPath"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			warnings, err := (&DockerMachinePool{HostPaths: testHostPaths}).ValidateCreate(context.Background(), poolWith(tt.template))
			expectInvalid(g, err, tt.wantErrs)
			expectWarnings(g, warnings, tt.wantWarnings)
		})
	}
}

func TestDockerMachinePoolValidateUpdate(t *testing.T) {
	valid := infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node:v1.34.1"}
	invalid := infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node:latest"}

	tests := []struct {
		name     string
		old, new infrav1.DockerMachinePoolMachineTemplate
		wantErrs []string
	}{
		{
			name: "the template may change (pools roll out in place)",
			old:  valid,
			new:  infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node:v1.35.0"},
		},
		{
			name:     "a changed template is validated",
			old:      valid,
			new:      invalid,
			wantErrs: []string{"spec.template.customImage"},
		},
		{
			name: "an unchanged template admitted before a rule existed does not block other updates",
			old:  invalid,
			new:  invalid,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			oldPool := poolWith(tt.old)
			newPool := poolWith(tt.new)
			newPool.Spec.ProviderIDList = []string{"docker:////pool-abcde"}
			warnings, err := (&DockerMachinePool{}).ValidateUpdate(context.Background(), oldPool, newPool)
			expectInvalid(g, err, tt.wantErrs)
			g.Expect(warnings).To(BeEmpty())
		})
	}
}

// TestDockerMachinePoolStoredWithoutDefaults: a pool stored without bootstrapTimeout (with
// webhooks off) gets the default on every update; that is no change of its template, so a
// template the webhook would refuse now does not block updates such as the controller's.
func TestDockerMachinePoolStoredWithoutDefaults(t *testing.T) {
	g := NewWithT(t)
	// Stored while webhooks were off: no default, a host path the webhook below does not allow.
	stored := poolWith(infrav1.DockerMachinePoolMachineTemplate{
		ExtraMounts: []infrav1.Mount{{ContainerPath: "/data", HostPath: "/data/pool"}},
	})
	updated := stored.DeepCopy()
	updated.Spec.ProviderIDList = []string{"docker:////pool-abcde"}
	webhook := &DockerMachinePool{HostPaths: testHostPaths}
	// The API server calls the defaulting webhook on the update before the validating one.
	g.Expect(webhook.Default(context.Background(), updated)).To(Succeed())
	_, err := webhook.ValidateUpdate(context.Background(), stored, updated)
	g.Expect(err).ToNot(HaveOccurred())

	// A change of the template is still checked.
	updated.Spec.Template.PreLoadImages = []string{"nginx:1.27"}
	_, err = webhook.ValidateUpdate(context.Background(), stored, updated)
	expectInvalid(g, err, []string{`spec.template.extraMounts[0].hostPath: Forbidden: host path "/data/pool"`})
}

// TestDockerMachinePoolStrategy: the webhook admits counts and percentages of a rolling update
// and refuses what a rollout cannot use, on create, on update, and in a template.
func TestDockerMachinePoolStrategy(t *testing.T) {
	num, pct := intstr.FromInt32, intstr.FromString
	tests := []struct {
		name           string
		maxSurge       *intstr.IntOrString
		maxUnavailable *intstr.IntOrString
		wantErrs       []string
	}{
		{name: "unset: one at a time"},
		{name: "surge of 5", maxSurge: ptr.To(num(5))},
		{name: "percentages", maxSurge: ptr.To(pct("25%")), maxUnavailable: ptr.To(pct("10%"))},
		{name: "surge above 100%", maxSurge: ptr.To(pct("150%"))},
		{name: "remove first, then create", maxSurge: ptr.To(num(0)), maxUnavailable: ptr.To(num(1))},
		{name: "negative surge", maxSurge: ptr.To(num(-1)), wantErrs: []string{"spec.strategy.rollingUpdate.maxSurge: Invalid value: -1: must not be negative"}},
		{name: "not a percentage", maxUnavailable: ptr.To(pct("ten")), wantErrs: []string{`spec.strategy.rollingUpdate.maxUnavailable: Invalid value: "ten"`}},
		{name: "unavailable above 100%", maxUnavailable: ptr.To(pct("101%")), wantErrs: []string{"must not be above 100%"}},
		{name: "both 0", maxSurge: ptr.To(num(0)), maxUnavailable: ptr.To(pct("0%")), wantErrs: []string{"spec.strategy.rollingUpdate.maxUnavailable", "must be above 0 when maxSurge is 0"}},
		{name: "surge 0, unavailable unset (0)", maxSurge: ptr.To(pct("0%")), wantErrs: []string{`maxUnavailable: Invalid value: "0"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			expectSpecValidated(g, func(spec *infrav1.DockerMachinePoolSpec) {
				spec.Strategy = infrav1.DockerMachinePoolStrategy{RollingUpdate: infrav1.DockerMachinePoolRollingUpdate{MaxSurge: tt.maxSurge, MaxUnavailable: tt.maxUnavailable}}
			}, tt.wantErrs)
		})
	}
}

// expectSpecValidated checks a pool spec that set makes on a new pool, on an update that changes
// only it, and in a template, where the fields are below spec.template: each refuses with
// wantErrs (the pool's field paths), or admits when there are none.
func expectSpecValidated(g Gomega, set func(*infrav1.DockerMachinePoolSpec), wantErrs []string) {
	pool := poolWith(infrav1.DockerMachinePoolMachineTemplate{})
	set(&pool.Spec)
	_, err := (&DockerMachinePool{}).ValidateCreate(context.Background(), pool)
	expectInvalid(g, err, wantErrs)

	_, err = (&DockerMachinePool{}).ValidateUpdate(context.Background(), poolWith(infrav1.DockerMachinePoolMachineTemplate{}), pool)
	expectInvalid(g, err, wantErrs)

	template := &infrav1.DockerMachinePoolTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "t"}}
	set(&template.Spec.Template.Spec)
	_, err = (&DockerMachinePoolTemplate{}).ValidateCreate(context.Background(), template)
	var templateErrs []string
	for _, e := range wantErrs {
		templateErrs = append(templateErrs, strings.Replace(e, "spec.", "spec.template.spec.", 1))
	}
	expectInvalid(g, err, templateErrs)
}

// TestDockerMachinePoolRemediation: the webhook admits a number or percentage of remediations in
// flight and refuses one that would never let the pool remediate, on create, on update, and in a
// template.
func TestDockerMachinePoolRemediation(t *testing.T) {
	num, pct := intstr.FromInt32, intstr.FromString
	tests := []struct {
		name        string
		maxInFlight *intstr.IntOrString
		wantErrs    []string
	}{
		{name: "unset: no limit"},
		{name: "one at a time", maxInFlight: ptr.To(num(1))},
		{name: "a percentage", maxInFlight: ptr.To(pct("40%"))},
		{name: "none", maxInFlight: ptr.To(num(0)), wantErrs: []string{"spec.remediation.maxInFlight: Invalid value: \"0\": must be at least 1"}},
		{name: "0%", maxInFlight: ptr.To(pct("0%")), wantErrs: []string{"spec.remediation.maxInFlight", "must be at least 1"}},
		{name: "above 100%", maxInFlight: ptr.To(pct("150%")), wantErrs: []string{"must not be above 100%"}},
		{name: "not a percentage", maxInFlight: ptr.To(pct("two")), wantErrs: []string{"must be a number or a percentage"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			expectSpecValidated(g, func(spec *infrav1.DockerMachinePoolSpec) {
				spec.Remediation = infrav1.DockerMachinePoolRemediation{MaxInFlight: tt.maxInFlight}
			}, tt.wantErrs)
		})
	}
}

// TestDockerMachinePoolUIDAnnotation: the UID a pool's containers carry, once recorded, cannot
// change or go; a new pool may bring one, as clusterctl move creates it.
func TestDockerMachinePoolUIDAnnotation(t *testing.T) {
	valid := infrav1.DockerMachinePoolMachineTemplate{CustomImage: "kindest/node:v1.34.1"}
	withUID := func(uid string) *infrav1.DockerMachinePool {
		pool := poolWith(valid)
		if uid != "" {
			pool.Annotations = map[string]string{infrav1.PoolUIDAnnotation: uid}
		}
		return pool
	}
	tests := []struct {
		name     string
		old, new *infrav1.DockerMachinePool
		wantErrs []string
	}{
		{name: "recorded by the controller", old: withUID(""), new: withUID("uid-1")},
		{name: "kept", old: withUID("uid-1"), new: withUID("uid-1")},
		{name: "changed", old: withUID("uid-1"), new: withUID("uid-2"), wantErrs: []string{"metadata.annotations[infrastructure.capdmp.dev/pool-uid]", "cannot change"}},
		{name: "removed", old: withUID("uid-1"), new: withUID(""), wantErrs: []string{"metadata.annotations[infrastructure.capdmp.dev/pool-uid]"}},
		{name: "brought by a new pool (clusterctl move)", new: withUID("uid-1")},
		{name: "removed by clusterctl move's delete-for-move annotation, which replaces every annotation",
			old: withUID("uid-1"), new: deletedForMove(withUID(""))},
		{name: "changed beside the delete-for-move annotation: the pool is leaving this cluster",
			old: withUID("uid-1"), new: deletedForMove(withUID("uid-2"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := validateCreateOrUpdate(&DockerMachinePool{Client: poolReader(g)}, tt.old, tt.new)
			expectInvalid(g, err, tt.wantErrs)
		})
	}
}

// validateCreateOrUpdate validates newPool as a create when oldPool is nil, else as an update.
func validateCreateOrUpdate(webhook *DockerMachinePool, oldPool, newPool *infrav1.DockerMachinePool) error {
	if oldPool == nil {
		_, err := webhook.ValidateCreate(context.Background(), newPool)
		return err
	}
	_, err := webhook.ValidateUpdate(context.Background(), oldPool, newPool)
	return err
}

// TestDockerMachinePoolUIDHeldByAnotherPool: a pool may not record a UID another pool holds, as
// its own UID or as its recorded one, since it would take that pool's containers; a pool copied
// from another (kubectl get -o yaml, renamed) would otherwise do just that.
func TestDockerMachinePoolUIDHeldByAnotherPool(t *testing.T) {
	pool := func(namespace, name, uid, recorded string) *infrav1.DockerMachinePool {
		p := &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid)}}
		if recorded != "" {
			p.Annotations = map[string]string{infrav1.PoolUIDAnnotation: recorded}
		}
		return p
	}
	const field = "metadata.annotations[infrastructure.capdmp.dev/pool-uid]: Forbidden"
	tests := []struct {
		name     string
		existing []*infrav1.DockerMachinePool
		old, new *infrav1.DockerMachinePool
		wantErrs []string
	}{
		{
			name:     "another pool's own UID",
			existing: []*infrav1.DockerMachinePool{pool("default", "a", "uid-a", "")},
			new:      pool("default", "b", "uid-b", "uid-a"),
			wantErrs: []string{field, "UID uid-a is held by DockerMachinePool default/a", "must not keep this annotation"},
		},
		{
			name:     "the UID another pool recorded (it was moved here)",
			existing: []*infrav1.DockerMachinePool{pool("default", "a", "uid-a2", "uid-a")},
			new:      pool("default", "b", "uid-b", "uid-a"),
			wantErrs: []string{field, "DockerMachinePool default/a"},
		},
		{
			name:     "a pool of another namespace",
			existing: []*infrav1.DockerMachinePool{pool("team-a", "a", "uid-a", "uid-a")},
			new:      pool("team-b", "a", "uid-b", "uid-a"),
			wantErrs: []string{field, "DockerMachinePool team-a/a"},
		},
		{
			name:     "a pool created without a UID in the request has no own UID to exempt",
			existing: []*infrav1.DockerMachinePool{pool("default", "a", "uid-a", "uid-a")},
			new:      pool("default", "b", "", "uid-a"),
			wantErrs: []string{field, "DockerMachinePool default/a"},
		},
		{
			name:     "held only by the pool itself",
			existing: []*infrav1.DockerMachinePool{pool("default", "a", "uid-a", "uid-a")},
			new:      pool("default", "a", "uid-a", "uid-a"),
		},
		{
			name:     "held by nobody: clusterctl move creates the pool with its source cluster's UID",
			existing: []*infrav1.DockerMachinePool{pool("default", "other", "uid-other", "uid-other")},
			new:      pool("default", "a", "uid-a2", "uid-a"),
		},
		{
			name: "an update keeping the annotation is not looked up",
			// Copies admitted before this rule existed keep their updates.
			existing: []*infrav1.DockerMachinePool{pool("default", "a", "uid-a", "uid-a"), pool("default", "b", "uid-b", "uid-a")},
			old:      pool("default", "b", "uid-b", "uid-a"),
			new:      pool("default", "b", "uid-b", "uid-a"),
		},
		{
			name:     "the controller records the pool's own UID",
			existing: []*infrav1.DockerMachinePool{pool("default", "a", "uid-a", "")},
			old:      pool("default", "a", "uid-a", ""),
			new:      pool("default", "a", "uid-a", "uid-a"),
		},
		{
			name:     "an update adding another pool's UID",
			existing: []*infrav1.DockerMachinePool{pool("default", "a", "uid-a", "uid-a"), pool("default", "b", "uid-b", "")},
			old:      pool("default", "b", "uid-b", ""),
			new:      pool("default", "b", "uid-b", "uid-a"),
			wantErrs: []string{field, "DockerMachinePool default/a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := validateCreateOrUpdate(&DockerMachinePool{Client: poolReader(g, tt.existing...)}, tt.old, tt.new)
			expectInvalid(g, err, tt.wantErrs)
		})
	}
}

// TestDockerMachinePoolUIDLookup: the own-UID case needs no client, and a lookup that cannot be
// made refuses the pool rather than admitting it unchecked.
func TestDockerMachinePoolUIDLookup(t *testing.T) {
	g := NewWithT(t)
	pool := &infrav1.DockerMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", UID: "uid-a",
		Annotations: map[string]string{infrav1.PoolUIDAnnotation: "uid-a"}}}
	_, err := (&DockerMachinePool{}).ValidateCreate(context.Background(), pool)
	g.Expect(err).ToNot(HaveOccurred())

	pool.Annotations[infrav1.PoolUIDAnnotation] = "uid-other"
	_, err = (&DockerMachinePool{}).ValidateCreate(context.Background(), pool)
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "got %v", err)

	// The fake client, like the cache, refuses a field selector it has no index for.
	unindexed := fake.NewClientBuilder().WithScheme(poolScheme(g)).Build()
	_, err = (&DockerMachinePool{Client: unindexed}).ValidateCreate(context.Background(), pool)
	g.Expect(apierrors.IsInternalError(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("UID uid-other"))
}

// poolReader is a client holding pools, with the PoolUIDIndex the manager's cache has.
func poolReader(g Gomega, pools ...*infrav1.DockerMachinePool) client.Reader {
	builder := fake.NewClientBuilder().WithScheme(poolScheme(g)).
		WithIndex(&infrav1.DockerMachinePool{}, PoolUIDIndex, IndexPoolUIDs)
	for _, pool := range pools {
		builder = builder.WithObjects(pool.DeepCopy())
	}
	return builder.Build()
}

func poolScheme(g Gomega) *runtime.Scheme {
	scheme := runtime.NewScheme()
	g.ExpectWithOffset(1, infrav1.AddToScheme(scheme)).To(Succeed())
	return scheme
}

// deletedForMove marks pool the way clusterctl move marks what it deletes from its source.
func deletedForMove(pool *infrav1.DockerMachinePool) *infrav1.DockerMachinePool {
	if pool.Annotations == nil {
		pool.Annotations = map[string]string{}
	}
	pool.Annotations[clusterctlv1.DeleteForMoveAnnotation] = ""
	return pool
}

func TestDockerMachinePoolValidateDelete(t *testing.T) {
	g := NewWithT(t)
	warnings, err := (&DockerMachinePool{}).ValidateDelete(context.Background(), poolWith(infrav1.DockerMachinePoolMachineTemplate{CustomImage: "x:latest"}))
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(warnings).To(BeEmpty())
}

// expectInvalid checks that err is nil when no errors are wanted, else an Invalid error whose
// message contains every wanted substring.
func expectInvalid(g Gomega, err error, wantErrs []string) {
	if len(wantErrs) == 0 {
		g.ExpectWithOffset(1, err).ToNot(HaveOccurred())
		return
	}
	g.ExpectWithOffset(1, err).To(HaveOccurred())
	g.ExpectWithOffset(1, apierrors.IsInvalid(err)).To(BeTrue(), "expected an Invalid error, got %v", err)
	for _, want := range wantErrs {
		g.ExpectWithOffset(1, err.Error()).To(ContainSubstring(want))
	}
}

// expectWarnings checks that there are warnings exactly when some are wanted, and that they
// contain every wanted substring.
func expectWarnings(g Gomega, warnings []string, wantWarnings []string) {
	if len(wantWarnings) == 0 {
		g.ExpectWithOffset(1, warnings).To(BeEmpty())
		return
	}
	g.ExpectWithOffset(1, warnings).ToNot(BeEmpty())
	for _, want := range wantWarnings {
		g.ExpectWithOffset(1, warnings).To(ContainElement(ContainSubstring(want)))
	}
}
