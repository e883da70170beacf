package lb

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// backend is a Backend with its health, checked by its own goroutine when
// the listener has a health check.
type backend struct {
	Backend
	check *HealthCheck // nil: always healthy

	mu        sync.Mutex
	healthy   bool
	lastError string
	successes int
	failures  int

	stop chan struct{}
}

func newBackend(b Backend, check *HealthCheck) *backend {
	be := &backend{Backend: b, check: check, stop: make(chan struct{})}
	if check == nil {
		be.healthy = true
	} else {
		be.lastError = "not yet checked"
	}
	return be
}

func (b *backend) isHealthy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.healthy
}

func (b *backend) status() BackendStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BackendStatus{Backend: b.Backend, Healthy: b.healthy, LastError: b.lastError}
}

// same reports whether b already is the backend a new config asks for, so
// its health state can carry over.
func (b *backend) same(want Backend, check *HealthCheck) bool {
	if b.Backend != want || (b.check == nil) != (check == nil) {
		return false
	}
	return check == nil || *b.check == *check
}

// probe runs the health checks until stop closes.
func (b *backend) probe(logf func(string, ...any), name string) {
	t := time.NewTicker(b.check.Interval)
	defer t.Stop()
	for {
		err := b.checkOnce()
		b.record(err, logf, name)
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
	}
}

func (b *backend) target() string {
	port := b.check.Port
	if port == 0 {
		port = b.Port
	}
	return net.JoinHostPort(b.Address, strconv.Itoa(port))
}

func (b *backend) checkOnce() error {
	ctx, cancel := context.WithTimeout(context.Background(), b.check.Timeout)
	defer cancel()
	go func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if b.check.Protocol == TCP {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", b.target())
		if err != nil {
			return err
		}
		return c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.target()+b.check.Path, nil)
	if err != nil {
		return err
	}
	resp, err := checkClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 399 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// checkClient never uses a proxy and never reuses connections: every
// check is a fresh connection, as a real load balancer's would be.
var checkClient = &http.Client{
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

func (b *backend) record(err error, logf func(string, ...any), name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.successes++
		b.failures = 0
		if !b.healthy && b.successes >= b.check.HealthyThreshold {
			b.healthy = true
			b.lastError = ""
			logf("%s: backend %s is healthy", name, b.Backend)
		}
		return
	}
	b.failures++
	b.successes = 0
	b.lastError = err.Error()
	if b.healthy && b.failures >= b.check.UnhealthyThreshold {
		b.healthy = false
		logf("%s: backend %s is unhealthy: %v", name, b.Backend, err)
	}
}

func (b *backend) addrPort() netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(b.Address), uint16(b.Port))
}
