// Package container is the only place where CAPDMP talks to a container engine. Runtime is a
// small interface over the Docker Engine API; Docker implements it with the moby client and the
// fake sub-package implements it in memory for controller unit tests.
package container

import (
	"context"
	"errors"
	"io"
	"maps"
	"sync"
	"time"
)

var (
	// ErrImageNotFound is returned when an image is not present on the engine. CAPDMP never pulls,
	// so this is a user-facing condition: the image must be built or loaded first.
	ErrImageNotFound = errors.New("image not found")

	// ErrNotFound is returned when a container does not exist.
	ErrNotFound = errors.New("container not found")

	// ErrNotRunning is returned when a command is executed in a container that exists but does not run.
	ErrNotRunning = errors.New("container not running")

	// ErrAlreadyExists is returned when a container with the same name exists already, e.g. because
	// an earlier reconcile created it and its result was lost.
	ErrAlreadyExists = errors.New("container already exists")

	// ErrFileNotFound is returned by ReadImageFile when the image has no file at the path.
	ErrFileNotFound = errors.New("file not found in image")
)

// MaxImageFile bounds what ReadImageFile reads: it is for small metadata files such as
// /kind/version, and a larger file is refused rather than truncated.
const MaxImageFile = 64 << 10

// HostNetwork is the name of Docker's host network; containers on it share the host's network
// namespace, get no hostname of their own and no IP address.
const HostNetwork = "host"

// Runtime is what the controllers need from a container engine.
type Runtime interface {
	// List returns all containers, running or not, that carry all the given labels.
	List(ctx context.Context, labels map[string]string) ([]Container, error)

	// Inspect returns one container by name or ID; ErrNotFound if it does not exist.
	Inspect(ctx context.Context, containerName string) (Container, error)

	// Create creates and starts a container. It never pulls: a missing image is ErrImageNotFound,
	// an existing container with the same name ErrAlreadyExists.
	Create(ctx context.Context, spec Spec) (Container, error)

	// Exec runs cmd in a running container, feeding it stdin when not nil, and waits for it to end.
	// A non-zero exit code is not an error; it is reported in ExecResult.
	Exec(ctx context.Context, containerName string, cmd []string, stdin io.Reader) (ExecResult, error)

	// Delete force-removes a container with its anonymous volumes. A missing container is success.
	Delete(ctx context.Context, containerName string) error

	// ImageExists tells whether an image is present on the engine, without pulling it.
	ImageExists(ctx context.Context, image string) (bool, error)

	// ImageID returns the ID ("sha256:...") of an image present on the engine, given by reference
	// or ID; ErrImageNotFound if it is absent. It never pulls.
	ImageID(ctx context.Context, image string) (string, error)

	// ReadImageFile returns the content of the regular file at the absolute path in an image's
	// filesystem, without running anything from the image and without pulling it. A missing image
	// is ErrImageNotFound, a missing file ErrFileNotFound; symlinks are not followed, and anything
	// but a regular file of at most MaxImageFile bytes is an error. Pass the image's ID (see
	// ImageID) to read the very image another call looked at, whatever its tags became since.
	ReadImageFile(ctx context.Context, image, path string) ([]byte, error)

	// SaveImages streams the given images as a `docker save` tarball, e.g. to import them into a
	// node's containerd with ImportImagesCommand. The caller closes the reader.
	SaveImages(ctx context.Context, images []string) (io.ReadCloser, error)

	// EnsureNetwork makes sure a bridge network exists, created as kind creates it, and returns
	// it. Docker's predefined networks ("host", "bridge", "none") are left alone.
	EnsureNetwork(ctx context.Context, name string) (Network, error)

	// Host returns what the engine reports of the machine its containers run on.
	Host(ctx context.Context) (Host, error)
}

// Watcher is a Runtime that reports changes of containers as the engine makes them. Docker is
// one; a controller that reacts to changes sooner with it still lists what it needs, since a
// stream misses what happens while it reconnects.
type Watcher interface {
	// Watch reports each change of a container carrying all the given labels from since on (see
	// Docker.Watch). The channel closes when the stream ends, after its error is sent.
	Watch(ctx context.Context, labels map[string]string, since time.Time) (<-chan Event, <-chan error)
}

// Event is a change of a container: created, started, stopped or destroyed.
type Event struct {
	ID string
	// Action is the engine's name of the change: create, start, die or destroy.
	Action string
	// At is when the engine made the change.
	At time.Time
	// Attributes are what the engine tells of the container with the change: its labels, and
	// its name and image under "name" and "image".
	Attributes map[string]string
}

// Host is what an engine reports of the machine its containers run on (`docker info`). A node
// container has no resource limits, and its kubelet reads the same machine from /proc and /sys.
type Host struct {
	// CPUs is the number of CPUs the engine can use (NCPU).
	CPUs int
	// MemoryBytes is the machine's total memory (MemTotal, /proc/meminfo's MemTotal in bytes).
	MemoryBytes int64
	// Architecture is the machine's as the engine names it, uname's: x86_64, aarch64.
	Architecture string
	// OSType is the operating system of the engine's containers: linux.
	OSType string
}

// Container is what CAPDMP needs to know about a container.
type Container struct {
	ID    string
	Name  string
	Image string
	// ImageID is the ID of the image the container was created from: it still tells which image
	// the container runs after Image's tag moved to another one.
	ImageID string
	Labels  map[string]string
	Running bool
	// NeverStarted is true for a container the engine made and never started: its creation was
	// cut short. A restart policy does not apply to it; nothing starts it by itself.
	NeverStarted bool
	CreatedAt    time.Time
	// IPv4 and IPv6 are the container's addresses on its network; empty on the host network or
	// when the container does not run.
	IPv4 string
	IPv6 string
}

// ExecResult is the outcome of a command run in a container.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// Mount is a host path bind-mounted into a container. As with `docker run -v`, a missing host
// path is created by the engine.
type Mount struct {
	Source   string
	Target   string
	ReadOnly bool
}

// Spec describes a container to create. NodeSpec builds the spec of a kind node.
type Spec struct {
	Name     string
	Image    string
	Hostname string
	// Network is the network the container joins; empty means Docker's default bridge.
	Network string
	Labels  map[string]string
	Env     []string
	// Entrypoint and Cmd override the image's when not empty.
	Entrypoint []string
	Cmd        []string

	Privileged  bool
	SecurityOpt []string
	// CgroupnsMode is "private" or "host"; empty leaves the engine's default.
	CgroupnsMode string
	// Tmpfs maps container paths to mount options ("" for defaults).
	Tmpfs map[string]string
	// Volumes are container paths that get anonymous volumes, removed with the container.
	Volumes []string
	Mounts  []Mount
	Sysctls map[string]string

	// Tty allocates a terminal, as kind does for the node entrypoint's logs.
	Tty        bool
	StopSignal string
	// RestartPolicy is a Docker restart policy name ("no", "on-failure", "always",
	// "unless-stopped"); MaxRestarts bounds "on-failure".
	RestartPolicy string
	MaxRestarts   int
	// Init runs an init process as PID 1 when true; nil leaves the engine's default.
	Init *bool
}

// ImportImagesCommand imports a `docker save` tarball read from stdin into a node's containerd,
// where the kubelet finds it, with the flags `kind load` uses: images are unpacked at once (only a
// node image build imports without unpacking, since snapshots do not survive a commit).
func ImportImagesCommand() []string {
	return []string{"ctr", "--namespace=k8s.io", "images", "import", "--all-platforms", "--digests", "-"}
}

// CallCounts counts the calls made to a container engine, by operation.
type CallCounts map[string]int64

// Total is the number of calls of all operations.
func (c CallCounts) Total() int64 {
	var total int64
	for _, n := range c {
		total += n
	}
	return total
}

// Sub returns the calls made since an earlier snapshot, e.g. during one reconcile.
func (c CallCounts) Sub(earlier CallCounts) CallCounts {
	out := CallCounts{}
	for op, n := range c {
		if d := n - earlier[op]; d != 0 {
			out[op] = d
		}
	}
	return out
}

// CallCounter is implemented by runtimes that count their engine calls, so that tests and
// benchmarks can report e.g. "Docker API calls per no-change reconcile".
type CallCounter interface {
	Calls() CallCounts
	ResetCalls()
}

// Counter is a concurrency-safe CallCounter that runtimes embed.
type Counter struct {
	mu     sync.Mutex
	counts CallCounts
}

// Count records one call of op.
func (c *Counter) Count(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = CallCounts{}
	}
	c.counts[op]++
}

// Calls returns a snapshot of the calls made so far.
func (c *Counter) Calls() CallCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := CallCounts{}
	maps.Copy(out, c.counts)
	return out
}

// ResetCalls sets all counts back to zero.
func (c *Counter) ResetCalls() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = nil
}
