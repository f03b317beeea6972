// Package metrics holds CAPDMP's Prometheus metrics. They are registered in controller-runtime's
// registry, so the manager's metrics endpoint serves them beside controller-runtime's own;
// docs/controller.md lists them.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Labels. A pool is named by dockermachinepool_namespace and dockermachinepool_name, as Cluster
// API names a Cluster in its own metrics (cluster_namespace, cluster_name): never by namespace,
// pod, container, service, endpoint, job or instance, the labels Prometheus attaches to every
// series it scrapes from the manager's Pod, which would rename a metric's own to exported_*.
const (
	poolNamespaceLabel = "dockermachinepool_namespace"
	poolNameLabel      = "dockermachinepool_name"
	reasonLabel        = "reason"
	operationLabel     = "operation"
)

var (
	// VersionGateWaiting is 1 while a pool's version gate keeps it from creating containers of its
	// target version and 0 while it admits them; reason is the gate's (skew.Reason). Each pool
	// has one series at a time.
	VersionGateWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "capdmp_version_gate_waiting",
		Help: "1 while the DockerMachinePool's version gate waits, 0 while it admits its target version; reason is the gate's.",
	}, []string{poolNamespaceLabel, poolNameLabel, reasonLabel})

	// VersionGateWaitingSeconds is how long the current pause has lasted, 0 while the gate admits.
	VersionGateWaitingSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "capdmp_version_gate_waiting_seconds",
		Help: "How long the DockerMachinePool's version gate has waited in its current pause, as of its last reconcile; 0 while it admits.",
	}, []string{poolNamespaceLabel, poolNameLabel})

	// VersionGateReopens counts the times a pool's gate went from waiting to admitting.
	VersionGateReopens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "capdmp_version_gate_reopens_total",
		Help: "Times the DockerMachinePool's version gate went from waiting to admitting its target version.",
	}, []string{poolNamespaceLabel, poolNameLabel})

	// KubeletsOutOfPolicy is how many of a pool's kubelets break the version skew policy against
	// the control plane, as of the pool's last reconcile.
	KubeletsOutOfPolicy = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "capdmp_kubelets_out_of_skew_policy",
		Help: "Kubelets of the DockerMachinePool that break the version skew policy against the control plane (newer than its oldest kube-apiserver, or more than three minors older than its newest).",
	}, []string{poolNamespaceLabel, poolNameLabel})

	// BootstrapDataRefreshes counts the fresh bootstrap data a pool asked its bootstrap provider for.
	BootstrapDataRefreshes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "capdmp_bootstrap_data_refreshes_total",
		Help: "Times the DockerMachinePool asked its bootstrap provider to re-render its bootstrap data (new token).",
	}, []string{poolNamespaceLabel, poolNameLabel})

	// BootstrapDuration is how long successful bootstraps ran in their containers, by the node's
	// clock (whole seconds).
	BootstrapDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "capdmp_bootstrap_duration_seconds",
		Help:    "How long successful bootstraps ran in their containers, from their start to their last step's end (whole seconds, by the node's clock).",
		Buckets: []float64{1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600},
	})

	// BootstrapFailures counts failed bootstraps by reason (BootstrapFailureReason).
	BootstrapFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "capdmp_bootstrap_failures_total",
		Help: "Bootstraps that failed for good, by reason.",
	}, []string{reasonLabel})

	// DockerRequests counts the requests made to the Docker engine, by operation.
	DockerRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "capdmp_docker_requests_total",
		Help: "Requests made to the Docker engine, by Engine API operation.",
	}, []string{operationLabel})

	// DockerRequestDuration is how long requests to the Docker engine took, by operation; streams
	// (an exec's output, events) are not timed.
	DockerRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "capdmp_docker_request_duration_seconds",
		Help:    "How long requests to the Docker engine took, by Engine API operation (streams excluded).",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{operationLabel})
)

// BootstrapFailureReason says why a bootstrap failed for good.
type BootstrapFailureReason string

const (
	// BootstrapStepFailed means a step of the bootstrap data exited non-zero.
	BootstrapStepFailed BootstrapFailureReason = "StepFailed"
	// BootstrapTimedOut means the bootstrap ran longer than the pool's bootstrapTimeout.
	BootstrapTimedOut BootstrapFailureReason = "TimedOut"
	// BootstrapInterrupted means the container restarted under a running bootstrap.
	BootstrapInterrupted BootstrapFailureReason = "Interrupted"
	// BootstrapDataInvalid means the bootstrap data could not be turned into commands.
	BootstrapDataInvalid BootstrapFailureReason = "InvalidData"
	// BootstrapImageLoadFailed means loading the pool's preLoadImages failed.
	BootstrapImageLoadFailed BootstrapFailureReason = "ImageLoadFailed"
)

func collectors() []prometheus.Collector {
	return []prometheus.Collector{
		VersionGateWaiting, VersionGateWaitingSeconds, VersionGateReopens, BootstrapDataRefreshes,
		KubeletsOutOfPolicy, BootstrapDuration, BootstrapFailures, DockerRequests, DockerRequestDuration,
	}
}

func init() {
	ctrlmetrics.Registry.MustRegister(collectors()...)
}

// RecordVersionGate records a pool's gate as of a reconcile: waiting or not, for which reason,
// and since when (ignored when not waiting).
func RecordVersionGate(namespace, name string, waiting bool, reason string, waitingSince time.Time, now time.Time) {
	pool := prometheus.Labels{poolNamespaceLabel: namespace, poolNameLabel: name}
	// One series per pool: the reason's series replaces the last one.
	VersionGateWaiting.DeletePartialMatch(pool)
	value, seconds := 0.0, 0.0
	if waiting {
		value = 1
		if !waitingSince.IsZero() {
			seconds = max(now.Sub(waitingSince).Seconds(), 0)
		}
	}
	VersionGateWaiting.WithLabelValues(namespace, name, reason).Set(value)
	VersionGateWaitingSeconds.WithLabelValues(namespace, name).Set(seconds)
	// A pool's counters are there from its first reconcile, at 0 until something happens.
	VersionGateReopens.WithLabelValues(namespace, name)
	BootstrapDataRefreshes.WithLabelValues(namespace, name)
}

// ForgetPool removes a deleted pool's series.
func ForgetPool(namespace, name string) {
	pool := prometheus.Labels{poolNamespaceLabel: namespace, poolNameLabel: name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		VersionGateWaiting, VersionGateWaitingSeconds, VersionGateReopens, BootstrapDataRefreshes, KubeletsOutOfPolicy,
	} {
		v.DeletePartialMatch(pool)
	}
}

// ObserveDockerRequest counts a request to the engine; done records its duration when called.
func ObserveDockerRequest(operation string) (done func()) {
	DockerRequests.WithLabelValues(operation).Inc()
	start := time.Now()
	return func() { DockerRequestDuration.WithLabelValues(operation).Observe(time.Since(start).Seconds()) }
}
