package csrapprover

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	decisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "decisions_total",
		Help: "CSR decisions by signer, decision (approved, denied, dry-run-*) and reason.",
	}, []string{"signer", "decision", "reason"})
	checks = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "checks_total",
		Help: "Decisions by the check that decided them (the failing check, or all) and result.",
	}, []string{"check", "result"})
	latency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "decision_latency_seconds",
		Help:    "Time from a CSR's creation to its decision, by signer and decision.",
		Buckets: metrics.ExponentialBuckets(0.01, 2.5, 10),
	}, []string{"signer", "decision"})
	errorsTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "errors_total",
		Help: "CSR syncs that failed (cloud or API errors) and were requeued; nothing is approved on an error.",
	})
	unconfirmed = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "unconfirmed_total",
		Help: "Times a CSR was asked again once the cloud view could list anew, because its instance was not in the view's last List, which began before the CSR was looked at.",
	})
	delayed = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "delayed_total",
		Help: "Times a CSR waited its turn because too many were being decided at once, by the limit that held it (requester; instance: the machine an attested join claims; total).",
	}, []string{"scope"})
	yielded = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "gate_yields_total",
		Help: "Times a CSR that failed several attempts in a row (cloud, API or key-fetch errors) gave its place in the gate back, so that its requester's other CSRs are decided meanwhile.",
	})
	competingApprovers = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "competing_approvers",
		Help: "1 when kube-controller-manager may approve kubelet client CSRs of this kind (join, renewal) without mooring's checks, 0 when not, -1 when the check failed.",
	}, []string{"kind"})
	foreignApprovals = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "foreign_approvals_total",
		Help: "Kubelet CSRs approved by another approver, not by mooring, by signer and the approval's reason.",
	}, []string{"signer", "reason"})
	apiserverHandshakes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "apiserver_handshakes_total",
		Help: "TLS handshakes with the apiserver to learn the names of its serving certificate, by result: same (certificate as before), changed (another one, or the first), failed.",
	}, []string{"result"})
	apiserverNames = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "mooring", Subsystem: "csr_approver", Name: "apiserver_reserved_names",
		Help: "DNS names and IPs of the apiserver's serving certificates that serving CSRs may not carry; -1 until the first handshake succeeded (serving CSRs wait).",
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(decisions, checks, latency, errorsTotal, unconfirmed, delayed, yielded, competingApprovers, foreignApprovals,
			apiserverHandshakes, apiserverNames)
	})
}
