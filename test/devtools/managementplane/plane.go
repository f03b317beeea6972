// Package managementplane runs a whole Cluster API management plane on one machine, with no
// cluster and no registry: kube-apiserver and etcd (the binaries hack/envtest-binaries.sh builds)
// with the CRDs and webhook configurations of Cluster API v1.14.2's core, kubeadm bootstrap and
// control plane, CAPD and CAPDMP; Cluster API's and CAPD's controllers and webhooks in this
// process; and the CAPDMP manager as a process of its own, serving its webhooks. Workload clusters
// are real: CAPD makes the load balancer and control-plane machines, CAPDMP the pools' nodes.
//
// `make run` starts it through test/devtools/cmd/management-plane; the real test tier starts the same.
package managementplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/test/apiserver"
	"github.com/capdmp/capdmp/test/devtools/hostsysctl"
)

// Network is the Docker network of every node: CAPD v1.14.2 puts its machines and load
// balancers on kind's network, and CAPDMP's --docker-network defaults to it.
const Network = "kind"

// Options configure a Plane.
type Options struct {
	// DataDir keeps the plane's state across starts: etcd's data (DataDir/etcd) and the admin
	// kubeconfig (DataDir/kubeconfig).
	DataDir string
	// Fresh removes the state an earlier start kept before starting.
	Fresh bool
	// BinaryAssetsDirectory holds kube-apiserver and etcd.
	BinaryAssetsDirectory string
	// Manager is the CAPDMP manager process's binary, flags and log.
	Manager ManagerOptions
	// ClusterAPI configures the in-process controllers.
	ClusterAPI ClusterAPIOptions
	// Progress receives one line per step of starting and stopping.
	Progress io.Writer
}

// Plane is a running management plane.
type Plane struct {
	o          Options
	APIServer  *apiserver.APIServer
	ClusterAPI *ClusterAPI
	Manager    *Manager
	sysctls    *hostsysctl.Snapshot
	stopOnce   sync.Once
}

// Start starts the plane: the host's kernel settings for real nodes, the Docker network, the API
// server, Cluster API's controllers and the CAPDMP manager. Stop undoes all of it, also after a
// partial start; the workload clusters' containers are left alone.
func Start(ctx context.Context, o Options) (_ *Plane, err error) {
	p := &Plane{o: o}
	defer func() {
		if err != nil {
			p.Stop()
		}
	}()
	if o.Manager.DockerNetwork == "" {
		p.o.Manager.DockerNetwork = Network
	}
	if err := p.prepareHost(ctx); err != nil {
		return nil, err
	}
	etcdDir := filepath.Join(o.DataDir, "etcd")
	if o.Fresh {
		if err := os.RemoveAll(etcdDir); err != nil {
			return nil, fmt.Errorf("removing the earlier state: %w", err)
		}
	}
	_, statErr := os.Stat(etcdDir)
	resumed := statErr == nil
	start := time.Now()
	if p.APIServer, err = apiserver.StartAPIServer(apiserver.Options{
		BinaryAssetsDirectory: o.BinaryAssetsDirectory,
		EtcdDataDir:           etcdDir,
		Kubeconfig:            filepath.Join(o.DataDir, "kubeconfig"),
		Webhooks:              true,
	}); err != nil {
		return nil, err
	}
	state := "new state in " + etcdDir
	if resumed {
		state = "state kept in " + etcdDir
	}
	p.progressf("Management API server up in %s (%s)", time.Since(start).Round(time.Millisecond), state)

	start = time.Now()
	if p.ClusterAPI, err = StartClusterAPI(p.APIServer, o.ClusterAPI); err != nil {
		return nil, fmt.Errorf("starting Cluster API's and CAPD's controllers: %w", err)
	}
	p.progressf("Cluster API core, KubeadmControlPlane, KubeadmConfig and CAPD controllers and webhooks running (%s)", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	if p.Manager, err = StartManager(ctx, p.APIServer, p.o.Manager); err != nil {
		return nil, err
	}
	p.progressf("CAPDMP manager running, webhooks served (pid %d, %s)", p.Manager.Pid(), time.Since(start).Round(time.Millisecond))
	return p, nil
}

// prepareHost raises the host's kernel limits that real nodes need (put back on Stop), and makes
// the Docker network the nodes share.
func (p *Plane) prepareHost(ctx context.Context) error {
	p.recordHostSysctls()
	engine, err := container.NewDocker()
	if err != nil {
		return fmt.Errorf("connecting to the Docker engine: %w", err)
	}
	defer engine.Close()
	engine.IsolatedNetworks = p.o.Manager.IsolatedNetwork
	if _, err := engine.Ping(ctx); err != nil {
		return fmt.Errorf("the Docker engine does not answer (DOCKER_HOST=%q; `hack/docker-engine.sh start` starts one): %w", os.Getenv("DOCKER_HOST"), err)
	}
	_, err = engine.EnsureNetwork(ctx, p.o.Manager.DockerNetwork)
	return err
}

// recordHostSysctls records the kernel settings the nodes' kubelets change on a Linux host (put
// back on Stop) and raises the inotify limits many nodes need, where this user may. It is not
// needed to run nodes: on macOS the engine's VM has a kernel of its own, and a user who may not
// read or write them is told once.
func (p *Plane) recordHostSysctls() {
	if runtime.GOOS != "linux" {
		p.progressf("Host kernel settings left alone: the engine's kernel is not this %s host's", runtime.GOOS)
		return
	}
	host := hostsysctl.Host{StateFile: hostsysctl.DefaultStateFile(), Logf: p.progressf}
	var err error
	if p.sysctls, err = host.Record(hostsysctl.KubeletChanged, hostsysctl.InotifyForManyNodes); err != nil {
		p.progressf("Host kernel settings not recorded, so not put back on Stop: %v", err)
	}
}

// Kubeconfig is the path of the admin kubeconfig.
func (p *Plane) Kubeconfig() string { return p.APIServer.Kubeconfig }

// Stop stops the CAPDMP manager, Cluster API's controllers and the API server (etcd's data
// stays in DataDir) and puts the host's kernel settings back. Calls after the first do nothing.
func (p *Plane) Stop() {
	p.stopOnce.Do(p.stop)
}

func (p *Plane) stop() {
	p.Manager.Stop()
	var errs []error
	if err := p.ClusterAPI.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping Cluster API's controllers: %w", err))
	}
	if err := p.APIServer.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping the management API server: %w", err))
	}
	if p.sysctls != nil {
		errs = append(errs, p.sysctls.Restore())
	}
	if err := errors.Join(errs...); err != nil {
		p.progressf("%v", err)
	}
}

func (p *Plane) progressf(format string, args ...any) {
	if p.o.Progress != nil {
		fmt.Fprintf(p.o.Progress, format+"\n", args...)
	}
}
