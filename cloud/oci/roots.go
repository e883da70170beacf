package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/internal/keyset"
)

// RootsPath is the auth service's path that answers the region's instance
// identity roots to any signed caller: GET
// https://auth.<region>.oraclecloud.com/v1/instancePrincipalRootCACertificates
// (Oracle's "Retrieving the Instance Identity Root CA Certificate"; Teleport
// calls it in lib/join/oraclejoin). Oracle publishes the roots nowhere else.
const RootsPath = "/v1/instancePrincipalRootCACertificates"

// How the fetched roots are kept (internal/keyset's rules).
const (
	// DefaultMinRootsRefresh is the least time between two fetches,
	// whatever unknown issuers ask for.
	DefaultMinRootsRefresh = time.Minute
	// DefaultRootsRefresh is how old the fetched roots may be before a
	// verification fetches them again first: a root Oracle withdrew stops
	// verifying within it, while the auth service answers.
	DefaultRootsRefresh = time.Hour
	// DefaultMaxRootsAge is how long fetched roots serve while fetches
	// fail; past it nothing verifies (CSRs wait) until a fetch succeeds.
	DefaultMaxRootsAge = 24 * time.Hour
)

// Limits of the auth service's answer.
const (
	maxRootsAnswer = 1 << 20
	maxRoots       = 64
)

// ErrUnknownIssuer is the verdict on an intermediate whose issuer is no
// root OCI publishes (in roots fetched at most DefaultMinRootsRefresh ago,
// fetched again for it) or the roots file holds.
var ErrUnknownIssuer = errors.New("the intermediate's issuer is not among OCI's instance identity roots")

// Roots are the trust anchors of instance certificates.
type Roots interface {
	// For returns the certificates a chain through the intermediate may
	// end at. An error wrapping ErrUnknownIssuer is a verdict; any other
	// error is transient (the roots could not be fetched).
	For(ctx context.Context, intermediate *x509.Certificate) (*x509.CertPool, error)
}

// StaticRoots are the certificates of the config's rootCAFile: every
// chain is checked against all of them, and nothing is fetched.
func StaticRoots(pool *x509.CertPool) Roots { return staticRoots{pool} }

type staticRoots struct{ pool *x509.CertPool }

func (s staticRoots) For(context.Context, *x509.Certificate) (*x509.CertPool, error) {
	return s.pool, nil
}

// RootsOptions configure FetchedRoots.
type RootsOptions struct {
	// Client calls the region's auth service, signed with mooring's own
	// OCI credentials (NewAuthClient). Required.
	Client *common.BaseClient
	// MinRefresh, Refresh and MaxAge default to DefaultMinRootsRefresh,
	// DefaultRootsRefresh and DefaultMaxRootsAge.
	MinRefresh, Refresh, MaxAge time.Duration
	// Now is the clock of the roots' ages (default time.Now).
	Now func() time.Time
}

// FetchedRoots are the region's instance identity roots as the auth
// service answers them, kept by internal/keyset: fetched on first use,
// again once DefaultRootsRefresh old, and again (at most once a
// DefaultMinRootsRefresh) for an intermediate whose issuer is not among
// them; a failed fetch leaves the last roots serving up to
// DefaultMaxRootsAge and is never a verdict.
type FetchedRoots struct {
	client *common.BaseClient
	cache  *keyset.Cache[[]*x509.Certificate]
}

// NewFetchedRoots checks the options; it fetches nothing.
func NewFetchedRoots(o RootsOptions) (*FetchedRoots, error) {
	if o.Client == nil {
		return nil, errors.New("oci roots: an auth service client is required")
	}
	if o.MinRefresh <= 0 {
		o.MinRefresh = DefaultMinRootsRefresh
	}
	if o.Refresh <= 0 {
		o.Refresh = DefaultRootsRefresh
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxRootsAge
	}
	f := &FetchedRoots{client: o.Client}
	cache, err := keyset.New(f.fetch, keyset.Options{Name: "OCI's instance identity roots", MinRefresh: o.MinRefresh,
		RefreshInterval: o.Refresh, MaxAge: o.MaxAge, Now: o.Now})
	if err != nil {
		return nil, fmt.Errorf("oci roots: %w", err)
	}
	f.cache = cache
	return f, nil
}

// NewAuthClient is a client of the region's auth service that signs with
// provider (mooring's own credentials, the SDK's default request signer):
// endpoint, or https://auth.<region>.<realm's domain> as the SDK names
// the region's endpoints; no redirects followed, each call bounded by
// timeout (0: none), no retries (the next verification is the retry).
func NewAuthClient(provider common.ConfigurationProvider, region, endpoint string, timeout time.Duration) (*common.BaseClient, error) {
	c, err := common.NewClientWithConfig(provider)
	if err != nil {
		return nil, fmt.Errorf("oci: the auth service client: %w", err)
	}
	if endpoint == "" {
		endpoint = "https://" + common.StringToRegion(region).Endpoint("auth")
	}
	c.Host = endpoint
	c.HTTPClient = &http.Client{Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &c, nil
}

// For finds the roots of the intermediate's issuer: by its name and the
// key identifier the intermediate names (a root re-keyed under its old
// name is fetched for), else by the name alone (a root without a subject
// key identifier).
func (f *FetchedRoots) For(ctx context.Context, inter *x509.Certificate) (*x509.CertPool, error) {
	name := nameKey(inter.RawIssuer)
	var (
		roots []*x509.Certificate
		err   error
	)
	if len(inter.AuthorityKeyId) > 0 {
		roots, err = f.cache.Lookup(ctx, name+hex.EncodeToString(inter.AuthorityKeyId))
		if errors.Is(err, keyset.ErrUnknownKey) {
			roots, err = f.cache.Lookup(ctx, name)
		}
	} else {
		roots, err = f.cache.Lookup(ctx, name)
	}
	if errors.Is(err, keyset.ErrUnknownKey) {
		return nil, fmt.Errorf("%w: issuer %q, key id %x (%v)", ErrUnknownIssuer, inter.Issuer.String(), inter.AuthorityKeyId, err)
	}
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	return pool, nil
}

// nameKey is the part of a root's index key that is its name: the
// SHA-256 of the name's DER (keys appear in errors; names are binary).
func nameKey(rawName []byte) string {
	sum := sha256.Sum256(rawName)
	return hex.EncodeToString(sum[:]) + "/"
}

// fetch gets the region's roots from the auth service, through the SDK
// (its signer, its request), and indexes them by name, and by name and
// subject key identifier.
func (f *FetchedRoots) fetch(ctx context.Context) (map[string][]*x509.Certificate, error) {
	req := common.MakeDefaultHTTPRequest(http.MethodGet, RootsPath)
	resp, err := f.client.Call(ctx, &req)
	defer common.CloseBodyIfValid(resp)
	if err != nil {
		klog.V(2).InfoS("Fetching OCI's instance identity roots failed", "endpoint", f.client.Host, "err", err)
		return nil, fmt.Errorf("GET %s%s: %w", f.client.Host, RootsPath, err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRootsAnswer+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("GET %s%s: %w", f.client.Host, RootsPath, err)
	case len(body) > maxRootsAnswer:
		return nil, fmt.Errorf("GET %s%s: an answer over %d bytes", f.client.Host, RootsPath, maxRootsAnswer)
	}
	roots, err := ParseRootsAnswer(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s%s: %w", f.client.Host, RootsPath, err)
	}
	index := map[string][]*x509.Certificate{}
	for _, r := range roots {
		name := nameKey(r.RawSubject)
		index[name] = append(index[name], r)
		if len(r.SubjectKeyId) > 0 {
			k := name + hex.EncodeToString(r.SubjectKeyId)
			index[k] = append(index[k], r)
		}
	}
	klog.V(2).InfoS("Fetched OCI's instance identity roots", "endpoint", f.client.Host, "roots", len(roots))
	return index, nil
}

// rootsAnswer is the auth service's answer as Teleport's verifier reads
// it: certificates base64 DER (a PEM block is taken too) and refreshIn, a
// time to fetch again (not used: the roots are refetched on their own
// period and for unknown issuers). Other fields are ignored.
type rootsAnswer struct {
	Certificates []string `json:"certificates"`
}

// ParseRootsAnswer reads the auth service's answer: a JSON object whose
// certificates are base64 DER or PEM, or a PEM bundle (Oracle's page says
// the endpoint "returns PEM-encoded x.509 root certificates"). At least
// one and at most 64 certificates, each a CA.
func ParseRootsAnswer(body []byte) ([]*x509.Certificate, error) {
	body = bytes.TrimSpace(body)
	var ders [][]byte
	switch {
	case bytes.HasPrefix(body, []byte("{")):
		var a rootsAnswer
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, fmt.Errorf("the roots answer: %w", err)
		}
		for i, s := range a.Certificates {
			der, err := certificateBytes(s)
			if err != nil {
				return nil, fmt.Errorf("the roots answer: certificate %d: %w", i+1, err)
			}
			ders = append(ders, der)
		}
	case bytes.HasPrefix(body, []byte("-----BEGIN")):
		blocks, err := pemCertificates(body)
		if err != nil {
			return nil, fmt.Errorf("the roots answer: %w", err)
		}
		ders = blocks
	default:
		return nil, errors.New("the roots answer is neither a JSON object nor PEM")
	}
	return parseCAs(ders, "the roots answer")
}

// certificateBytes reads one certificate of the JSON answer: PEM, or
// base64 DER (standard alphabet, line breaks allowed).
func certificateBytes(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-----BEGIN") {
		blocks, err := pemCertificates([]byte(s))
		if err != nil {
			return nil, err
		}
		if len(blocks) != 1 {
			return nil, fmt.Errorf("%d PEM blocks, want one", len(blocks))
		}
		return blocks[0], nil
	}
	der, err := base64.StdEncoding.DecodeString(strings.NewReplacer("\n", "", "\r", "").Replace(s))
	if err != nil {
		return nil, fmt.Errorf("not base64 DER: %w", err)
	}
	return der, nil
}

// pemCertificates are the DER of a PEM bundle's blocks, CERTIFICATE
// blocks only (text around them is skipped, as a roots file may carry
// some).
func pemCertificates(data []byte) ([][]byte, error) {
	var out [][]byte
	for rest := data; ; {
		b, r := pem.Decode(rest)
		if b == nil {
			return out, nil
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a %q block, want only CERTIFICATE", b.Type)
		}
		out = append(out, b.Bytes)
		rest = r
	}
}

// parseCAs parses certificates that must each be a CA: at least one, at
// most maxRoots.
func parseCAs(ders [][]byte, what string) ([]*x509.Certificate, error) {
	switch {
	case len(ders) == 0:
		return nil, fmt.Errorf("%s: no certificate", what)
	case len(ders) > maxRoots:
		return nil, fmt.Errorf("%s: %d certificates, limit %d", what, len(ders), maxRoots)
	}
	out := make([]*x509.Certificate, 0, len(ders))
	for i, der := range ders {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", what, i+1, err)
		}
		if !c.IsCA {
			return nil, fmt.Errorf("%s: certificate %d (%s) is not a CA", what, i+1, c.Subject)
		}
		out = append(out, c)
	}
	return out, nil
}
