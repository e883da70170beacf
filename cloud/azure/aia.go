package azure

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/klog/v2"
)

// DefaultAIAAllowedHosts are the hosts Microsoft's "Azure Certificate
// Authority details" names for AIA (CA Issuers) downloads of the CAs
// Azure's certificates chain through: its own PKI repository and
// DigiCert's (GeoTrust is a DigiCert brand). An entry is a host, or a
// host followed by a path prefix.
var DefaultAIAAllowedHosts = []string{
	"www.microsoft.com/pkiops/",
	"www.microsoft.com/pki/",
	"cacerts.digicert.com",
	"cacerts.digicert.cn",
	"cacerts.geotrust.com",
}

// AIA fetch bounds.
const (
	// DefaultAIACacheTTL is how long a fetched issuer certificate is
	// used before it is fetched again (a stale one is still used when
	// the fetch fails: the chain is verified either way).
	DefaultAIACacheTTL = 24 * time.Hour
	// maxAIACert bounds one downloaded certificate (DER or PEM).
	maxAIACert = 64 << 10
	// maxAIAFetches bounds how many issuers one chain may fetch.
	maxAIAFetches = 3
	// maxAIACached bounds the cache: a signer certificate is anyone's to
	// make until its chain is checked, so the URLs asked for are too
	// (only on allowed hosts); the oldest entry goes first.
	maxAIACached = 64
	aiaTimeout   = 10 * time.Second
)

// errAIARefused: the URL is not on the allow-list; nothing was fetched.
var errAIARefused = errors.New("not on the AIA allow-list")

// errAIANoIssuer: the allowed host answered that the issuer is not there
// (404, 410) or served another certificate: a definite answer, unlike a
// download that failed.
var errAIANoIssuer = errors.New("the issuer is not at its CA Issuers URL")

// aiaEntry is an allow-list entry: host (with a port if given) and a
// path prefix.
type aiaEntry struct{ host, path string }

// parseAIAAllowed reads allow-list entries: "host", "host:port" or
// "host/path/prefix", no scheme.
func parseAIAAllowed(entries []string) ([]aiaEntry, error) {
	var out []aiaEntry
	for _, e := range entries {
		if strings.Contains(e, "://") || strings.ContainsAny(e, "*?#@ ") {
			return nil, fmt.Errorf("AIA allow-list entry %q: want a host or host/path-prefix, no scheme or wildcard", e)
		}
		host, path, _ := strings.Cut(e, "/")
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		if host == "" {
			return nil, fmt.Errorf("AIA allow-list entry %q: no host", e)
		}
		out = append(out, aiaEntry{host: host, path: "/" + path})
	}
	return out, nil
}

// aiaFetcher downloads CA Issuers certificates from allowed hosts, cached
// by URL for a TTL; concurrent asks for one URL share one download.
type aiaFetcher struct {
	allowed []aiaEntry
	client  *http.Client
	ttl     time.Duration
	now     func() time.Time

	group singleflight.Group
	mu    sync.Mutex
	cache map[string]aiaCached
}

type aiaCached struct {
	cert    *x509.Certificate
	fetched time.Time
}

// newAIAFetcher: client nil is a client of its own (environment proxy,
// redirects only to allowed URLs).
func newAIAFetcher(allowed []aiaEntry, client *http.Client, ttl time.Duration) *aiaFetcher {
	f := &aiaFetcher{allowed: allowed, ttl: ttl, now: time.Now, cache: map[string]aiaCached{}}
	if f.ttl <= 0 {
		f.ttl = DefaultAIACacheTTL
	}
	if client == nil {
		client = &http.Client{Timeout: aiaTimeout, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	}
	cp := *client
	cp.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 3 {
			return errors.New("too many redirects")
		}
		if !f.allows(req.URL) {
			return fmt.Errorf("redirect to %s: %w", req.URL.Redacted(), errAIARefused)
		}
		return nil
	}
	f.client = &cp
	return f
}

// allows: http or https, no user info, the host (and port) of an entry
// and a path under its prefix. AIA URLs are plain http by design; what is
// fetched is only a chain candidate, verified to the roots.
func (f *aiaFetcher) allows(u *url.URL) bool {
	if u == nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || u.Host == "" {
		return false
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	hostPort := host
	if p := u.Port(); p != "" {
		hostPort = net.JoinHostPort(host, p)
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	for _, e := range f.allowed {
		if e.host == hostPort && strings.HasPrefix(path, e.path) && !strings.Contains(path, "/..") {
			return true
		}
	}
	return false
}

// get returns the certificate at raw: from the cache while fresh, else
// downloaded (a stale copy if the download fails). An URL off the
// allow-list is refused before any request (errAIARefused); a failed
// download is an error to retry on.
func (f *aiaFetcher) get(ctx context.Context, raw string) (*x509.Certificate, error) {
	u, err := url.Parse(raw)
	if err != nil || !f.allows(u) {
		return nil, fmt.Errorf("CA Issuers URL %.200q: %w", raw, errAIARefused)
	}
	f.mu.Lock()
	c, ok := f.cache[raw]
	f.mu.Unlock()
	if ok && f.now().Sub(c.fetched) < f.ttl {
		return c.cert, nil
	}
	v, err, _ := f.group.Do(raw, func() (any, error) {
		cert, err := f.download(ctx, raw)
		if err != nil {
			return nil, err
		}
		f.store(raw, cert)
		klog.V(2).InfoS("Fetched an issuer certificate of an Azure attested document", "url", raw, "subject", cert.Subject.String())
		return cert, nil
	})
	if err != nil {
		if ok {
			klog.V(2).InfoS("Using a stale issuer certificate; its refresh failed", "url", raw, "err", err)
			return c.cert, nil
		}
		return nil, err
	}
	return v.(*x509.Certificate), nil
}

// store caches a certificate, dropping the oldest entry when full.
func (f *aiaFetcher) store(raw string, cert *x509.Certificate) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.cache[raw]; !ok && len(f.cache) >= maxAIACached {
		oldest := ""
		for k, c := range f.cache {
			if oldest == "" || c.fetched.Before(f.cache[oldest].fetched) {
				oldest = k
			}
		}
		delete(f.cache, oldest)
	}
	f.cache[raw] = aiaCached{cert: cert, fetched: f.now()}
}

// download reads one certificate, DER or PEM, of at most maxAIACert bytes.
func (f *aiaFetcher) download(ctx context.Context, raw string) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), aiaTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", raw, err)
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusGone:
		return nil, fmt.Errorf("fetch %s: HTTP %d: %w", raw, resp.StatusCode, errAIANoIssuer)
	default:
		return nil, fmt.Errorf("fetch %s: HTTP %d", raw, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAIACert+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("fetch %s: %w", raw, err)
	case len(body) > maxAIACert:
		return nil, fmt.Errorf("fetch %s: over %d bytes", raw, maxAIACert)
	}
	if b, _ := pem.Decode(body); b != nil {
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("fetch %s: a PEM %s, want a CERTIFICATE", raw, b.Type)
		}
		body = b.Bytes
	}
	cert, err := x509.ParseCertificate(body)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", raw, err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid {
		return nil, fmt.Errorf("fetch %s: %q is not a CA certificate", raw, cert.Subject.String())
	}
	return cert, nil
}
