package linodetest

import (
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// The API's paths (v4).
const (
	listPath = "/v4/linode/instances"
	getPath  = "/v4/linode/instances/"
)

// AcceptedScopesHeader names the OAuth scopes a call accepts; the two
// calls served accept ScopeLinodesReadOnly.
const (
	AcceptedScopesHeader = "X-Accepted-Oauth-Scopes"
	ScopeLinodesReadOnly = "linodes:read_only"
	// The NodeBalancer calls accept these: reads the first, changes the
	// second.
	ScopeNodeBalancersReadOnly  = "nodebalancers:read_only"
	ScopeNodeBalancersReadWrite = "nodebalancers:read_write"
)

// timeLayout is how the API shows times: UTC, to the second, without a
// zone.
const timeLayout = "2006-01-02T15:04:05"

// apiError is Linode's error body: {"errors": [{"reason", "field"}]}.
type apiError struct {
	Errors []apiReason `json:"errors"`
}

type apiReason struct {
	Reason string `json:"reason"`
	Field  string `json:"field,omitempty"`
}

// writeError answers status with one reason, under the API's Content-Type
// (application/json, which linodego compares with its Accept).
func writeError(w http.ResponseWriter, status int, field, reason string) {
	cloudtest.WriteJSON(w, status, apiError{Errors: []apiReason{{Reason: reason, Field: field}}})
}

func (c *Cloud) serveAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if c.Out.Load() {
		writeError(w, http.StatusServiceUnavailable, "", "Service Unavailable (injected outage)")
		return
	}
	if !cloudtest.Bearer(r, c.opts.Token) {
		writeError(w, http.StatusUnauthorized, "", "Invalid Token")
		return
	}
	nb := r.URL.Path == nbPath || strings.HasPrefix(r.URL.Path, nbPath+"/")
	fw := strings.HasPrefix(r.URL.Path, fwPath+"/")
	vpc := r.URL.Path == vpcPath || strings.HasPrefix(r.URL.Path, vpcPath+"/")
	list := r.URL.Path == listPath || (nb || fw) && r.Method == http.MethodGet && nbCollection(r.URL.Path) || vpc
	if !c.rateLimit(w, list) {
		c.Counter.Add(MethodThrottled)
		writeError(w, http.StatusTooManyRequests, "", "Too many requests")
		return
	}
	if fw {
		c.serveFirewalls(w, r)
		return
	}
	if vpc {
		c.serveVPCs(w, r)
		return
	}
	if nb {
		scope := ScopeNodeBalancersReadWrite
		if r.Method == http.MethodGet {
			scope = ScopeNodeBalancersReadOnly
		}
		w.Header().Set(AcceptedScopesHeader, scope)
		c.serveNodeBalancers(w, r)
		return
	}
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "", "linodetest serves only GET on instances")
		return
	}
	switch p := r.URL.Path; {
	case list:
		// The scope the API accepts for the call, as it says in every
		// answer (linodego's recorded answers).
		w.Header().Set(AcceptedScopesHeader, ScopeLinodesReadOnly)
		c.serveList(w, r)
	case strings.HasPrefix(p, getPath) && !strings.Contains(p[len(getPath):], "/"):
		w.Header().Set(AcceptedScopesHeader, ScopeLinodesReadOnly)
		c.serveGet(w, p[len(getPath):])
	default:
		writeError(w, http.StatusNotFound, "", "Not found")
	}
}

// rateLimit counts the request against its limit (collections' or the
// general one) and sets the X-RateLimit-* headers, and Retry-After when
// the window is full; false then.
func (c *Cloud) rateLimit(w http.ResponseWriter, list bool) bool {
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	win := &c.rate
	if list {
		win = &c.listRate
	}
	allowed := win.Take(now)
	reset := win.ResetAt(now)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(win.Limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(win.Remaining()))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	if !allowed {
		h.Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(reset.Sub(now).Seconds())))))
	}
	return allowed
}

type listAnswer[T any] struct {
	Data    []T `json:"data"`
	Page    int `json:"page"`
	Pages   int `json:"pages"`
	Results int `json:"results"`
}

// listQuery reads a list's page and page_size (the only parameters
// modelled), counts the call of method on its page and answers an injected
// fault; ok is false when it answered.
func (c *Cloud) listQuery(w http.ResponseWriter, r *http.Request, method string) (page, perPage int, ok bool) {
	q := r.URL.Query()
	for k := range q {
		if k != "page" && k != "page_size" {
			writeError(w, http.StatusBadRequest, k, "linodetest does not model this parameter")
			return 0, 0, false
		}
	}
	page, perPage = 1, DefaultPageSize
	if s := q.Get("page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "page", "Must be an integer of at least 1")
			return 0, 0, false
		}
		page = n
	}
	if s := q.Get("page_size"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < MinPageSize || n > MaxPageSize {
			writeError(w, http.StatusBadRequest, "page_size", fmt.Sprintf("Must be between %d and %d", MinPageSize, MaxPageSize))
			return 0, 0, false
		}
		perPage = n
	}
	if st := c.count(method, page); st != 0 {
		writeError(w, st, "", fmt.Sprintf("injected fault on page %d", page))
		return 0, 0, false
	}
	return page, perPage, true
}

// faulted counts a call of method (not a list's) and answers an injected
// fault; true when it did.
func (c *Cloud) faulted(w http.ResponseWriter, method string) bool {
	if st := c.count(method, 0); st != 0 {
		writeError(w, st, "", "injected fault")
		return true
	}
	return false
}

// filter reads X-Filter: only {"tags": "<tag>"} is modelled (an instance
// matches when its tags hold that tag).
func filter(r *http.Request) (tag string, err error) {
	raw := r.Header.Get("X-Filter")
	if raw == "" {
		return "", nil
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &f); err != nil {
		return "", errors.New("invalid JSON") // the API says "Invalid JSON"
	}
	for k, v := range f {
		if k != "tags" {
			return "", fmt.Errorf("linodetest does not model filtering on %q", k)
		}
		if err := json.Unmarshal(v, &tag); err != nil {
			return "", fmt.Errorf("linodetest models only a string for tags")
		}
	}
	return tag, nil
}

func (c *Cloud) serveList(w http.ResponseWriter, r *http.Request) {
	page, perPage, ok := c.listQuery(w, r, MethodList)
	if !ok {
		return
	}
	tag, err := filter(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "X-Filter", err.Error())
		return
	}
	short := c.short.Get(page)
	c.Before.Run(page)
	all := c.sorted(tag)
	from, to, last := cloudtest.Page(len(all), page, perPage)
	items := all[from:to]
	if short && len(items) > 0 {
		items = items[:len(items)-1]
	}
	out := listAnswer[wireInstance]{Data: []wireInstance{}, Page: page, Pages: last, Results: len(all)}
	for _, in := range items {
		out.Data = append(out.Data, wire(in))
	}
	cloudtest.WriteJSON(w, http.StatusOK, out)
}

func (c *Cloud) serveGet(w http.ResponseWriter, idText string) {
	if c.faulted(w, MethodGet) {
		return
	}
	id, err := strconv.Atoi(idText)
	in, ok := c.Get(id)
	if err != nil || !ok {
		writeError(w, http.StatusNotFound, "", "Not found")
		return
	}
	cloudtest.WriteJSON(w, http.StatusOK, wire(in))
}

// The Linode as the API shows it (the documented instance object).
type wireInstance struct {
	ID                  int         `json:"id"`
	Label               string      `json:"label"`
	Group               string      `json:"group"`
	Status              string      `json:"status"`
	Created             string      `json:"created"`
	Updated             string      `json:"updated"`
	Type                string      `json:"type"`
	IPv4                []string    `json:"ipv4"`
	IPv6                *string     `json:"ipv6"`
	Image               string      `json:"image"`
	Region              string      `json:"region"`
	SiteType            string      `json:"site_type"`
	Specs               apiSpecs    `json:"specs"`
	Alerts              wireAlerts  `json:"alerts"`
	Backups             wireBackups `json:"backups"`
	Hypervisor          string      `json:"hypervisor"`
	WatchdogEnabled     bool        `json:"watchdog_enabled"`
	Tags                []string    `json:"tags"`
	HostUUID            string      `json:"host_uuid"`
	HasUserData         bool        `json:"has_user_data"`
	PlacementGroup      *struct{}   `json:"placement_group"`
	DiskEncryption      string      `json:"disk_encryption"`
	LKEClusterID        *int        `json:"lke_cluster_id"`
	Capabilities        []string    `json:"capabilities"`
	InterfaceGeneration string      `json:"interface_generation"`
	MaintenancePolicy   string      `json:"maintenance_policy"`
	Locks               []string    `json:"locks"`
}

type wireSpecs struct {
	Disk     int `json:"disk"`
	Memory   int `json:"memory"`
	VCPUs    int `json:"vcpus"`
	GPUs     int `json:"gpus"`
	Transfer int `json:"transfer"`
}

// apiSpecs are the API's specs: the Metadata service's and
// accelerated_devices.
type apiSpecs struct {
	wireSpecs
	AcceleratedDevices int `json:"accelerated_devices"`
}

type wireAlerts struct {
	CPU           int   `json:"cpu"`
	IO            int   `json:"io"`
	NetworkIn     int   `json:"network_in"`
	NetworkOut    int   `json:"network_out"`
	TransferQuota int   `json:"transfer_quota"`
	SystemAlerts  []any `json:"system_alerts"`
	UserAlerts    []any `json:"user_alerts"`
}

type wireBackups struct {
	Enabled        bool    `json:"enabled"`
	Available      bool    `json:"available"`
	LastSuccessful *string `json:"last_successful"`
	Schedule       struct {
		Day    *string `json:"day"`
		Window *string `json:"window"`
	} `json:"schedule"`
}

// wire is a Linode as the API shows it: ipv4 lists the public address
// before the private one, as Linode does; ipv6 is the SLAAC address with
// its prefix length. A Linode that is offline keeps its addresses.
func wire(in Instance) wireInstance {
	ipv4 := []string{}
	for _, a := range []string{in.PublicIP, in.PrivateIP} {
		if a != "" {
			ipv4 = append(ipv4, a)
		}
	}
	var ipv6 *string
	if in.IPv6 != "" {
		s := in.IPv6 + "/128"
		ipv6 = &s
	}
	tags := in.Tags
	if tags == nil {
		tags = []string{}
	}
	created := in.Created.UTC().Format(timeLayout)
	return wireInstance{
		ID: in.ID, Label: in.Label, Status: in.Status, Created: created, Updated: created, Type: in.Type,
		IPv4: ipv4, IPv6: ipv6, Image: "linode/ubuntu24.04", Region: in.Region, SiteType: "core",
		Specs:           apiSpecs{wireSpecs: wireSpecs{Disk: 81920, Memory: 4096, VCPUs: 2, Transfer: 4000}},
		Alerts:          wireAlerts{CPU: 180, IO: 10000, NetworkIn: 10, NetworkOut: 10, TransferQuota: 80, SystemAlerts: []any{}, UserAlerts: []any{}},
		Hypervisor:      "kvm",
		WatchdogEnabled: true,
		Tags:            tags,
		// 40 hex digits, as the API shows a host's id.
		HostUUID:       fmt.Sprintf("%x", sha1.Sum([]byte(strconv.Itoa(in.ID)))),
		HasUserData:    in.UserData != "",
		DiskEncryption: "disabled",
		Capabilities:   []string{"Block Storage Encryption"},
		// The legacy interfaces of a Linode's configuration profile.
		InterfaceGeneration: "legacy_config",
		MaintenancePolicy:   "linode/migrate",
		Locks:               []string{},
	}
}

// JSON is a Linode as the API shows it, for tests of a client's decoding.
func JSON(in Instance) ([]byte, error) { return json.Marshal(wire(in)) }
