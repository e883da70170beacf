package gce

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/gce/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/internal/jwsform"
	"github.com/mooring-dev/mooring/internal/keyset"
)

// ReplayKeyPrefix starts the replay key of GCE evidence; the rest is the
// SHA-256 (hex) of the token's signed part, header.payload. GCE tokens
// carry no token id; RS256 signatures are deterministic, and the signed
// part is required in canonical base64url, so one token has one key.
const ReplayKeyPrefix = "gce-token:"

// Token limits.
const (
	// MaxTokenLifetime is the longest exp - iat accepted: Google's
	// identity tokens live one hour.
	MaxTokenLifetime = time.Hour
	// DefaultMinKeyRefresh is the least time between two fetches of
	// Google's keys, whatever unknown key ids ask.
	DefaultMinKeyRefresh = 30 * time.Second
	// DefaultKeyRefresh is how old fetched keys may be before a Verify
	// refetches them first: a key Google withdrew stops verifying within
	// it while Google answers. Google rotates its keys about daily and
	// publishes new ones ahead of use; its certs endpoint allows caching
	// for hours (Cache-Control max-age), an upper bound this stays under.
	DefaultKeyRefresh = 5 * time.Minute
	// DefaultMaxKeyAge is how long fetched keys serve while refetches
	// fail; past it nothing verifies (CSRs are retried) until a fetch
	// succeeds. It is the longest a withdrawn key can verify.
	DefaultMaxKeyAge = time.Hour
)

// VerifierOptions configure a Verifier.
type VerifierOptions struct {
	// Issuer is the iss tokens must carry (https://accounts.google.com).
	Issuer string
	// CertsURL publishes the signing keys (see ParseKeys for the formats).
	CertsURL string
	// Projects are the project IDs whose instances may join.
	Projects []string
	// MaxClockSkew is tolerated on iat and exp (default 1m).
	MaxClockSkew time.Duration
	// HTTPClient fetches the keys (nil: a client with a 30 s timeout).
	HTTPClient *http.Client
	// MinKeyRefresh bounds how often keys are refetched (default
	// DefaultMinKeyRefresh); KeyRefresh is how long fetched keys are used
	// before a refetch (default DefaultKeyRefresh); MaxKeyAge how long they
	// may be used when refetches fail (default DefaultMaxKeyAge).
	MinKeyRefresh, KeyRefresh, MaxKeyAge time.Duration
	// Now is the clock of key ages (default time.Now).
	Now func() time.Time
}

// Verifier is a cloud.EvidenceVerifier for GCE instance identity tokens.
type Verifier struct {
	issuer   string
	projects []string
	skew     time.Duration
	keys     *keyset.Cache[*rsa.PublicKey]
}

var _ cloud.EvidenceVerifier = (*Verifier)(nil)

// NewVerifier checks the options and makes a verifier; it calls nothing.
func NewVerifier(o VerifierOptions) (*Verifier, error) {
	if o.Issuer == "" {
		return nil, errors.New("gce verifier: an issuer is required")
	}
	if err := kit.CheckEndpoint(o.CertsURL, true); err != nil {
		return nil, fmt.Errorf("gce verifier: certs URL: %w", err)
	}
	if len(o.Projects) == 0 {
		return nil, errors.New("gce verifier: at least one project is required")
	}
	for _, p := range o.Projects {
		if !agentid.ValidProjectID(p) {
			return nil, fmt.Errorf("gce verifier: project %q is not a project ID", p)
		}
	}
	if o.MaxClockSkew <= 0 {
		o.MaxClockSkew = DefaultMaxClockSkew
	}
	if o.MinKeyRefresh <= 0 {
		o.MinKeyRefresh = DefaultMinKeyRefresh
	}
	if o.KeyRefresh <= 0 {
		o.KeyRefresh = DefaultKeyRefresh
	}
	if o.MaxKeyAge <= 0 {
		o.MaxKeyAge = DefaultMaxKeyAge
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	client := &http.Client{Timeout: DefaultRequestTimeout}
	if o.HTTPClient != nil {
		c := *o.HTTPClient
		client = &c
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client.Jar = nil
	registerMetrics()
	fetcher := &keyFetcher{url: o.CertsURL, client: client, now: o.Now}
	keys, err := keyset.New(fetcher.get, keyset.Options{
		Name: "Google's signing keys", MinRefresh: o.MinKeyRefresh, RefreshInterval: o.KeyRefresh, MaxAge: o.MaxKeyAge,
		FetchTimeout: client.Timeout, Now: o.Now,
		Observe: func(result string) { keyFetches.WithLabelValues(result).Inc() },
	})
	if err != nil {
		return nil, fmt.Errorf("gce verifier: %w", err)
	}
	return &Verifier{issuer: o.Issuer, projects: slices.Clone(o.Projects), skew: o.MaxClockSkew, keys: keys}, nil
}

// Type is the evidence block type this verifier reads.
func (v *Verifier) Type() string { return agentid.EvidenceType }

// Claims are the claims of a GCE identity token (format=full) that
// mooring reads.
type Claims struct {
	jwt.Claims
	Google struct {
		ComputeEngine ComputeEngine `json:"compute_engine"`
	} `json:"google"`
}

// ComputeEngine is the instance a format=full token is about.
type ComputeEngine struct {
	InstanceID   string `json:"instance_id"`
	InstanceName string `json:"instance_name"`
	ProjectID    string `json:"project_id"`
	Zone         string `json:"zone"`
}

// parsed is a token read but not verified.
type parsed struct {
	tok       *jwt.JSONWebToken
	kid       string
	claims    Claims
	replayKey string
}

// parse reads a token without verifying it: compact form in canonical
// base64url, alg RS256 only (go-jose refuses others), a key id, no header
// naming a key or a place to get one (jwk, jku, x5u, x5c) and no crit.
func parse(data []byte) (parsed, error) {
	var p parsed
	// Google writes alg, kid and typ; anything naming a key or where to
	// get one (jwk, jku, x5u, x5c, x5t), crit and b64 are refused before
	// go-jose reads the header.
	if _, err := jwsform.Parse(string(data), agentid.MaxTokenSize, "alg", "kid", "typ"); err != nil {
		return p, fmt.Errorf("token: %w", err)
	}
	s := string(data)
	tok, err := jwt.ParseSigned(s, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return p, err
	}
	if len(tok.Headers) != 1 {
		return p, errors.New("token has more than one signature")
	}
	h := tok.Headers[0]
	if h.JSONWebKey != nil { // refused above already
		return p, errors.New("token header carries a key (jwk)")
	}
	if h.KeyID == "" {
		return p, errors.New("token header names no key (kid)")
	}
	if err := tok.UnsafeClaimsWithoutVerification(&p.claims); err != nil {
		return p, fmt.Errorf("token claims: %w", err)
	}
	sum := sha256.Sum256([]byte(s[:strings.LastIndexByte(s, '.')])) // header.payload
	p.tok, p.kid, p.replayKey = tok, h.KeyID, ReplayKeyPrefix+hex.EncodeToString(sum[:])
	return p, nil
}

// Peek reads the replay key and the audience without verifying anything.
func (v *Verifier) Peek(data []byte) (replayKey, binding string, err error) {
	p, err := parse(data)
	if err != nil {
		return "", "", err
	}
	if len(p.claims.Audience) != 1 {
		return "", "", errors.New("token does not have exactly one audience")
	}
	return p.replayKey, p.claims.Audience[0], nil
}

// PeekMachine reads the instance id the token claims, without verifying
// the token.
func (v *Verifier) PeekMachine(data []byte) (string, error) {
	p, err := parse(data)
	if err != nil {
		return "", err
	}
	id := p.claims.Google.ComputeEngine.InstanceID
	if id == "" {
		return "", errors.New("token names no instance (google.compute_engine.instance_id)")
	}
	return id, nil
}

// Verify checks a token: its form, its claims (issuer, audience = the
// binding, times, the instance it names, of an allowed project), its
// signature by one of Google's published keys, and the claims again as
// signed.
//
// Verdicts (*cloud.Rejection): a malformed token, claims that fail, a
// signature that does not verify, and a key id Google does not publish (not
// in the keys fetched at most MinKeyRefresh ago, refetched once for it).
// Transient (the CSR is retried): the keys could not be fetched, or are
// older than MaxKeyAge and cannot be refetched. The claims are checked
// before the keys are looked up, so evidence that could never pass is
// denied without a fetch, and never waits on one.
func (v *Verifier) Verify(ctx context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	p, err := parse(data)
	if err != nil {
		var alg *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &alg) {
			return cloud.Attestation{}, cloud.Reject(cloud.RejectSignature, err)
		}
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, err)
	}
	// The claims as the token states them, before any key is looked up:
	// nothing is accepted on them, they are checked again once signed.
	if _, err := v.checkClaims(p.claims, binding, now); err != nil {
		klog.V(2).InfoS("GCE identity token refused before its signature", "err", err)
		return cloud.Attestation{}, err
	}
	key, err := v.keys.Lookup(ctx, p.kid)
	if errors.Is(err, keyset.ErrUnknownKey) {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectSignature, fmt.Errorf("token: %w", err))
	}
	if err != nil {
		return cloud.Attestation{}, err
	}
	var c Claims
	if err := p.tok.Claims(key, &c); err != nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectSignature, err)
	}
	att, err := v.checkClaims(c, binding, now)
	if err != nil {
		klog.V(2).InfoS("GCE identity token refused", "err", err)
		return cloud.Attestation{}, err
	}
	att.ReplayKey = p.replayKey
	return att, nil
}

// checkClaims checks the verified claims.
func (v *Verifier) checkClaims(c Claims, binding string, now time.Time) (cloud.Attestation, error) {
	if c.Issuer != v.issuer {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectIssuer, fmt.Errorf("token issuer %q, want %q", c.Issuer, v.issuer))
	}
	if len(c.Audience) != 1 || c.Audience[0] != binding {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectBinding, errors.New("token audience is not the CSR key's binding"))
	}
	if c.IssuedAt == nil || c.Expiry == nil {
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, errors.New("token lacks iat or exp"))
	}
	iat, exp := c.IssuedAt.Time(), c.Expiry.Time()
	switch {
	case !exp.After(iat):
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, errors.New("token expires before it is issued"))
	case exp.Sub(iat) > MaxTokenLifetime:
		return cloud.Attestation{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("token lifetime %s exceeds %s", exp.Sub(iat), MaxTokenLifetime))
	case iat.After(now.Add(v.skew)):
		return cloud.Attestation{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("token issued at %s, after now %s", iat.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)))
	case !now.Before(exp.Add(v.skew)):
		return cloud.Attestation{}, cloud.Reject(cloud.RejectExpired, fmt.Errorf("token expired at %s", exp.UTC().Format(time.RFC3339)))
	case c.NotBefore != nil && c.NotBefore.Time().After(now.Add(v.skew)):
		return cloud.Attestation{}, cloud.Reject(cloud.RejectExpired, errors.New("token not valid yet (nbf)"))
	}
	ce := c.Google.ComputeEngine
	switch {
	case ce.ProjectID == "" && ce.InstanceID == "":
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, errors.New("token names no instance: request it with format=full"))
	case !agentid.ValidInstanceID(ce.InstanceID) || !agentid.ValidInstanceName(ce.InstanceName) ||
		!agentid.ValidZone(ce.Zone) || !agentid.ValidProjectID(ce.ProjectID):
		return cloud.Attestation{}, cloud.Reject(cloud.RejectMalformed, errors.New("token's instance id, name, zone or project is malformed"))
	case !slices.Contains(v.projects, ce.ProjectID):
		return cloud.Attestation{}, cloud.Reject(cloud.RejectIssuer, fmt.Errorf("token is of an instance of project %q, not one of %v", ce.ProjectID, v.projects))
	}
	return cloud.Attestation{
		InstanceID: ce.InstanceID,
		ProviderID: agentid.ProviderID(ce.ProjectID, ce.Zone, ce.InstanceName),
		IssuedAt:   iat,
		ExpiresAt:  exp,
	}, nil
}

var (
	keyFetches = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "mooring", Subsystem: "gce_attest", Name: "key_fetches_total",
		Help: "Fetches of Google's published token signing keys by result.",
	}, []string{"result"})
	registerOnce sync.Once
)

func registerMetrics() { registerOnce.Do(func() { legacyregistry.MustRegister(keyFetches) }) }
