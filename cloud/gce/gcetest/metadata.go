package gcetest

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

const metadataPrefix = "/computeMetadata/v1/"

func (c *Cloud) serveMetadata(key string, w http.ResponseWriter, r *http.Request) {
	in, ok := c.instances.Get(key)
	if !ok || in.Status != "RUNNING" {
		cloudtest.HangUp(w) // a machine that is not running answers nothing
		return
	}
	w.Header().Set("Metadata-Flavor", "Google")
	switch {
	case r.Header.Get("Metadata-Flavor") != "Google":
		http.Error(w, "Missing required header: Metadata-Flavor", http.StatusForbidden)
		return
	case r.Header.Get("X-Forwarded-For") != "":
		http.Error(w, "Request had X-Forwarded-For header", http.StatusForbidden)
		return
	case r.Method != http.MethodGet:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, metadataPrefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if path == "instance/service-accounts/default/identity" {
		c.serveIdentity(in, w, r)
		return
	}
	var v string
	switch path {
	case "instance/id":
		v = strconv.FormatUint(in.ID, 10)
	case "instance/name":
		v = in.Name
	case "instance/hostname":
		v = in.Hostname
		if v == "" {
			v = in.Name + "." + in.Zone + ".c." + in.Project + ".internal"
		}
	case "instance/zone":
		v = fmt.Sprintf("projects/%d/zones/%s", projectNumber(in.Project), in.Zone)
	case "instance/machine-type":
		v = fmt.Sprintf("projects/%d/machineTypes/%s", projectNumber(in.Project), in.MachineType)
	case "instance/network-interfaces/0/ip":
		v = in.InternalIP
	case "instance/network-interfaces/0/access-configs/0/external-ip":
		v = in.ExternalIP
	case "project/project-id":
		v = in.Project
	case "project/numeric-project-id":
		v = strconv.FormatInt(projectNumber(in.Project), 10)
	}
	if v == "" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/text")
	_, _ = w.Write([]byte(v))
}

func (c *Cloud) serveIdentity(in Instance, w http.ResponseWriter, r *http.Request) {
	if st := c.count("identity"); st != 0 {
		http.Error(w, "injected fault", st)
		return
	}
	q := r.URL.Query()
	aud := q.Get("audience")
	if aud == "" {
		http.Error(w, "non-empty audience parameter required", http.StatusBadRequest)
		return
	}
	tok, err := c.Token(in, TokenOptions{Audience: aud, Full: q.Get("format") == "full"})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(tok))
}

// TokenOptions make an identity token; the zero values are the metadata
// server's.
type TokenOptions struct {
	Audience string
	// Full adds google.compute_engine.
	Full bool
	// Issuer overrides the Cloud's issuer.
	Issuer string
	// IssuedAt (default now) and Lifetime (default one hour).
	IssuedAt time.Time
	Lifetime time.Duration
	// Edit changes the claims before signing.
	Edit func(claims map[string]any)
}

// Token signs an identity token of instance in with the current key, as
// the instance's metadata server would.
func (c *Cloud) Token(in Instance, o TokenOptions) (string, error) {
	if o.IssuedAt.IsZero() {
		o.IssuedAt = c.opts.Now()
	}
	if o.Lifetime == 0 {
		o.Lifetime = TokenLifetime
	}
	if o.Issuer == "" {
		o.Issuer = c.opts.Issuer
	}
	claims := map[string]any{
		"iss": o.Issuer, "aud": o.Audience, "azp": ServiceAccountID, "sub": ServiceAccountID,
		"email":          fmt.Sprintf("%d-compute@developer.gserviceaccount.com", projectNumber(in.Project)),
		"email_verified": true,
		"iat":            o.IssuedAt.Unix(), "exp": o.IssuedAt.Add(o.Lifetime).Unix(),
	}
	if o.Full {
		claims["google"] = map[string]any{"compute_engine": map[string]any{
			"instance_creation_timestamp": in.Created.Unix(),
			"instance_id":                 strconv.FormatUint(in.ID, 10),
			"instance_name":               in.Name,
			"project_id":                  in.Project,
			"project_number":              projectNumber(in.Project),
			"zone":                        in.Zone,
		}}
	}
	if o.Edit != nil {
		o.Edit(claims)
	}
	return c.Sign(claims)
}

// Sign signs any claims with the current key (RS256, kid in the header).
func (c *Cloud) Sign(claims any) (string, error) {
	c.mu.Lock()
	var k *signingKey
	for _, pk := range c.keys {
		if pk.kid == c.signing {
			k = pk
		}
	}
	c.mu.Unlock()
	if k == nil {
		return "", errors.New("gcetest: no key signs (every key retired)")
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k.priv},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), k.kid))
	if err != nil {
		return "", err
	}
	return jwt.Signed(signer).Claims(claims).Serialize()
}
