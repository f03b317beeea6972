package framework

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/test/apiserver"
)

// Attach reaches a management plane that another process runs (`make run`) through its admin
// kubeconfig, on the engine at dockerHost. Client is bound to the plane as it runs now; a
// restarted plane writes a new kubeconfig, and a new Attach reaches it. The monitors' reader
// follows the file by itself, so that a monitor outlives a restart of the plane.
func Attach(kubeconfig, dockerHost string) (*World, error) {
	c, err := clientFromKubeconfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	engine, err := container.NewDocker()
	if err != nil {
		return nil, err
	}
	return &World{Client: c, cached: &kubeconfigReader{path: kubeconfig}, Kubeconfig: kubeconfig, DockerHost: dockerHost, engine: engine}, nil
}

// Cluster is a workload cluster made from Template named name in namespace, created by whoever.
func (w *World) Cluster(namespace, name string) *Cluster {
	pool := name + "-mp-0"
	return &Cluster{
		w: w, Namespace: namespace, Name: name, Pool: pool, ControlPlane: name + "-control-plane",
		CAPDMPPool: &CAPDMPPool{Management: w.Client, Engine: w.engine, Key: client.ObjectKey{Namespace: namespace, Name: pool}, ClusterName: name},
	}
}

func clientFromKubeconfig(path string) (client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", path, err)
	}
	cfg.Timeout = 5 * time.Second
	return client.New(cfg, client.Options{Scheme: apiserver.Scheme()})
}

// kubeconfigReader reads live through the kubeconfig at path, made again whenever the file
// changes.
type kubeconfigReader struct {
	path string

	mu       sync.Mutex
	modified time.Time
	current  client.Client
}

func (r *kubeconfigReader) client() (client.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	info, err := os.Stat(r.path)
	if err != nil {
		return nil, err
	}
	if r.current == nil || !info.ModTime().Equal(r.modified) {
		c, err := clientFromKubeconfig(r.path)
		if err != nil {
			return nil, err
		}
		r.current, r.modified = c, info.ModTime()
	}
	return r.current, nil
}

func (r *kubeconfigReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c, err := r.client()
	if err != nil {
		return err
	}
	return c.Get(ctx, key, obj, opts...)
}

func (r *kubeconfigReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c, err := r.client()
	if err != nil {
		return err
	}
	return c.List(ctx, list, opts...)
}

// World is the world that serves the cluster.
func (c *Cluster) World() *World { return c.w }
