// Package clientlimit decides the client-side rate limit of mooring's
// clients of the apiserver. Where the apiserver runs API Priority and
// Fairness (GA since Kubernetes 1.29, on unless turned off), it is the
// apiserver that shares its capacity between clients, by the FlowSchemas
// and priority levels its operator configured; a fixed limit in the client
// then only holds mooring below what the apiserver would give it. So by
// default mooring's clients run without one there, as controller-runtime's
// do since early 2025, and keep a fixed limit where the apiserver does not
// run APF. A limit the operator set with --kube-api-qps is always kept, and
// a negative one means no limit (client-go's meaning).
package clientlimit

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// The headers an apiserver with APF puts on every response it classified:
// the UIDs of the FlowSchema and priority level that matched.
const (
	FlowSchemaHeader    = "X-Kubernetes-PF-FlowSchema-UID"
	PriorityLevelHeader = "X-Kubernetes-PF-PriorityLevel-UID"
)

// Unlimited is the QPS that installs no client-side limiter.
const Unlimited = -1

// ProbeTimeout bounds the probe.
const ProbeTimeout = 10 * time.Second

// Decision is the limit chosen and why.
type Decision struct {
	QPS   float32
	Burst int
	// Reason is "flag" (the operator's --kube-api-qps), "apf" (the
	// apiserver runs APF: no limit) or "fallback" (no APF, or the probe
	// failed: the default limit).
	Reason string
	// FlowSchema is the UID of the FlowSchema that matched the probe, when
	// the apiserver runs APF.
	FlowSchema string
}

var qpsGauge = metrics.NewGauge(&metrics.GaugeOpts{
	Namespace:      "mooring",
	Subsystem:      "apiserver_client",
	Name:           "qps_limit",
	Help:           "The client-side rate limit of this process's apiserver clients, in requests per second; -1: none (the apiserver's API Priority and Fairness shares its capacity).",
	StabilityLevel: metrics.ALPHA,
})

func init() { legacyregistry.MustRegister(qpsGauge) }

// Decide chooses the limit for clients of cfg. setByOperator says whether
// --kube-api-qps was given; qps and burst are its value or the default
// (the fallback limit).
func Decide(ctx context.Context, cfg *rest.Config, setByOperator bool, qps float32, burst int) Decision {
	d := decide(ctx, cfg, setByOperator, qps, burst)
	if d.QPS < 0 {
		d.QPS = Unlimited
	}
	qpsGauge.Set(float64(d.QPS))
	switch d.Reason {
	case "flag":
		klog.InfoS("Client-side rate limit set by --kube-api-qps", "qps", d.QPS, "burst", d.Burst)
	case "apf":
		klog.InfoS("The apiserver runs API Priority and Fairness: no client-side rate limit (set --kube-api-qps to have one)", "flowSchemaUID", d.FlowSchema)
	default:
		klog.InfoS("The apiserver does not run API Priority and Fairness, or could not be asked: the default client-side rate limit", "qps", d.QPS, "burst", d.Burst)
	}
	return d
}

func decide(ctx context.Context, cfg *rest.Config, setByOperator bool, qps float32, burst int) Decision {
	if setByOperator {
		return Decision{QPS: qps, Burst: burst, Reason: "flag"}
	}
	fs, err := Probe(ctx, cfg)
	if err != nil {
		klog.InfoS("Could not ask the apiserver whether it runs API Priority and Fairness", "err", err)
	}
	if fs == "" {
		return Decision{QPS: qps, Burst: burst, Reason: "fallback"}
	}
	return Decision{QPS: Unlimited, Burst: burst, Reason: "apf", FlowSchema: fs}
}

// Probe asks the apiserver for /version (readable by every client,
// system:public-info-viewer) and returns the UID of the FlowSchema that
// classified the request, or "" when the response names none: the
// apiserver does not run APF.
func Probe(ctx context.Context, cfg *rest.Config) (string, error) {
	probe := rest.CopyConfig(cfg)
	probe.QPS, probe.RateLimiter = Unlimited, nil
	probe.Timeout = ProbeTimeout
	client, err := rest.HTTPClientFor(probe)
	if err != nil {
		return "", err
	}
	host, _, err := rest.DefaultServerUrlFor(probe)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host.String()+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /version: %s", resp.Status)
	}
	return resp.Header.Get(FlowSchemaHeader), nil
}

// Apply sets the decision on cfg.
func (d Decision) Apply(cfg *rest.Config) {
	cfg.QPS, cfg.Burst = d.QPS, d.Burst
}
