// Command management-plane runs a whole Cluster API management plane on this machine, with no
// cluster and no registry (test/devtools/managementplane): kube-apiserver and etcd, Cluster API
// v1.14.2's core controllers, KubeadmControlPlane, KubeadmConfig, CAPD's DockerCluster and
// DockerMachine, every provider's webhooks, and the CAPDMP manager. A cluster applied to it with
// kubectl comes up as real nodes on the local Docker engine. `make run` builds what it needs and
// starts it.
//
// Its state (etcd's data, the kubeconfig, the logs) stays in --data-dir across restarts unless
// --fresh; on Ctrl-C it stops the plane and leaves the clusters' containers running.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/blang/semver/v4"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/kubeversions"
	"github.com/capdmp/capdmp/pkg/skew"
	"github.com/capdmp/capdmp/test/devtools/managementplane"
)

type options struct {
	dataDir         string
	fresh           bool
	assets          string
	manager         string
	dockerNetwork   string
	isolatedNetwork bool
	tokenTTL        time.Duration
	verbosity       int
}

func main() {
	o := options{}
	flag.StringVar(&o.dataDir, "data-dir", "_artifacts/management-plane", "Folder of the plane's state (etcd's data, the kubeconfig) and logs, kept across restarts.")
	flag.BoolVar(&o.fresh, "fresh", false, "Start with an empty management API server, forgetting the clusters an earlier run knew (their containers are not removed).")
	flag.StringVar(&o.assets, "envtest-assets", envOr("KUBEBUILDER_ASSETS", "bin/envtest"), "Folder holding kube-apiserver and etcd (`make envtest-binaries`).")
	flag.StringVar(&o.manager, "manager", "bin/manager", "The CAPDMP manager binary (`make build`).")
	flag.StringVar(&o.dockerNetwork, "docker-network", managementplane.Network, "Docker network of every node (CAPD uses kind's).")
	flag.BoolVar(&o.isolatedNetwork, "isolated-network", false, "Create a missing --docker-network without IP masquerade: nodes reach only the host and each other (by default it is created as kind creates it).")
	flag.DurationVar(&o.tokenTTL, "bootstrap-token-ttl", 15*time.Minute, "TTL of the bootstrap tokens KubeadmConfig creates (its manager's default).")
	flag.IntVar(&o.verbosity, "v", 2, "Verbosity of the controllers' logs.")
	flag.Parse()

	// SIGHUP too: a closed terminal stops the plane as Ctrl-C does, not halfway.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "management-plane:", err)
		os.Exit(1)
	}
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func run(ctx context.Context, o options) error {
	dataDir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return err
	}
	logDir := filepath.Join(dataDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	controllersLog, err := os.OpenFile(filepath.Join(logDir, "cluster-api.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer controllersLog.Close()
	managerLog, err := os.OpenFile(filepath.Join(logDir, "capdmp-manager.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer managerLog.Close()
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(controllersLog), textlogger.Verbosity(o.verbosity)))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	fmt.Printf("Starting a Cluster API management plane (state and logs in %s)\n", dataDir)
	plane, err := managementplane.Start(ctx, managementplane.Options{
		DataDir:               dataDir,
		Fresh:                 o.fresh,
		BinaryAssetsDirectory: o.assets,
		Manager:               managementplane.ManagerOptions{Binary: o.manager, DockerNetwork: o.dockerNetwork, IsolatedNetwork: o.isolatedNetwork, Log: managerLog},
		ClusterAPI:            managementplane.ClusterAPIOptions{TokenTTL: o.tokenTTL, Logger: logger},
		Progress:              os.Stdout,
	})
	if err != nil {
		return err
	}
	printNextSteps(ctx, plane.Kubeconfig(), logDir)

	<-ctx.Done()
	fmt.Println("\nStopping the management plane")
	counts, countErr := clusterContainers(context.WithoutCancel(ctx), plane)
	plane.Stop()
	if countErr != nil {
		return countErr
	}
	printLeftContainers(counts, filepath.Join(dataDir, "etcd"))
	return nil
}

// printNextSteps says what a user does next, with the node images this engine has.
func printNextSteps(ctx context.Context, kubeconfig, logDir string) {
	versions := nodeImageVersions(ctx)
	from, to := kubeversions.Older, kubeversions.Newer
	if n := len(versions); n >= 2 {
		from, to = versions[n-2], versions[n-1]
	}
	fmt.Printf(`
Management plane ready. Logs: %[1]s/{cluster-api,capdmp-manager}.log
Node images on this engine: %[2]s

In another terminal, from the repository's root:

  export KUBECONFIG=%[3]s PATH=$PWD/bin:$PATH
  clusterctl generate cluster demo --from templates/cluster-template-machinepool.yaml \
      --kubernetes-version %[4]s --worker-machine-count 2 | kubectl apply -f -
  kubectl get cluster,kcp,mp,dmp,dmpm

Upgrade the control plane and the pool at once; the pool waits for the control plane:

  kubectl patch machinepool demo-mp-0 --type merge -p '{"spec":{"template":{"spec":{"version":"%[5]s"}}}}'
  kubectl patch kcp demo-control-plane --type merge -p '{"spec":{"version":"%[5]s"}}'
  kubectl describe dmp demo-mp-0

Ctrl-C stops the plane; the clusters' containers keep running and the next start resumes them.
`, logDir, orNone(versions), kubeconfig, from, to)
}

// nodeImageVersions lists the Kubernetes versions of the real kindest/node images the engine
// has (`make node-images` labels them; the fast tests' stub images carry no such label), oldest
// first.
func nodeImageVersions(ctx context.Context) []string {
	engine, err := container.NewDocker()
	if err != nil {
		return nil
	}
	defer engine.Close()
	tags, err := engine.ImageTags(ctx, "kindest/node", nodeImageRecipeLabel)
	if err != nil {
		return nil
	}
	parsed := map[string]semver.Version{}
	var versions []string
	for _, tag := range tags {
		if v, err := skew.ParseVersion(tag); err == nil {
			parsed[tag] = v
			versions = append(versions, tag)
		}
	}
	slices.SortFunc(versions, func(a, b string) int { return parsed[a].Compare(parsed[b]) })
	return versions
}

func orNone(versions []string) string {
	if len(versions) == 0 {
		return "none (`make node-images NODE_IMAGE_VERSIONS=\"" + kubeversions.Older + " " + kubeversions.Newer + "\"` pulls or builds them, about 15 minutes a version when built)"
	}
	return strings.Join(versions, " ")
}

// clusterContainers counts, per Cluster the plane knows, the containers that run its nodes (CAPD
// and CAPDMP put kind's cluster label on every node).
func clusterContainers(ctx context.Context, plane *managementplane.Plane) (map[string]int, error) {
	clusters := &clusterv1.ClusterList{}
	if err := plane.APIServer.Client.List(ctx, clusters); err != nil {
		return nil, fmt.Errorf("listing Clusters: %w", err)
	}
	engine, err := container.NewDocker()
	if err != nil {
		return nil, err
	}
	defer engine.Close()
	counts := map[string]int{}
	for _, c := range clusters.Items {
		nodes, err := engine.List(ctx, map[string]string{container.KindClusterLabel: c.Name})
		if err != nil {
			return nil, err
		}
		counts[c.Namespace+"/"+c.Name] = len(nodes)
	}
	return counts, nil
}

// printLeftContainers says which clusters keep running while the plane is stopped, and how to
// remove them.
func printLeftContainers(counts map[string]int, etcdDir string) {
	var clusters, remove []string
	if host := os.Getenv("DOCKER_HOST"); host != "" {
		remove = append(remove, "  export DOCKER_HOST="+host)
	}
	for _, key := range slices.Sorted(maps.Keys(counts)) {
		if counts[key] == 0 {
			continue
		}
		clusters = append(clusters, fmt.Sprintf("%s (%d)", key, counts[key]))
		_, name, _ := strings.Cut(key, "/")
		remove = append(remove, fmt.Sprintf("  docker rm -f -v $(docker ps -aq --filter label=%s=%s)", container.KindClusterLabel, name))
	}
	if len(clusters) == 0 {
		fmt.Println("Stopped. No cluster's container runs.")
		return
	}
	fmt.Printf(`Stopped. The containers of clusters %s keep running: the next start resumes them.
To remove them instead, and make the plane forget them:

%s
  rm -rf %s
`, strings.Join(clusters, ", "), strings.Join(remove, "\n"), etcdDir)
}

// nodeImageRecipeLabel is the label hack/node-images/build.sh puts on the images it builds.
const nodeImageRecipeLabel = "io.capdmp.node-images.recipe"
