// Package fake is an in-memory container.Runtime for controller unit tests. It keeps containers,
// images and networks in maps, behaves like the Docker adapter where a controller can tell
// (typed errors, label matching, force delete), records every exec and counts every call.
package fake

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/nodeimage"
	"github.com/capdmp/capdmp/pkg/skew"
)

// ExecFunc decides the result of a command run in a fake container.
type ExecFunc func(c container.Container, cmd []string, stdin []byte) (container.ExecResult, error)

// ExecCall is one recorded exec.
type ExecCall struct {
	Container string
	Cmd       []string
	Stdin     []byte
}

// Runtime is an in-memory container.Runtime. The zero value is not usable; use New.
type Runtime struct {
	container.Counter

	mu         sync.Mutex
	images     map[string]*image // by reference; references tagged to one image share it
	networks   map[string]bool
	containers map[string]*entry
	execs      []ExecCall
	errs       map[string]error
	nextID     int

	// ExecHandler, when set, decides the result of every exec; by default commands succeed with
	// no output.
	ExecHandler ExecFunc
	// Now is the clock used for CreatedAt.
	Now func() time.Time

	// host is what Host reports: DefaultHost unless SetHost changed it.
	host container.Host
}

// DefaultHost is the machine a fake runtime reports: a 4-CPU, 8 GiB x86_64 Linux host.
var DefaultHost = container.Host{CPUs: 4, MemoryBytes: 8 << 30, Architecture: "x86_64", OSType: "linux"}

type entry struct {
	c    container.Container
	spec container.Spec
}

// image is an image's ID and the files ReadImageFile finds in it, by absolute path.
type image struct {
	id    string
	files map[string][]byte
}

var _ container.Runtime = &Runtime{}
var _ container.CallCounter = &Runtime{}

// New returns an empty fake runtime with the given images present.
func New(images ...string) *Runtime {
	r := &Runtime{
		images:     map[string]*image{},
		networks:   map[string]bool{},
		containers: map[string]*entry{},
		errs:       map[string]error{},
		Now:        time.Now,
		host:       DefaultHost,
	}
	for _, i := range images {
		r.ensureImage(i)
	}
	return r
}

// AddImage makes images present, with no files. An image present already is left as it is.
// An image's ID is "sha256:" and the hex SHA-256 of its reference unless SetImageID changes it.
func (r *Runtime) AddImage(images ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, i := range images {
		r.ensureImage(i)
	}
}

// AddNodeImage makes node images present as kind builds them: each records the Kubernetes
// version its tag names in nodeimage.VersionFile. It panics on a reference whose tag is not a
// version, which is a mistake of the test that calls it.
func (r *Runtime) AddNodeImage(refs ...string) {
	for _, ref := range refs {
		version, err := skew.VersionFromImageTag(ref)
		if err != nil {
			panic(fmt.Sprintf("fake node image %q: %v", ref, err))
		}
		r.SetImageFile(ref, nodeimage.VersionFile, []byte(version+"\n"))
	}
}

// NewWithNodeImages returns an empty fake runtime with the given node images present
// (AddNodeImage).
func NewWithNodeImages(refs ...string) *Runtime {
	r := New()
	r.AddNodeImage(refs...)
	return r
}

// SetImageID gives an image, made present if absent, another ID; references tagged to it follow.
func (r *Runtime) SetImageID(ref, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ensureImage(ref).id = id
}

// SetImageFile puts a file at the absolute path p of an image, made present if absent, for
// ReadImageFile; references tagged to the image see it too.
func (r *Runtime) SetImageFile(ref, p string, content []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ensureImage(ref).files[path.Clean(p)] = bytes.Clone(content)
}

// TagImage makes target a reference to the image of source, as `docker tag` does: same ID, same
// files. A target that named another image moves. It fails when source is absent.
func (r *Runtime) TagImage(source, target string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	img, ok := r.image(source)
	if !ok {
		return fmt.Errorf("failed to tag image %q as %q: %w", source, target, container.ErrImageNotFound)
	}
	r.images[target] = img
	return nil
}

// RemoveImage makes an image absent.
func (r *Runtime) RemoveImage(image string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.images, image)
}

// SetError makes every call of the Runtime method op ("List", "Create", "Exec", ...) fail with
// err until it is set back to nil. The call is still counted.
func (r *Runtime) SetError(op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		delete(r.errs, op)
		return
	}
	r.errs[op] = err
}

// Add puts a container in the runtime as if something else had created it.
func (r *Runtime) Add(c container.Container) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.ID == "" {
		c.ID = r.newID()
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = r.Now()
	}
	c.Labels = maps.Clone(c.Labels)
	r.containers[c.Name] = &entry{c: c}
}

// SetRunning stops or restarts a container without removing it.
func (r *Runtime) SetRunning(name string, running bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.containers[name]
	if !ok {
		return fmt.Errorf("fake: %w: %q", container.ErrNotFound, name)
	}
	e.c.Running = running
	if running {
		e.c.NeverStarted = false
	}
	return nil
}

// Spec returns the spec a container was created with.
func (r *Runtime) Spec(name string) (container.Spec, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.containers[name]
	if !ok {
		return container.Spec{}, false
	}
	return e.spec, true
}

// Containers returns all containers, sorted by name.
func (r *Runtime) Containers() []container.Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sorted(func(container.Container) bool { return true })
}

// Execs returns the recorded execs, in order.
func (r *Runtime) Execs() []ExecCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.execs)
}

// Networks returns the networks created by EnsureNetwork, sorted.
func (r *Runtime) Networks() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.networks))
}

// List returns the containers carrying all the labels.
func (r *Runtime) List(_ context.Context, labels map[string]string) ([]container.Container, error) {
	if err := r.begin("List"); err != nil {
		return nil, err
	}
	if len(labels) == 0 {
		return nil, errors.New("failed to list containers: at least one label is required")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sorted(func(c container.Container) bool {
		for k, v := range labels {
			if got, ok := c.Labels[k]; !ok || got != v {
				return false
			}
		}
		return true
	}), nil
}

// Inspect returns one container by name or ID.
func (r *Runtime) Inspect(_ context.Context, name string) (container.Container, error) {
	if err := r.begin("Inspect"); err != nil {
		return container.Container{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.lookup(name)
	if !ok {
		return container.Container{}, fmt.Errorf("failed to inspect container %q: %w", name, container.ErrNotFound)
	}
	return clone(e.c), nil
}

// Create adds a running container; the image must have been added, the name must be free and
// the network must exist (predefined or ensured).
func (r *Runtime) Create(_ context.Context, spec container.Spec) (container.Container, error) {
	if err := r.begin("Create"); err != nil {
		return container.Container{}, err
	}
	if spec.Name == "" || spec.Image == "" {
		return container.Container{}, errors.New("failed to create container: name and image are required")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	img, ok := r.image(spec.Image)
	if !ok {
		return container.Container{}, fmt.Errorf("failed to create container %q: %w: %q is not present on the Docker engine", spec.Name, container.ErrImageNotFound, spec.Image)
	}
	if _, ok := r.containers[spec.Name]; ok {
		return container.Container{}, fmt.Errorf("failed to create container %q: %w", spec.Name, container.ErrAlreadyExists)
	}
	if !isPredefined(spec.Network) && !r.networks[spec.Network] {
		return container.Container{}, fmt.Errorf("failed to create container %q: network %q not found", spec.Name, spec.Network)
	}
	if spec.Hostname != "" && spec.Network == container.HostNetwork {
		// As the engine does.
		return container.Container{}, fmt.Errorf("failed to create container %q: conflicting options: hostname and the network mode", spec.Name)
	}
	c := container.Container{
		ID:        r.newID(),
		Name:      spec.Name,
		Image:     spec.Image,
		ImageID:   img.id,
		Labels:    maps.Clone(spec.Labels),
		Running:   true,
		CreatedAt: r.Now(),
	}
	if spec.Network != container.HostNetwork {
		// Unique for the life of the runtime, as the engine's IPAM would be while it has room.
		n := r.nextID
		c.IPv4 = fmt.Sprintf("172.18.%d.%d", n/250, n%250+2)
	}
	r.containers[spec.Name] = &entry{c: c, spec: cloneSpec(spec)}
	return clone(c), nil
}

// Exec records the command and returns what ExecHandler says (success by default).
func (r *Runtime) Exec(_ context.Context, name string, cmd []string, stdin io.Reader) (container.ExecResult, error) {
	if err := r.begin("Exec"); err != nil {
		return container.ExecResult{}, err
	}
	if len(cmd) == 0 {
		return container.ExecResult{}, errors.New("failed to exec: empty command")
	}
	var in []byte
	if stdin != nil {
		var err error
		if in, err = io.ReadAll(stdin); err != nil {
			return container.ExecResult{}, fmt.Errorf("failed to read stdin: %w", err)
		}
	}
	r.mu.Lock()
	e, ok := r.lookup(name)
	if !ok {
		r.mu.Unlock()
		return container.ExecResult{}, fmt.Errorf("failed to exec %q in container %q: %w", cmd[0], name, container.ErrNotFound)
	}
	if !e.c.Running {
		r.mu.Unlock()
		return container.ExecResult{}, fmt.Errorf("failed to exec %q in container %q: %w", cmd[0], name, container.ErrNotRunning)
	}
	c := clone(e.c)
	r.execs = append(r.execs, ExecCall{Container: c.Name, Cmd: slices.Clone(cmd), Stdin: bytes.Clone(in)})
	handler := r.ExecHandler
	r.mu.Unlock()

	// The handler runs unlocked so that it may call back into the runtime.
	if handler == nil {
		return container.ExecResult{}, nil
	}
	return handler(c, cmd, in)
}

// Delete removes a container; a missing one is success.
func (r *Runtime) Delete(_ context.Context, name string) error {
	if err := r.begin("Delete"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.lookup(name); ok {
		delete(r.containers, e.c.Name)
	}
	return nil
}

// ImageExists tells whether the image was added.
func (r *Runtime) ImageExists(_ context.Context, ref string) (bool, error) {
	if err := r.begin("ImageExists"); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.image(ref)
	return ok, nil
}

// ImageID returns the ID of an image added, by reference or ID.
func (r *Runtime) ImageID(_ context.Context, ref string) (string, error) {
	if err := r.begin("ImageID"); err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	img, ok := r.image(ref)
	if !ok {
		return "", fmt.Errorf("failed to inspect image %q: %w", ref, container.ErrImageNotFound)
	}
	return img.id, nil
}

// ReadImageFile returns a file set with SetImageFile, with the Docker adapter's errors.
func (r *Runtime) ReadImageFile(_ context.Context, ref, p string) ([]byte, error) {
	if err := r.begin("ReadImageFile"); err != nil {
		return nil, err
	}
	if ref == "" || !path.IsAbs(p) {
		return nil, fmt.Errorf("failed to read %q of image %q: an image and an absolute path are required", p, ref)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	img, ok := r.image(ref)
	if !ok {
		return nil, fmt.Errorf("failed to read %q of image %q: %w", p, ref, container.ErrImageNotFound)
	}
	content, ok := img.files[path.Clean(p)]
	if !ok {
		return nil, fmt.Errorf("failed to read %q of image %q: %w", p, ref, container.ErrFileNotFound)
	}
	if len(content) > container.MaxImageFile {
		return nil, fmt.Errorf("failed to read %q of image %q: it has %d bytes, more than the %d read", p, ref, len(content), container.MaxImageFile)
	}
	return bytes.Clone(content), nil
}

// SaveImages returns a fake tarball naming the images.
func (r *Runtime) SaveImages(_ context.Context, images []string) (io.ReadCloser, error) {
	if err := r.begin("SaveImages"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, i := range images {
		if _, ok := r.image(i); !ok {
			return nil, fmt.Errorf("failed to save images: %w: %q", container.ErrImageNotFound, i)
		}
	}
	return io.NopCloser(strings.NewReader("fake image tarball: " + strings.Join(images, ","))), nil
}

// FakeSubnet is the subnet of every network EnsureNetwork returns.
const FakeSubnet = "172.18.0.0/16"

// EnsureNetwork records the network; predefined networks are left alone.
func (r *Runtime) EnsureNetwork(_ context.Context, name string) (container.Network, error) {
	if err := r.begin("EnsureNetwork"); err != nil {
		return container.Network{}, err
	}
	if isPredefined(name) {
		return container.Network{Name: name}, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.networks[name] = true
	return container.Network{Name: name, Subnets: []string{FakeSubnet}}, nil
}

// SetHost changes what Host reports.
func (r *Runtime) SetHost(h container.Host) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.host = h
}

// Host reports the machine SetHost set, DefaultHost by default.
func (r *Runtime) Host(context.Context) (container.Host, error) {
	if err := r.begin("Host"); err != nil {
		return container.Host{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.host, nil
}

// begin counts a call and returns the injected error for it, if any.
func (r *Runtime) begin(op string) error {
	r.Count(op)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs[op]
}

// image finds an image by reference or, as the engine does, by ID.
func (r *Runtime) image(refOrID string) (*image, bool) {
	if img, ok := r.images[refOrID]; ok {
		return img, true
	}
	for _, img := range r.images {
		if img.id == refOrID {
			return img, true
		}
	}
	return nil, false
}

// ensureImage returns the image of ref, adding it with its default ID when absent.
func (r *Runtime) ensureImage(ref string) *image {
	img, ok := r.images[ref]
	if !ok {
		sum := sha256.Sum256([]byte(ref))
		img = &image{id: "sha256:" + hex.EncodeToString(sum[:]), files: map[string][]byte{}}
		r.images[ref] = img
	}
	return img
}

func (r *Runtime) lookup(nameOrID string) (*entry, bool) {
	if e, ok := r.containers[nameOrID]; ok {
		return e, true
	}
	for _, e := range r.containers {
		if e.c.ID == nameOrID {
			return e, true
		}
	}
	return nil, false
}

func (r *Runtime) sorted(match func(container.Container) bool) []container.Container {
	out := []container.Container{}
	for _, name := range slices.Sorted(maps.Keys(r.containers)) {
		if c := r.containers[name].c; match(c) {
			out = append(out, clone(c))
		}
	}
	return out
}

func (r *Runtime) newID() string {
	r.nextID++
	return fmt.Sprintf("%064x", r.nextID)
}

func isPredefined(network string) bool {
	return network == "" || network == container.HostNetwork || network == "bridge" || network == "none"
}

func clone(c container.Container) container.Container {
	c.Labels = maps.Clone(c.Labels)
	return c
}

func cloneSpec(s container.Spec) container.Spec {
	s.Labels = maps.Clone(s.Labels)
	s.Env = slices.Clone(s.Env)
	s.Entrypoint = slices.Clone(s.Entrypoint)
	s.Cmd = slices.Clone(s.Cmd)
	s.SecurityOpt = slices.Clone(s.SecurityOpt)
	s.Tmpfs = maps.Clone(s.Tmpfs)
	s.Volumes = slices.Clone(s.Volumes)
	s.Mounts = slices.Clone(s.Mounts)
	s.Sysctls = maps.Clone(s.Sysctls)
	return s
}
