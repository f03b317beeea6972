package container

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	dockercontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	dockernetwork "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capdmp/capdmp/internal/metrics"
)

const (
	// MaxExecOutput bounds what Exec keeps of each output stream of a command, so that a chatty
	// command cannot fill the controller's memory. The tail beyond is dropped.
	MaxExecOutput = 1 << 20

	// DefaultCallTimeout bounds each request to the engine, streams apart (an exec's output, the
	// event stream, an image save): an engine that stops answering fails the request instead of
	// holding a controller worker.
	DefaultCallTimeout = time.Minute

	// ImageReaderLabel marks the never-started containers ReadImageFile creates to read an image's
	// files, so that one left behind (by a crash between create and remove) is recognisable.
	ImageReaderLabel = "infrastructure.capdmp.dev/image-reader"

	// DefaultStaleImageReaderAge is far above what a read takes (well under a second), so that a
	// read in flight, of this process or another sharing the engine, is never taken for one left
	// behind.
	DefaultStaleImageReaderAge = time.Minute

	// imageReaderPrefix starts the names of ReadImageFile's containers.
	imageReaderPrefix = "capdmp-image-reader-"
)

// ErrEngineUnavailable is the error of a request the engine did not answer within the call
// timeout, or whose connection it refused.
var ErrEngineUnavailable = errors.New("the container engine is unavailable")

// predefinedNetworks exist on every engine and cannot be created.
var predefinedNetworks = []string{"", HostNetwork, "bridge", "none"}

// Docker is the Runtime of a Docker engine, over the Docker Engine API. It counts every request
// it makes to the engine (see Calls).
type Docker struct {
	Counter

	// CallTimeout bounds each request to the engine but streams; DefaultCallTimeout when zero.
	CallTimeout time.Duration

	// StaleImageReaderAge is how old a never-started reader container of ReadImageFile must be
	// before a later read removes it as left behind; DefaultStaleImageReaderAge when zero.
	StaleImageReaderAge time.Duration

	// IsolatedNetworks creates networks without IP masquerade, so that nodes reach only the host
	// and each other; off, a network is created exactly as kind creates it (see EnsureNetwork).
	IsolatedNetworks bool

	client *client.Client
	// networkMu serialises EnsureNetwork: engines before API 1.44 accept two networks with the
	// same name, which concurrent reconciles would otherwise create.
	networkMu sync.Mutex
}

var (
	_ Runtime     = &Docker{}
	_ Watcher     = &Docker{}
	_ CallCounter = &Docker{}
)

// NewDocker returns a Runtime for the engine the environment points at (DOCKER_HOST,
// DOCKER_API_VERSION, DOCKER_CERT_PATH, DOCKER_TLS_VERIFY; default: the local socket). The API
// version is negotiated on the first request unless DOCKER_API_VERSION pins it; Debian's docker.io
// 20.10 speaks 1.41. It does not contact the engine; see Ping.
func NewDocker(opts ...client.Opt) (*Docker, error) {
	c, err := client.New(append([]client.Opt{client.FromEnv}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("failed to create Docker client: %w", err)
	}
	return &Docker{client: c}, nil
}

// Close releases the client's idle connections.
func (d *Docker) Close() error {
	return d.client.Close()
}

// call counts a request to the engine and returns its context, bounded by CallTimeout, and the
// function that ends it and records its duration.
func (d *Docker) call(ctx context.Context, operation string) (context.Context, context.CancelFunc) {
	d.Count(operation)
	observed := metrics.ObserveDockerRequest(operation)
	callCtx, cancel := context.WithTimeout(ctx, cmp.Or(d.CallTimeout, DefaultCallTimeout))
	return callCtx, func() { observed(); cancel() }
}

// countStream counts a request whose response is a stream: only ctx bounds it, and it is not timed.
func (d *Docker) countStream(operation string) {
	d.Count(operation)
	metrics.DockerRequests.WithLabelValues(operation).Inc()
}

// unavailable marks err as ErrEngineUnavailable when the engine could not be reached or did not
// answer within the call timeout while the caller still waited.
func (d *Docker) unavailable(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%w at %s: %w", ErrEngineUnavailable, d.client.DaemonHost(), err)
	}
	return err
}

// Ping checks that the engine answers and negotiates the API version, which it returns.
func (d *Docker) Ping(ctx context.Context) (string, error) {
	callCtx, cancel := d.call(ctx, "Ping")
	defer cancel()
	if _, err := d.client.Ping(callCtx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return "", fmt.Errorf("failed to reach the Docker engine at %s: %w", d.client.DaemonHost(), d.unavailable(ctx, err))
	}
	return d.client.ClientVersion(), nil
}

// List returns all containers, running or not, that carry all the given labels. At least one
// label is required: listing every container of the engine is never what a controller wants.
func (d *Docker) List(ctx context.Context, labels map[string]string) ([]Container, error) {
	if len(labels) == 0 {
		return nil, errors.New("failed to list containers: at least one label is required")
	}
	filters := labelFilters(labels)
	callCtx, cancel := d.call(ctx, "ContainerList")
	defer cancel()
	res, err := d.client.ContainerList(callCtx, client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		return nil, fmt.Errorf("failed to list containers with labels %v: %w", labels, d.unavailable(ctx, err))
	}
	out := make([]Container, 0, len(res.Items))
	for _, s := range res.Items {
		// The engine ANDs label filters; checking again keeps that a property of this function
		// rather than of the engine version.
		if !hasLabels(s.Labels, labels) {
			continue
		}
		out = append(out, containerFromSummary(s))
	}
	slices.SortFunc(out, func(a, b Container) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Inspect returns one container by name or ID.
func (d *Docker) Inspect(ctx context.Context, containerName string) (Container, error) {
	callCtx, cancel := d.call(ctx, "ContainerInspect")
	defer cancel()
	res, err := d.client.ContainerInspect(callCtx, containerName, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return Container{}, fmt.Errorf("failed to inspect container %q: %w", containerName, ErrNotFound)
		}
		return Container{}, fmt.Errorf("failed to inspect container %q: %w", containerName, d.unavailable(ctx, err))
	}
	return containerFromInspect(res.Container), nil
}

// Create creates and starts a container. It checks the image first and never pulls.
func (d *Docker) Create(ctx context.Context, spec Spec) (Container, error) {
	if spec.Name == "" || spec.Image == "" {
		return Container{}, errors.New("failed to create container: name and image are required")
	}
	for _, m := range spec.Mounts {
		if err := errors.Join(bindablePath("host path", m.Source), bindablePath("container path", m.Target)); err != nil {
			return Container{}, fmt.Errorf("failed to create container %q: %w", spec.Name, err)
		}
	}
	exists, err := d.ImageExists(ctx, spec.Image)
	if err != nil {
		return Container{}, fmt.Errorf("failed to create container %q: %w", spec.Name, err)
	}
	if !exists {
		return Container{}, fmt.Errorf("failed to create container %q: %w", spec.Name, imageNotFound(spec.Image))
	}

	config, hostConfig, networkConfig := dockerCreateOptions(spec)
	// Each request ends (and is timed) before the next starts.
	createCtx, cancel := d.call(ctx, "ContainerCreate")
	created, err := d.client.ContainerCreate(createCtx, client.ContainerCreateOptions{
		Name:             spec.Name,
		Config:           config,
		HostConfig:       hostConfig,
		NetworkingConfig: networkConfig,
	})
	cancel()
	if err != nil {
		switch {
		case cerrdefs.IsConflict(err):
			return Container{}, fmt.Errorf("failed to create container %q: %w", spec.Name, ErrAlreadyExists)
		case cerrdefs.IsNotFound(err) && strings.Contains(err.Error(), "No such image"):
			// The image went away between the check and the create.
			return Container{}, fmt.Errorf("failed to create container %q: %w", spec.Name, imageNotFound(spec.Image))
		}
		return Container{}, fmt.Errorf("failed to create container %q: %w", spec.Name, d.unavailable(ctx, err))
	}

	startCtx, cancel := d.call(ctx, "ContainerStart")
	_, err = d.client.ContainerStart(startCtx, created.ID, client.ContainerStartOptions{})
	cancel()
	if err != nil {
		startErr := fmt.Errorf("failed to start container %q: %w", spec.Name, d.unavailable(ctx, err))
		// A container that was created but cannot start would block the name; remove it so that
		// the next reconcile starts from scratch.
		if delErr := d.Delete(ctx, created.ID); delErr != nil {
			return Container{}, errors.Join(startErr, delErr)
		}
		return Container{}, startErr
	}

	c, err := d.Inspect(ctx, created.ID)
	if err != nil {
		return Container{}, fmt.Errorf("failed to read container %q after starting it: %w", spec.Name, err)
	}
	return c, nil
}

// dockerCreateOptions translates a Spec into the Docker Engine API's create request.
func dockerCreateOptions(spec Spec) (*dockercontainer.Config, *dockercontainer.HostConfig, *dockernetwork.NetworkingConfig) {
	config := &dockercontainer.Config{
		Image:      spec.Image,
		Hostname:   spec.Hostname,
		Labels:     maps.Clone(spec.Labels),
		Env:        slices.Clone(spec.Env),
		Entrypoint: slices.Clone(spec.Entrypoint),
		Cmd:        slices.Clone(spec.Cmd),
		Tty:        spec.Tty,
		StopSignal: spec.StopSignal,
	}
	if len(spec.Volumes) > 0 {
		config.Volumes = map[string]struct{}{}
		for _, v := range spec.Volumes {
			config.Volumes[v] = struct{}{}
		}
	}

	hostConfig := &dockercontainer.HostConfig{
		NetworkMode:  dockercontainer.NetworkMode(spec.Network),
		Privileged:   spec.Privileged,
		SecurityOpt:  slices.Clone(spec.SecurityOpt),
		CgroupnsMode: dockercontainer.CgroupnsMode(spec.CgroupnsMode),
		Tmpfs:        maps.Clone(spec.Tmpfs),
		Sysctls:      maps.Clone(spec.Sysctls),
		Init:         spec.Init,
	}
	if spec.RestartPolicy != "" {
		hostConfig.RestartPolicy = dockercontainer.RestartPolicy{
			Name:              dockercontainer.RestartPolicyMode(spec.RestartPolicy),
			MaximumRetryCount: spec.MaxRestarts,
		}
	}
	for _, m := range spec.Mounts {
		// Binds rather than the Mounts API, so that a missing host path is created as with
		// `docker run -v`, which is what kind's node mounts rely on (the Mounts API creates it
		// only from API 1.42, and Debian's engine speaks 1.41). Create refuses paths with a ":",
		// which a bind cannot hold.
		bind := m.Source + ":" + m.Target
		if m.ReadOnly {
			bind += ":ro"
		}
		hostConfig.Binds = append(hostConfig.Binds, bind)
	}
	return config, hostConfig, &dockernetwork.NetworkingConfig{}
}

// Exec runs cmd in a running container and waits for it to end. The command runs privileged,
// as kind's node commands do (kubeadm remounts, writes sysctls...).
func (d *Docker) Exec(ctx context.Context, containerName string, cmd []string, stdin io.Reader) (ExecResult, error) {
	if len(cmd) == 0 {
		return ExecResult{}, errors.New("failed to exec: empty command")
	}
	createCtx, cancel := d.call(ctx, "ExecCreate")
	created, err := d.client.ExecCreate(createCtx, containerName, client.ExecCreateOptions{
		Cmd:          cmd,
		Privileged:   true,
		AttachStdin:  stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
	})
	cancel()
	if err != nil {
		switch {
		case cerrdefs.IsNotFound(err):
			return ExecResult{}, fmt.Errorf("failed to exec %q in container %q: %w", cmd[0], containerName, ErrNotFound)
		case cerrdefs.IsConflict(err):
			// The engine answers 409 when the container exists but does not run.
			return ExecResult{}, fmt.Errorf("failed to exec %q in container %q: %w: %w", cmd[0], containerName, ErrNotRunning, err)
		}
		return ExecResult{}, fmt.Errorf("failed to exec %q in container %q: %w", cmd[0], containerName, d.unavailable(ctx, err))
	}

	// The attached stream lasts as long as the command: only ctx bounds it.
	d.countStream("ExecAttach")
	attached, err := d.client.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return ExecResult{}, fmt.Errorf("failed to attach to exec %q in container %q: %w", cmd[0], containerName, d.unavailable(ctx, err))
	}
	defer attached.Close()
	// The hijacked connection does not follow the context; closing it ends the reads below.
	stop := context.AfterFunc(ctx, attached.Close)
	defer stop()

	if stdin != nil {
		go func() {
			// A command may exit without reading all its input; the write error that follows is
			// not the command's failure, its exit code tells.
			_, _ = io.Copy(attached.Conn, stdin)
			_ = attached.CloseWrite()
		}()
	}

	stdout, stderr := &cappedBuffer{max: MaxExecOutput}, &cappedBuffer{max: MaxExecOutput}
	if _, err := stdcopy.StdCopy(stdout, stderr, attached.Reader); err != nil {
		if ctx.Err() != nil {
			return ExecResult{}, fmt.Errorf("failed to read output of %q in container %q: %w", cmd[0], containerName, ctx.Err())
		}
		return ExecResult{}, fmt.Errorf("failed to read output of %q in container %q: %w", cmd[0], containerName, err)
	}

	exitCode, err := d.execExitCode(ctx, created.ID)
	if err != nil {
		return ExecResult{}, fmt.Errorf("failed to get exit code of %q in container %q: %w", cmd[0], containerName, d.unavailable(ctx, err))
	}
	return ExecResult{ExitCode: exitCode, Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, nil
}

// execExitCode reads the exit code of an exec whose output has ended. The engine may report it
// as running for a moment after closing the streams, so it polls briefly.
func (d *Docker) execExitCode(ctx context.Context, execID string) (int, error) {
	const attempts = 50
	for i := 0; ; i++ {
		callCtx, cancel := d.call(ctx, "ExecInspect")
		res, err := d.client.ExecInspect(callCtx, execID, client.ExecInspectOptions{})
		cancel()
		if err != nil {
			return 0, err
		}
		if !res.Running {
			return res.ExitCode, nil
		}
		if i == attempts {
			return 0, errors.New("command still running after its output ended")
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Delete force-removes a container with its anonymous volumes; a missing container is success.
func (d *Docker) Delete(ctx context.Context, containerName string) error {
	callCtx, cancel := d.call(ctx, "ContainerRemove")
	defer cancel()
	_, err := d.client.ContainerRemove(callCtx, containerName, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("failed to delete container %q: %w", containerName, d.unavailable(ctx, err))
	}
	return nil
}

// Watch reports each change of a container carrying all the given labels (created, started,
// stopped, destroyed) from the engine's event stream starting at since: the engine replays the
// recent events it keeps, so a watch started just before a List misses nothing that happened in
// between. Changes arrive in the engine's order; the caller reads the container's state (List
// answers at once; Inspect of a starting container waits until its start is done).
// The channel closes when the stream ends, after its error is sent: ctx's when it was cancelled.
func (d *Docker) Watch(ctx context.Context, labels map[string]string, since time.Time) (<-chan Event, <-chan error) {
	filters := labelFilters(labels)
	filters.Add("type", string(events.ContainerEventType))
	for _, a := range []events.Action{events.ActionCreate, events.ActionStart, events.ActionDie, events.ActionDestroy} {
		filters.Add("event", string(a))
	}
	d.countStream("Events")
	stream := d.client.Events(ctx, client.EventsListOptions{Since: strconv.FormatInt(since.Unix(), 10), Filters: filters})
	changes := make(chan Event)
	errs := make(chan error, 1)
	go func() {
		defer close(changes)
		for {
			select {
			case m := <-stream.Messages:
				select {
				case changes <- Event{ID: m.Actor.ID, Action: string(m.Action), At: time.Unix(0, m.TimeNano), Attributes: maps.Clone(m.Actor.Attributes)}:
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
			case err := <-stream.Err:
				errs <- fmt.Errorf("failed to watch containers with labels %v: %w", labels, err)
				return
			}
		}
	}()
	return changes, errs
}

// Host reads the engine's system information, in one Info call.
func (d *Docker) Host(ctx context.Context) (Host, error) {
	callCtx, cancel := d.call(ctx, "Info")
	defer cancel()
	res, err := d.client.Info(callCtx, client.InfoOptions{})
	if err != nil {
		return Host{}, fmt.Errorf("failed to read the engine's system information: %w", d.unavailable(ctx, err))
	}
	return Host{CPUs: res.Info.NCPU, MemoryBytes: res.Info.MemTotal, Architecture: res.Info.Architecture, OSType: res.Info.OSType}, nil
}

// ImageExists tells whether the image is present on the engine.
func (d *Docker) ImageExists(ctx context.Context, image string) (bool, error) {
	callCtx, cancel := d.call(ctx, "ImageInspect")
	defer cancel()
	if _, err := d.client.ImageInspect(callCtx, image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("failed to inspect image %q: %w", image, d.unavailable(ctx, err))
	}
	return true, nil
}

// ImageID returns the ID of the image, given by reference or ID, in one ImageInspect call.
func (d *Docker) ImageID(ctx context.Context, image string) (string, error) {
	callCtx, cancel := d.call(ctx, "ImageInspect")
	defer cancel()
	res, err := d.client.ImageInspect(callCtx, image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("failed to inspect image %q: %w", image, imageNotFound(image))
		}
		return "", fmt.Errorf("failed to inspect image %q: %w", image, d.unavailable(ctx, err))
	}
	return res.ID, nil
}

// ReadImageFile returns the content of a regular file of an image. It creates a container of the
// image that is never started, copies the file out of it with the engine's archive API and
// removes the container: nothing from the image runs, and the engine's create never pulls.
func (d *Docker) ReadImageFile(ctx context.Context, image, filePath string) (content []byte, err error) {
	if image == "" || !path.IsAbs(filePath) {
		return nil, fmt.Errorf("failed to read %q of image %q: an image and an absolute path are required", filePath, image)
	}
	// Cleaned, the path cannot end in "/" or "/.", with which the engine would follow a symlink.
	filePath = path.Clean(filePath)
	suffix := make([]byte, 8)
	if _, err := rand.Read(suffix); err != nil {
		return nil, fmt.Errorf("failed to read %q of image %q: failed to name the reader container: %w", filePath, image, err)
	}
	name := imageReaderPrefix + hex.EncodeToString(suffix)
	d.removeStaleImageReaders(ctx)

	defer func() {
		// Always, by name: a create cut short may have made the container without telling its ID.
		// Not with the caller's context, which may be what cut it short.
		if delErr := d.Delete(context.WithoutCancel(ctx), name); delErr != nil {
			content = nil
			err = errors.Join(err, fmt.Errorf("failed to remove the reader container of image %q: %w", image, delErr))
		}
	}()

	createCtx, cancel := d.call(ctx, "ContainerCreate")
	created, err := d.client.ContainerCreate(createCtx, client.ContainerCreateOptions{
		Name: name,
		Config: &dockercontainer.Config{
			Image: image,
			// Never started; an entrypoint is still required of images that have none.
			Entrypoint: []string{"/nonexistent"},
			Labels:     map[string]string{ImageReaderLabel: "true"},
		},
		HostConfig: &dockercontainer.HostConfig{NetworkMode: "none"},
	})
	cancel()
	if err != nil {
		// With the "none" network, the image is the only thing a create can miss.
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("failed to read %q of image %q: %w", filePath, image, imageNotFound(image))
		}
		return nil, fmt.Errorf("failed to create a container to read %q of image %q: %w", filePath, image, d.unavailable(ctx, err))
	}

	copyCtx, cancel := d.call(ctx, "CopyFromContainer")
	defer cancel()
	res, err := d.client.CopyFromContainer(copyCtx, created.ID, client.CopyFromContainerOptions{SourcePath: filePath})
	if err != nil {
		// The engine answers 404 for a missing path, and for a container removed meanwhile, which
		// says nothing of the image's files.
		if cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "No such container") {
			return nil, fmt.Errorf("failed to read %q of image %q: %w", filePath, image, ErrFileNotFound)
		}
		return nil, fmt.Errorf("failed to copy %q out of image %q: %w", filePath, image, d.unavailable(ctx, err))
	}
	defer res.Content.Close()
	content, err = singleFile(res.Content)
	if err != nil {
		return nil, fmt.Errorf("failed to read %q of image %q: %w", filePath, image, d.unavailable(ctx, err))
	}
	return content, nil
}

// removeStaleImageReaders removes the reader containers an earlier ReadImageFile could not: its
// removal failed with the engine (stopped, restarted, wedged) or its process was killed. Best
// effort: what it cannot remove now, a later read removes, and the read itself reports the
// engine's errors.
func (d *Docker) removeStaleImageReaders(ctx context.Context) {
	readers, err := d.List(ctx, map[string]string{ImageReaderLabel: "true"})
	if err != nil {
		return
	}
	staleAge := cmp.Or(d.StaleImageReaderAge, DefaultStaleImageReaderAge)
	for _, r := range readers {
		if r.Running || time.Since(r.CreatedAt) < staleAge || !strings.HasPrefix(r.Name, imageReaderPrefix) {
			continue
		}
		_ = d.Delete(ctx, r.Name)
	}
}

// singleFile reads the content of the first entry of a tar stream, which must be a regular file
// of at most MaxImageFile bytes: a symlink is refused, not followed.
func singleFile(r io.Reader) ([]byte, error) {
	tr := tar.NewReader(r)
	hdr, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("failed to read the archive: %w", err)
	}
	switch {
	case hdr.Typeflag == tar.TypeSymlink:
		return nil, fmt.Errorf("it is a symbolic link to %q, which is not followed", hdr.Linkname)
	case hdr.Typeflag != tar.TypeReg:
		return nil, fmt.Errorf("it is not a regular file (tar type %q)", hdr.Typeflag)
	case hdr.Size > MaxImageFile:
		return nil, fmt.Errorf("it has %d bytes, more than the %d read", hdr.Size, MaxImageFile)
	}
	content, err := io.ReadAll(io.LimitReader(tr, MaxImageFile))
	if err != nil {
		return nil, fmt.Errorf("failed to read the archive: %w", err)
	}
	return content, nil
}

// ImageTags lists the tags of the images of repository (e.g. kindest/node) present on the
// engine that carry the label withLabel (any value; every image when empty), sorted.
func (d *Docker) ImageTags(ctx context.Context, repository, withLabel string) ([]string, error) {
	filters := client.Filters{}.Add("reference", repository)
	if withLabel != "" {
		filters.Add("label", withLabel)
	}
	callCtx, cancel := d.call(ctx, "ImageList")
	defer cancel()
	res, err := d.client.ImageList(callCtx, client.ImageListOptions{Filters: filters})
	if err != nil {
		return nil, fmt.Errorf("failed to list the images of %s: %w", repository, d.unavailable(ctx, err))
	}
	var tags []string
	for _, img := range res.Items {
		for _, ref := range img.RepoTags {
			if repo, tag, ok := strings.Cut(ref, ":"); ok && repo == repository {
				tags = append(tags, tag)
			}
		}
	}
	slices.Sort(tags)
	return slices.Compact(tags), nil
}

// SaveImages streams the images as a `docker save` tarball. Missing images are ErrImageNotFound.
func (d *Docker) SaveImages(ctx context.Context, images []string) (io.ReadCloser, error) {
	// The engine reports a missing image only after it started streaming; checking first gives
	// callers the same typed error as Create.
	for _, image := range images {
		exists, err := d.ImageExists(ctx, image)
		if err != nil {
			return nil, fmt.Errorf("failed to save images: %w", err)
		}
		if !exists {
			return nil, fmt.Errorf("failed to save images: %w", imageNotFound(image))
		}
	}
	d.countStream("ImageSave")
	r, err := d.client.ImageSave(ctx, images)
	if err != nil {
		return nil, fmt.Errorf("failed to save images %v: %w", images, err)
	}
	return r, nil
}

// imageNotFound is the error for a missing image; it tells the user what to do, since CAPDMP
// deliberately never pulls.
func imageNotFound(image string) error {
	return fmt.Errorf("%w: %q is not present on the Docker engine (images are never pulled: build, load or pull it there first)", ErrImageNotFound, image)
}

// labelFilters asks the engine for the objects carrying all the labels.
func labelFilters(labels map[string]string) client.Filters {
	filters := client.Filters{}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		filters.Add("label", k+"="+labels[k])
	}
	return filters
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func containerFromSummary(s dockercontainer.Summary) Container {
	c := Container{
		ID:           s.ID,
		Image:        s.Image,
		ImageID:      s.ImageID,
		Labels:       s.Labels,
		Running:      s.State == dockercontainer.StateRunning,
		NeverStarted: s.State == dockercontainer.StateCreated,
		CreatedAt:    time.Unix(s.Created, 0),
	}
	if len(s.Names) > 0 {
		c.Name = strings.TrimPrefix(s.Names[0], "/")
	}
	if s.NetworkSettings != nil {
		c.IPv4, c.IPv6 = addresses(s.NetworkSettings.Networks, s.HostConfig.NetworkMode)
	}
	return c
}

func containerFromInspect(r dockercontainer.InspectResponse) Container {
	c := Container{
		ID:      r.ID,
		Name:    strings.TrimPrefix(r.Name, "/"),
		ImageID: r.Image,
	}
	if r.Config != nil {
		// r.Image is the image ID; the name the container was created with is in the config.
		c.Image = r.Config.Image
		c.Labels = r.Config.Labels
	}
	if r.State != nil {
		c.Running = r.State.Running
		c.NeverStarted = r.State.Status == dockercontainer.StateCreated
	}
	if created, err := time.Parse(time.RFC3339Nano, r.Created); err == nil {
		c.CreatedAt = created
	}
	if r.NetworkSettings != nil {
		mode := ""
		if r.HostConfig != nil {
			mode = string(r.HostConfig.NetworkMode)
		}
		c.IPv4, c.IPv6 = addresses(r.NetworkSettings.Networks, mode)
	}
	return c
}

// addresses returns the container's addresses on its primary network: the one of its network
// mode when attached to it, else the first by name.
func addresses(networks map[string]*dockernetwork.EndpointSettings, networkMode string) (string, string) {
	ep, ok := networks[networkMode]
	if !ok || ep == nil {
		for _, name := range slices.Sorted(maps.Keys(networks)) {
			if networks[name] != nil {
				ep = networks[name]
				break
			}
		}
	}
	if ep == nil {
		return "", ""
	}
	return addrString(ep.IPAddress), addrString(ep.GlobalIPv6Address)
}

func addrString(a netip.Addr) string {
	if !a.IsValid() || a.IsUnspecified() {
		return ""
	}
	return a.String()
}

// cappedBuffer keeps the first max bytes written to it and silently drops the rest, so that the
// stream it is fed from is still read to its end.
type cappedBuffer struct {
	bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		if len(p) > room {
			_, _ = b.Buffer.Write(p[:room])
		} else {
			_, _ = b.Buffer.Write(p)
		}
	}
	return len(p), nil
}
