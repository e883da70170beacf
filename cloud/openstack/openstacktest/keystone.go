package openstacktest

import (
	"crypto/subtle"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// The services' paths under the one listener (as DevStack lays them out).
const (
	identityBase = "/identity/v3"
	computeBase  = "/compute/v2.1"
	// networkBase is Neutron's endpoint in the catalog; gophercloud adds
	// v2.0/ to it.
	networkBase = "/networking"
)

// keystoneTime is how Keystone writes expires_at and issued_at.
const keystoneTime = "2006-01-02T15:04:05.000000Z"

// authRequest is the body of POST /v3/auth/tokens, the parts modelled.
type authRequest struct {
	Auth struct {
		Identity struct {
			Methods               []string `json:"methods"`
			ApplicationCredential *struct {
				ID     string `json:"id"`
				Name   string `json:"name"`
				Secret string `json:"secret"`
				User   *struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				} `json:"user"`
			} `json:"application_credential"`
		} `json:"identity"`
		Scope json.RawMessage `json:"scope"`
	} `json:"auth"`
}

// keystoneError is Keystone's error body.
func keystoneError(w http.ResponseWriter, status int, title, msg string) {
	cloudtest.WriteJSON(w, status, map[string]any{"error": map[string]any{"code": status, "title": title, "message": msg}})
}

func unauthorized(w http.ResponseWriter) {
	keystoneError(w, http.StatusUnauthorized, "Unauthorized", "The request you have made requires authentication.")
}

func (c *Cloud) serveIdentity(w http.ResponseWriter, r *http.Request, path string) {
	if path != "/auth/tokens" {
		keystoneError(w, http.StatusNotFound, "Not Found", "The resource could not be found.")
		return
	}
	if r.Method != http.MethodPost {
		keystoneError(w, http.StatusMethodNotAllowed, "Method Not Allowed", "The method is not allowed for the requested URL.")
		return
	}
	if f := c.count("auth"); f != nil {
		keystoneError(w, f.Status, http.StatusText(f.Status), "injected fault")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	var req authRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	id := req.Auth.Identity
	switch {
	case err != nil || len(id.Methods) == 0:
		keystoneError(w, http.StatusBadRequest, "Bad Request", "Expecting to find identity in auth.")
		return
	case !slices.Equal(id.Methods, []string{"application_credential"}) || id.ApplicationCredential == nil:
		// Password, token and the other methods are not modelled.
		unauthorized(w)
		return
	case len(req.Auth.Scope) > 0 && string(req.Auth.Scope) != "null" && string(req.Auth.Scope) != "{}":
		keystoneError(w, http.StatusUnauthorized, "Unauthorized", "Application credentials cannot request a scope.")
		return
	}
	ac := id.ApplicationCredential
	byID := ac.ID != "" && ac.ID == c.opts.CredentialID
	byName := ac.ID == "" && ac.Name == c.opts.CredentialName && ac.User != nil && ac.User.ID == DefaultUserID
	c.mu.Lock()
	revoked := c.revoked
	c.mu.Unlock()
	if revoked || !(byID || byName) || subtle.ConstantTimeCompare([]byte(ac.Secret), []byte(c.opts.CredentialSecret)) != 1 {
		unauthorized(w)
		return
	}
	tok, issued, expires := c.newToken()
	w.Header().Set("X-Subject-Token", tok)
	cloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"token": c.tokenBody(r, issued, expires)})
}

// tokenBody is the token Keystone answers with: its user, project, roles,
// application credential and catalog.
func (c *Cloud) tokenBody(r *http.Request, issued, expires time.Time) map[string]any {
	base := "http://" + r.Host
	domain := map[string]any{"id": "default", "name": "Default"}
	endpoints := func(url string) []map[string]any {
		var out []map[string]any
		for i, iface := range []string{"public", "internal", "admin"} {
			out = append(out, map[string]any{"id": strings.Repeat(string(rune('a'+i)), 32), "interface": iface,
				"region": c.opts.Region, "region_id": c.opts.Region, "url": url})
		}
		return out
	}
	return map[string]any{
		"methods":    []string{"application_credential"},
		"audit_ids":  []string{"3T2dc1CGQxyJsHdDu1xkcw"},
		"issued_at":  issued.Format(keystoneTime),
		"expires_at": expires.Format(keystoneTime),
		"user": map[string]any{"id": DefaultUserID, "name": "mooring", "domain": domain,
			"password_expires_at": nil},
		"project":   map[string]any{"id": DefaultProjectID, "name": "mooring-test", "domain": domain},
		"is_domain": false,
		"roles":     []map[string]any{{"id": "b1b9cd7a9a5c4a0fa5b1b3e9a1d0c4f2", "name": "reader"}},
		"application_credential": map[string]any{"id": c.opts.CredentialID, "name": c.opts.CredentialName,
			"restricted": true},
		"catalog": []map[string]any{
			{"id": "c0mpute0000000000000000000000000", "type": "compute", "name": "nova", "endpoints": endpoints(base + computeBase)},
			{"id": "1dent1ty0000000000000000000000000", "type": "identity", "name": "keystone", "endpoints": endpoints(base + identityBase)},
			{"id": "ne7w0rk0000000000000000000000000", "type": "network", "name": "neutron", "endpoints": endpoints(base + networkBase)},
			{"id": "10adba1a0000000000000000000000000", "type": "load-balancer", "name": "octavia", "endpoints": endpoints(base + loadBalancerBase)},
		},
	}
}
