package csrapprover

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// How the approver follows the apiserver's serving certificate
// (docs/csrapprover.md).
const (
	// APIServerNamesPeriod: a TLS handshake with the apiserver this often,
	// to see a rotated certificate. One handshake a minute costs the
	// apiserver nothing, and bounds the time a new name is not yet reserved.
	APIServerNamesPeriod = time.Minute
	// APIServerNamesRetry: the next handshake this soon after one that
	// failed, or that showed a certificate other than the one before
	// (rotation, or another apiserver behind the same address).
	APIServerNamesRetry = 10 * time.Second
	// APIServerNamesWindow: a name stays reserved this long after the last
	// successful handshake that showed it. Counted in successful handshakes
	// only: while the apiserver cannot be reached, no name is dropped.
	APIServerNamesWindow = 24 * time.Hour
	handshakeTimeout     = 10 * time.Second
)

// ErrAPIServerNamesUnknown: no TLS handshake with the apiserver has
// succeeded yet, so the names its certificate holds are unknown and no
// serving CSR can be decided.
var ErrAPIServerNamesUnknown = errors.New("the names in the apiserver's serving certificate are not known yet (no TLS handshake with it has succeeded); serving CSRs wait")

// APIServerNames learns the DNS names and IPs of the apiserver's own serving
// certificate from TLS handshakes with it, the way the approver's client
// reaches it, and holds the union of those seen within APIServerNamesWindow.
// A failed handshake keeps what was learned.
type APIServerNames struct {
	addr      string
	handshake func(ctx context.Context) (*x509.Certificate, error)
	now       func() time.Time
	period    time.Duration
	retry     time.Duration
	window    time.Duration

	mu sync.Mutex
	// seen: normalized DNS name or IP -> time of the last successful
	// handshake that showed it.
	seen    map[string]time.Time
	lastRaw []byte
	// set is seen's keys, replaced whole (never changed) so readers share
	// it; nil until the first successful handshake.
	set map[string]bool
}

// NewAPIServerNames follows the certificate of the apiserver cfg reaches:
// its host, and client-go's TLS configuration of cfg (CA, server name,
// client certificate) and dialer. The handshake goes straight to the host,
// never through a proxy. A plain-HTTP apiserver has no certificate to
// learn from: that is an error.
func NewAPIServerNames(cfg *rest.Config) (*APIServerNames, error) {
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("the apiserver %s is not reached over TLS, so its serving certificate cannot be learned; turn reserve-apiserver-names off and list its names in reserved-names", u.Redacted())
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		// No CA, client certificate or server name in cfg: client-go
		// itself then verifies with the system's roots.
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if tlsCfg.ServerName == "" {
		tlsCfg.ServerName = u.Hostname()
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return newAPIServerNames(addr, func(ctx context.Context) (*x509.Certificate, error) {
		ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		defer cancel()
		raw, err := dial(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, tlsCfg)
		defer func() { _ = conn.Close() }()
		if err := conn.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		peers := conn.ConnectionState().PeerCertificates
		if len(peers) == 0 {
			return nil, errors.New("the apiserver presented no certificate")
		}
		return peers[0], nil
	}), nil
}

func newAPIServerNames(addr string, handshake func(ctx context.Context) (*x509.Certificate, error)) *APIServerNames {
	registerMetrics()
	apiserverNames.Set(-1)
	return &APIServerNames{addr: addr, handshake: handshake, now: time.Now,
		period: APIServerNamesPeriod, retry: APIServerNamesRetry, window: APIServerNamesWindow, seen: map[string]time.Time{}}
}

// Reserved returns the normalized DNS names and IPs (net.IP.String) of the
// apiserver's certificates seen within the window; the map is shared and
// must not be changed. Before the first successful handshake it returns
// ErrAPIServerNamesUnknown.
func (a *APIServerNames) Reserved() (map[string]bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.set == nil {
		return nil, ErrAPIServerNamesUnknown
	}
	return a.set, nil
}

// Refresh does one handshake and adds the names of the certificate it
// shows; changed tells whether that certificate differs from the one the
// last successful handshake showed (always so for the first).
func (a *APIServerNames) Refresh(ctx context.Context) (changed bool, err error) {
	cert, err := a.handshake(ctx)
	if err != nil {
		apiserverHandshakes.WithLabelValues("failed").Inc()
		return false, fmt.Errorf("TLS handshake with the apiserver at %s: %w", a.addr, err)
	}
	now := a.now()
	names := make([]string, 0, len(cert.DNSNames)+len(cert.IPAddresses))
	for _, n := range cert.DNSNames {
		names = append(names, normalizeName(n))
	}
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	changed = !bytes.Equal(cert.Raw, a.lastRaw) || a.set == nil
	a.lastRaw = cert.Raw
	for _, n := range names {
		a.seen[n] = now
	}
	maps.DeleteFunc(a.seen, func(_ string, at time.Time) bool { return now.Sub(at) > a.window })
	if a.set == nil || len(a.set) != len(a.seen) || !allIn(a.seen, a.set) {
		a.set = make(map[string]bool, len(a.seen))
		for n := range a.seen {
			a.set[n] = true
		}
		all := slices.Sorted(maps.Keys(a.set))
		klog.InfoS("Serving CSRs may not carry the names and IPs of the apiserver's serving certificate", "apiserver", a.addr, "reserved", all, "certificate", names)
	}
	apiserverNames.Set(float64(len(a.set)))
	if changed {
		apiserverHandshakes.WithLabelValues("changed").Inc()
	} else {
		apiserverHandshakes.WithLabelValues("same").Inc()
	}
	return changed, nil
}

func allIn(seen map[string]time.Time, set map[string]bool) bool {
	for n := range seen {
		if !set[n] {
			return false
		}
	}
	return true
}

// Run refreshes every period until ctx ends: again after retry when a
// handshake failed or showed another certificate. learned is called once,
// when the names are first known.
func (a *APIServerNames) Run(ctx context.Context, learned func()) {
	known := false
	var due time.Time
	// Ticks every retry; a handshake only when one is due.
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if a.now().Before(due) {
			return
		}
		changed, err := a.Refresh(ctx)
		due = a.now().Add(a.period)
		if err != nil || changed {
			due = time.Time{}
		}
		switch {
		case err != nil && known:
			klog.ErrorS(err, "Could not see the apiserver's serving certificate again; its names learned before stay reserved", "retryIn", a.retry)
		case err != nil:
			klog.ErrorS(err, "Could not see the apiserver's serving certificate; no serving CSR is decided until it is seen", "retryIn", a.retry)
		case !known:
			known = true
			if learned != nil {
				learned()
			}
		}
	}, a.retry)
}
