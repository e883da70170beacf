package linodetest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// The Metadata service's paths and headers.
const (
	mdTokenPath       = "/v1/token"
	mdInstancePath    = "/v1/instance"
	mdNetworkPath     = "/v1/network"
	mdUserDataPath    = "/v1/user-data"
	mdTokenHeader     = "Metadata-Token"
	mdExpiryHeader    = "Metadata-Token-Expiry-Seconds"
	maxTokenExpirySec = 86400
)

type mdInstance struct {
	ID       int       `json:"id"`
	Label    string    `json:"label"`
	Region   string    `json:"region"`
	Type     string    `json:"type"`
	HostUUID string    `json:"host_uuid"`
	Tags     []string  `json:"tags"`
	Specs    wireSpecs `json:"specs"`
	Backups  mdBackups `json:"backups"`
	Image    mdImage   `json:"image"`
}

type mdBackups struct {
	Enabled bool    `json:"enabled"`
	Status  *string `json:"status"`
}

type mdImage struct {
	ID    string `json:"id"`
	Label string `json:"label"`
}

type mdNetwork struct {
	Interfaces []any  `json:"interfaces"`
	IPv4       mdIPv4 `json:"ipv4"`
	IPv6       mdIPv6 `json:"ipv6"`
}

type mdIPv4 struct {
	Public  []string `json:"public"`
	Private []string `json:"private"`
	Shared  []string `json:"shared"`
}

type mdIPv6 struct {
	SLAAC        string   `json:"slaac"`
	LinkLocal    string   `json:"link_local"`
	Ranges       []string `json:"ranges"`
	SharedRanges []string `json:"shared_ranges"`
}

// serveMetadata answers a Linode's Metadata service. A Linode that is not
// running answers nothing (its connections are closed), as a machine that
// is off.
func (c *Cloud) serveMetadata(id int, w http.ResponseWriter, r *http.Request) {
	method := map[string]string{mdTokenPath: MethodToken, mdInstancePath: MethodInstance,
		mdNetworkPath: MethodNetwork, mdUserDataPath: MethodUserData}[r.URL.Path]
	st := 0
	if method != "" {
		st = c.count(method, 0)
	}
	in, ok := c.Get(id)
	if cloudtest.Unserved(w, ok && in.Status == StatusRunning, st) {
		return
	}
	if method == "" {
		http.NotFound(w, r)
		return
	}
	if method == MethodToken {
		c.serveToken(id, w, r)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	if !c.validToken(id, r.Header.Get(mdTokenHeader)) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if method == MethodUserData {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(base64.StdEncoding.EncodeToString([]byte(in.UserData))))
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "application/json") {
		http.Error(w, "linodetest serves this document as application/json only", http.StatusNotAcceptable)
		return
	}
	if method == MethodInstance {
		tags := in.Tags
		if tags == nil {
			tags = []string{}
		}
		wi := wire(in)
		cloudtest.WriteJSON(w, http.StatusOK, mdInstance{ID: in.ID, Label: in.Label, Region: in.Region, Type: in.Type,
			HostUUID: wi.HostUUID, Tags: tags, Specs: wi.Specs.wireSpecs, Image: mdImage{ID: wi.Image, Label: "Ubuntu 24.04 LTS"}})
		return
	}
	n := mdNetwork{Interfaces: []any{}, IPv4: mdIPv4{Public: []string{}, Private: []string{}, Shared: []string{}},
		IPv6: mdIPv6{LinkLocal: "fe80::/64", Ranges: []string{}, SharedRanges: []string{}}}
	if in.PublicIP != "" {
		n.IPv4.Public = append(n.IPv4.Public, in.PublicIP+"/32")
	}
	if in.PrivateIP != "" {
		n.IPv4.Private = append(n.IPv4.Private, in.PrivateIP+"/17")
	}
	if in.IPv6 != "" {
		n.IPv6.SLAAC = in.IPv6 + "/128"
	}
	cloudtest.WriteJSON(w, http.StatusOK, n)
}

// serveToken answers PUT /v1/token: a token for this Linode, valid for
// Metadata-Token-Expiry-Seconds (1 to 86400), as text/plain.
func (c *Cloud) serveToken(id int, w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	secs, err := strconv.Atoi(r.Header.Get(mdExpiryHeader))
	if err != nil || secs < 1 || secs > maxTokenExpirySec {
		http.Error(w, mdExpiryHeader+" must be an integer from 1 to 86400", http.StatusBadRequest)
		return
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		http.Error(w, "no randomness", http.StatusInternalServerError)
		return
	}
	tok := hex.EncodeToString(b[:])
	c.mu.Lock()
	c.tokens[tok] = mdToken{id: id, expires: c.opts.Now().Add(time.Duration(secs) * time.Second)}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(tok))
}

// validToken: tok was given to this Linode and has not expired.
func (c *Cloud) validToken(id int, tok string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tokens[tok]
	return ok && tok != "" && t.id == id && c.opts.Now().Before(t.expires)
}
