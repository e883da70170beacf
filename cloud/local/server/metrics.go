package server

import (
	"net/http"
	"strconv"
	"time"

	"k8s.io/component-base/metrics"

	"github.com/mooring-dev/mooring/internal/version/component"
)

// serverMetrics are the local cloud's Prometheus metrics, in a registry of
// its own (several clouds can run in one test process).
type serverMetrics struct {
	registry  metrics.KubeRegistry
	requests  *metrics.CounterVec
	latency   *metrics.HistogramVec
	instances *metrics.GaugeVec
	lbs       *metrics.Gauge
	routes    *metrics.Gauge
}

func newServerMetrics() *serverMetrics {
	m := &serverMetrics{
		registry: metrics.NewKubeRegistry(),
		requests: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "mooring_localcloud", Name: "api_requests_total",
			Help: "API and metadata calls by operation and HTTP status code.",
		}, []string{"operation", "code"}),
		latency: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: "mooring_localcloud", Name: "api_request_duration_seconds",
			Help:    "Time to answer an API or metadata call, by operation.",
			Buckets: metrics.ExponentialBuckets(0.0005, 4, 8),
		}, []string{"operation"}),
		instances: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: "mooring_localcloud", Name: "instances",
			Help: "Instances by lifecycle state.",
		}, []string{"state"}),
		lbs: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "mooring_localcloud", Name: "load_balancers", Help: "Load balancers.",
		}),
		routes: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "mooring_localcloud", Name: "routes", Help: "Routes in the route table.",
		}),
	}
	m.registry.MustRegister(m.requests, m.latency, m.instances, m.lbs, m.routes)
	component.RegisterBuildInfo(m.registry.MustRegister)
	return m
}

func (m *serverMetrics) observe(op string, status int, d time.Duration) {
	m.requests.WithLabelValues(op, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(op).Observe(d.Seconds())
}

func (m *serverMetrics) handler() http.Handler {
	return metrics.HandlerFor(m.registry, metrics.HandlerOpts{})
}
