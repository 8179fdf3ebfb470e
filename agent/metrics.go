package agent

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// Roles of a cluster for a link, the role label of mirrord_kafka_*.
const (
	roleSource      = "source"
	roleDestination = "destination"
)

// newRegistry is the registry of an agent whose Deps give none: the Go
// runtime and process collectors, as a Prometheus server expects them.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// registerBuildInfo registers mirrord_build_info, 1 with the build in its
// labels.
func registerBuildInfo(reg prometheus.Registerer, b Build) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace:   "mirrord",
		Name:        "build_info",
		Help:        "Always 1; the labels say which mirrord build runs and with which Go.",
		ConstLabels: prometheus.Labels{"version": b.Version, "go_version": b.GoVersion},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// kafkaMetrics are the franz-go client metrics of one cluster in one role.
//
// kprom.Metrics is made for one client: its OnNewClient registers a fresh
// set of collectors (a second call would register them twice and panic)
// and its OnClientClosed unregisters them. A link opens many clients per
// cluster (fetch or produce, admin, state reads, the transactional state
// session) and reopens them after every failure, all from the same
// options and so with the same hook. kafkaMetrics lets the first client
// create the collectors, keeps them registered for the agent's lifetime,
// and passes every other hook of every client to the same kprom.Metrics,
// whose counters are safe for concurrent use.
type kafkaMetrics struct {
	*kprom.Metrics // OnBrokerConnect, OnBrokerE2E, ... for all clients
	once           sync.Once
}

// newKafkaMetrics builds the metrics mirrord_kafka_*{cluster, role} on reg.
func newKafkaMetrics(reg prometheus.Registerer, cluster, role string) *kafkaMetrics {
	return &kafkaMetrics{Metrics: kprom.NewMetrics("mirrord",
		kprom.Registerer(reg),
		kprom.Subsystem("kafka"),
		kprom.WithStaticLabel(prometheus.Labels{"cluster": cluster, "role": role}),
	)}
}

// OnNewClient implements kgo.HookNewClient: the first client registers the
// collectors. kgo calls it before the client starts any goroutine, and
// once.Do makes every later client's hooks see the collectors.
func (k *kafkaMetrics) OnNewClient(cl *kgo.Client) {
	k.once.Do(func() { k.Metrics.OnNewClient(cl) })
}

// OnClientClosed implements kgo.HookClientClosed: the collectors stay, for
// the clients that remain and the ones to come.
func (k *kafkaMetrics) OnClientClosed(*kgo.Client) {}
