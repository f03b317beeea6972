package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/pkg/conformance"
)

// observer samples a cluster for pkg/conformance's monitor (Cluster.Source). A sample reads
// only memory, kept current by watches (the engine's events, the workload Nodes, the manager's
// informers) and by one poller per kube-apiserver, so that a loaded machine slows the sources,
// not the sampling.
type observer struct {
	c          *Cluster
	containers *containerView
	apiServers *apiServerVersions
	workload   atomic.Pointer[workloadClients]
	management atomic.Pointer[managementStatus]
	wg         sync.WaitGroup
	// ctx lives as long as the observer: the kube-apiservers' pollers run in it.
	ctx  context.Context //nolint:containedctx // the pollers' lifetime, not a request's
	stop context.CancelFunc
}

// workloadClients reach the workload cluster once its kubeconfig exists: an HTTP client for the
// kube-apiservers' /version and a watch on its Nodes.
type workloadClients struct {
	http          *http.Client
	nodes         ctrlcache.Cache
	nodesInformer ctrlcache.Informer
}

// askInterval is how often each kube-apiserver is asked its version, on its own schedule.
const askInterval = 100 * time.Millisecond

// Source starts reading the cluster's versions for pkg/conformance's monitor: each control-plane
// node's kube-apiserver (asked /version at the node's own address, not through the load balancer,
// and counted from its first answer until its container stops or goes), each pool container's
// version label, each pool Node's kubeletVersion, and for the timeline the KubeadmControlPlane's
// status.versions and the pool's gate. The monitor closes it when it stops.
func (c *Cluster) Source() conformance.Source {
	ctx, cancel := context.WithCancel(context.Background())
	o := &observer{c: c, ctx: ctx, stop: cancel, containers: newContainerView(c.Engine, map[string]string{container.KindClusterLabel: c.Name})}
	o.apiServers = &apiServerVersions{interval: askInterval, ask: o.askVersion, wg: &o.wg, pollers: map[string]*apiServerPoller{}}
	o.wg.Go(func() { o.containers.run(ctx, observeInterval) })
	o.wg.Go(func() { o.connect(ctx) })
	o.wg.Go(func() { o.readManagement(ctx) })
	c.lastObserver.Store(o)
	return o
}

// observeInterval is how often the observer's own readers retry and re-read.
const observeInterval = 50 * time.Millisecond

// Close stops the observer's readers.
func (o *observer) Close() error {
	o.stop()
	o.wg.Wait()
	return nil
}

// ContainerLag is the longest a container created while the last Source ran took to reach it
// after the engine's event for it.
func (c *Cluster) ContainerLag() time.Duration {
	if o := c.lastObserver.Load(); o != nil {
		return o.containers.lag()
	}
	return 0
}

// Observe implements conformance.Source. The kube-apiservers are read first, the pool after:
// versions only go up during an upgrade, so a pool read later can only look newer than it was
// when the kube-apiservers answered. The kube-apiservers are those of the containers running at
// the previous sample: one that stopped since still counts once, one that started since counts
// from the next sample.
func (o *observer) Observe(ctx context.Context) (conformance.Sample, error) {
	s := conformance.Sample{}
	workload := o.workload.Load()
	if workload != nil {
		s.APIServers = o.apiServers.versions()
	}
	nodes, ok := o.containers.containers()
	if !ok {
		return s, errors.New("the engine's list of the cluster's containers is not ready")
	}
	var controlPlane []container.Container
	poolNames := map[string]bool{}
	for _, n := range nodes {
		switch {
		case n.Labels[container.KindRoleLabel] == container.KindControlPlaneRole:
			controlPlane = append(controlPlane, n)
		case n.Labels[infrav1.PoolNameLabel] == o.c.Pool:
			s.Instances = append(s.Instances, versionOfLabel(n.Labels[infrav1.KubernetesVersionLabel]))
			poolNames[n.Name] = true
		}
	}
	if workload != nil {
		o.apiServers.track(o.ctx, controlPlane)
	}
	if workload != nil && workload.nodesInformer.HasSynced() && len(poolNames) > 0 {
		nodeList := &corev1.NodeList{}
		// Read only, every sample: no copy of every Node's status.
		if err := workload.nodes.List(ctx, nodeList, client.UnsafeDisableDeepCopy); err == nil {
			for _, n := range nodeList.Items {
				if poolNames[n.Name] {
					s.Kubelets = append(s.Kubelets, n.Status.NodeInfo.KubeletVersion)
				}
			}
		}
	}
	if status := o.management.Load(); status != nil {
		s.Gate, s.ControlPlaneStatus = status.gate, status.controlPlane
	}
	return s, nil
}

// managementStatus is what the management cluster last said of the cluster: the timeline's gate
// and control-plane status (the skew verdict does not read them).
type managementStatus struct {
	gate         string
	controlPlane []string
}

// readManagement keeps managementStatus current, every interval, apart from the samples: a plane
// reached through its kubeconfig (Attach) answers in tens of milliseconds, not from memory.
func (o *observer) readManagement(ctx context.Context) {
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		readCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		// What could not be read (a plane restarting) stays as last read.
		status := managementStatus{}
		if last := o.management.Load(); last != nil {
			status = *last
		}
		if pool, err := o.c.poolFrom(readCtx, o.c.w.cached); err == nil {
			status.gate = pool.Status.VersionGate.WaitingReason
		}
		if kcp, err := o.c.controlPlaneFrom(readCtx, o.c.w.cached); err == nil {
			status.controlPlane = statusVersions(kcp)
		}
		o.management.Store(&status)
	}, observeInterval)
}

// connect makes the workload clients as soon as the workload kubeconfig exists; the watch on
// Nodes lives as long as the monitor.
func (o *observer) connect(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, observeInterval, true, func(ctx context.Context) (bool, error) {
		w, err := o.dialWorkload(ctx)
		if err == nil {
			o.workload.Store(w)
		}
		return err == nil, nil
	})
}

func (o *observer) dialWorkload(ctx context.Context) (*workloadClients, error) {
	getCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cfg, err := o.c.WorkloadConfig(getCtx)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 2 * time.Second
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	// No timeout for the watch itself: rest.Config's Timeout would end every watch after 2 s.
	watchCfg := rest.CopyConfig(cfg)
	watchCfg.Timeout = 0
	// A fixed mapping: discovery would wait here until the workload kube-apiserver first answers.
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	nodes, err := ctrlcache.New(watchCfg, ctrlcache.Options{Mapper: mapper, ReaderFailOnMissingInformer: true})
	if err != nil {
		return nil, err
	}
	informer, err := nodes.GetInformer(ctx, &corev1.Node{}, ctrlcache.BlockUntilSynced(false))
	if err != nil {
		return nil, err
	}
	o.wg.Go(func() { _ = nodes.Start(ctx) })
	return &workloadClients{http: httpClient, nodes: nodes, nodesInformer: informer}, nil
}

// askVersion asks the kube-apiserver at ip, a control-plane node's own address rather than the
// load balancer's, for its version.
func (o *observer) askVersion(ctx context.Context, ip string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+ip+":6443/version", http.NoBody)
	if err != nil {
		return "", err
	}
	resp, err := o.workload.Load().http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("kube-apiserver at %s answered /version with %s", ip, resp.Status)
	}
	info := version.Info{}
	if err := decodeJSON(resp.Body, &info); err != nil {
		return "", err
	}
	return info.GitVersion, nil
}

func decodeJSON(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }
