package linodetest

import (
	"crypto/sha1" //nolint:gosec // ssl_fingerprint, as the API shows it
	"crypto/tls"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Cloud Firewall methods, for Calls and Fail.
const (
	MethodFWGet    = "fw-get"    // GET /v4/networking/firewalls/{id}[/devices|/rules], GET /v4/nodebalancers/{id}/firewalls
	MethodFWUpdate = "fw-update" // POST and DELETE of a firewall's devices, PUT of its rules
)

// ScopeFirewallReadWrite is the scope the firewall calls accept.
const ScopeFirewallReadWrite = "firewall:read_write"

const fwPath = "/v4/networking/firewalls"

// Firewall is a Cloud Firewall as the endpoint holds it: made by the test
// (PutFirewall: a user in the Cloud Manager), its devices attached and
// detached through the API.
type Firewall struct {
	ID     int
	Label  string
	Status string // enabled (default), disabled
	Tags   []string
	// InboundPolicy and OutboundPolicy are ACCEPT or DROP.
	InboundPolicy, OutboundPolicy string
	Inbound                       []FirewallRule
	Devices                       []FirewallDevice
	Created                       time.Time
}

// FirewallRule is an inbound rule.
type FirewallRule struct {
	Action   string // ACCEPT, DROP
	Label    string
	Protocol string // TCP, UDP, ICMP, IPENCAP
	// Ports: "" (all), or ports and ranges, "80,443,1000-2000".
	Ports      string
	IPv4, IPv6 []string
}

// FirewallDevice is a firewall's device: here a NodeBalancer.
type FirewallDevice struct {
	ID       int
	Type     string // nodebalancer
	EntityID int
}

func (f Firewall) clone() Firewall {
	f.Tags = slices.Clone(f.Tags)
	f.Inbound = slices.Clone(f.Inbound)
	f.Devices = slices.Clone(f.Devices)
	return f
}

// PutFirewall adds a Cloud Firewall (policies default to DROP inbound,
// ACCEPT outbound); its id is assigned.
func (c *Cloud) PutFirewall(f Firewall) Firewall {
	c.mu.Lock()
	defer c.mu.Unlock()
	f = f.clone()
	f.ID = c.nextID()
	f.Status = cmpOr(f.Status, "enabled")
	f.InboundPolicy = cmpOr(f.InboundPolicy, "DROP")
	f.OutboundPolicy = cmpOr(f.OutboundPolicy, "ACCEPT")
	f.Label = cmpOr(f.Label, "firewall"+strconv.Itoa(f.ID))
	f.Created = c.opts.Now().UTC().Truncate(time.Second)
	f.Devices = nil
	if c.nb.fws == nil {
		c.nb.fws = map[int]*Firewall{}
	}
	c.nb.fws[f.ID] = &f
	return f.clone()
}

// Firewall is one Cloud Firewall.
func (c *Cloud) Firewall(id int) (Firewall, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.nb.fws[id]
	if !ok {
		return Firewall{}, false
	}
	return f.clone(), true
}

// ChangeFirewall changes a firewall out of band (its rules: a user); the
// data plane of its NodeBalancers follows.
func (c *Cloud) ChangeFirewall(id int, change func(*Firewall)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.nb.fws[id]
	if !ok {
		return fmt.Errorf("linodetest: no firewall %d", id)
	}
	change(f)
	for _, d := range f.Devices {
		if n, ok := c.nb.byID[d.EntityID]; ok {
			if err := c.serveLocked(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// firewallsOf are the firewalls a NodeBalancer is attached to (under mu).
func (c *Cloud) firewallsOf(nbID int) []*Firewall {
	var out []*Firewall
	for _, f := range c.nb.fws {
		if slices.ContainsFunc(f.Devices, func(d FirewallDevice) bool { return d.Type == "nodebalancer" && d.EntityID == nbID }) {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b *Firewall) int { return a.ID - b.ID })
	return out
}

// noClient is a range no client comes from: the data plane's way to
// accept none (its empty list accepts all).
var noClient = netip.MustParsePrefix("0.0.0.0/32")

// sourceRanges are the clients the data plane lets reach a NodeBalancer
// of ports through its enabled firewalls (under mu): nil, all, without
// one. Inbound policy DROP: the addresses of the ACCEPT rules of protocol
// TCP or UDP that cover every one of its ports. Inbound policy ACCEPT
// without DROP rules: all. What the data plane cannot express (DROP rules
// under policy ACCEPT: a deny list; rules of some ports only) it fails
// closed: fewer clients, never more. Several firewalls: a client passes
// each.
func (c *Cloud) sourceRanges(nbID int, ports []int) []netip.Prefix {
	var out []netip.Prefix
	filtered := false
	for _, f := range c.firewallsOf(nbID) {
		if f.Status != "enabled" {
			continue
		}
		var allowed []netip.Prefix
		switch {
		case f.InboundPolicy == "ACCEPT" && !slices.ContainsFunc(f.Inbound, func(r FirewallRule) bool { return r.Action == "DROP" }):
			continue
		case f.InboundPolicy == "ACCEPT":
			allowed = []netip.Prefix{noClient}
		default:
			for _, r := range f.Inbound {
				if r.Action != "ACCEPT" || (r.Protocol != "TCP" && r.Protocol != "UDP") || !coversPorts(r.Ports, ports) {
					continue
				}
				for _, a := range slices.Concat(r.IPv4, r.IPv6) {
					if p, err := netip.ParsePrefix(a); err == nil {
						allowed = append(allowed, p.Masked())
					} else if ip, err := netip.ParseAddr(a); err == nil {
						allowed = append(allowed, netip.PrefixFrom(ip, ip.BitLen()))
					}
				}
			}
		}
		if len(allowed) == 0 {
			allowed = []netip.Prefix{noClient}
		}
		if !filtered {
			out, filtered = allowed, true
			continue
		}
		// Both firewalls must pass a client: the ranges of both, those of
		// one within the other's.
		var both []netip.Prefix
		for _, a := range out {
			for _, b := range allowed {
				switch {
				case b.Bits() >= a.Bits() && a.Contains(b.Addr()):
					both = append(both, b)
				case a.Bits() >= b.Bits() && b.Contains(a.Addr()):
					both = append(both, a)
				}
			}
		}
		if len(both) == 0 {
			both = []netip.Prefix{noClient}
		}
		out = both
	}
	return out
}

// coversPorts: a rule's ports ("" all) hold each of ports.
func coversPorts(spec string, ports []int) bool {
	if strings.TrimSpace(spec) == "" {
		return true
	}
	in := func(p int) bool {
		for _, part := range strings.Split(spec, ",") {
			lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := a, error(nil)
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 == nil && err2 == nil && a <= p && p <= b {
				return true
			}
		}
		return false
	}
	for _, p := range ports {
		if !in(p) {
			return false
		}
	}
	return true
}

// serveFirewalls routes /v4/networking/firewalls/{id}[/devices[/{id}]|/rules].
func (c *Cloud) serveFirewalls(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(AcceptedScopesHeader, ScopeFirewallReadWrite)
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, fwPath), "/"), "/")
	id, err := strconv.Atoi(parts[0])
	if err != nil || id <= 0 || len(parts) > 3 {
		writeError(w, http.StatusNotFound, "", "Not found")
		return
	}
	method := MethodFWGet
	if r.Method != http.MethodGet {
		method = MethodFWUpdate
	}
	if st := c.count(method, 0); st != 0 {
		writeError(w, st, "", "injected fault")
		return
	}
	var body struct {
		ID   int    `json:"id"`
		Type string `json:"type"`
	}
	route := r.Method + " " + strings.Join(parts[1:], "/")
	if len(parts) == 3 && parts[1] == "devices" {
		route = r.Method + " devices/{id}"
	}
	if route == "POST devices" && !decode(w, r, &body) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.nb.fws[id]
	if !ok {
		writeError(w, http.StatusNotFound, "", "Not found")
		return
	}
	switch route {
	case "GET ":
		cloudtest.WriteJSON(w, http.StatusOK, wireFirewall(*f))
	case "GET rules":
		cloudtest.WriteJSON(w, http.StatusOK, wireRules(*f))
	case "GET devices":
		var out []wireDevice
		for _, d := range f.Devices {
			out = append(out, c.wireDevice(*f, d))
		}
		page(w, out)
	case "POST devices":
		switch {
		case body.Type != "nodebalancer" && body.Type != "linode":
			writeError(w, http.StatusBadRequest, "type", "Must be one of linode, nodebalancer")
			return
		case body.Type == "linode":
			writeError(w, http.StatusBadRequest, "type", "linodetest models NodeBalancer devices only")
			return
		case c.nb.byID[body.ID] == nil:
			writeError(w, http.StatusNotFound, "id", "Not found")
			return
		case slices.ContainsFunc(f.Devices, func(d FirewallDevice) bool { return d.Type == body.Type && d.EntityID == body.ID }):
			writeError(w, http.StatusBadRequest, "id", "This device is already assigned to this Firewall")
			return
		case f.Status == "enabled" && slices.ContainsFunc(c.firewallsOf(body.ID), func(o *Firewall) bool { return o.Status == "enabled" }):
			// Linode's documented limit: one enabled firewall at a time.
			writeError(w, http.StatusBadRequest, "id", "NodeBalancer already has an enabled Firewall assigned")
			return
		}
		d := FirewallDevice{ID: c.nextID(), Type: body.Type, EntityID: body.ID}
		f.Devices = append(f.Devices, d)
		if err := c.serveLocked(c.nb.byID[body.ID]); err != nil {
			writeError(w, http.StatusInternalServerError, "", err.Error())
			return
		}
		cloudtest.WriteJSON(w, http.StatusOK, c.wireDevice(*f, d))
	case "DELETE devices/{id}":
		did, err := strconv.Atoi(parts[2])
		i := slices.IndexFunc(f.Devices, func(d FirewallDevice) bool { return d.ID == did })
		if err != nil || i < 0 {
			writeError(w, http.StatusNotFound, "", "Not found")
			return
		}
		d := f.Devices[i]
		f.Devices = slices.Delete(f.Devices, i, i+1)
		if n, ok := c.nb.byID[d.EntityID]; ok {
			if err := c.serveLocked(n); err != nil {
				writeError(w, http.StatusInternalServerError, "", err.Error())
				return
			}
		}
		cloudtest.WriteJSON(w, http.StatusOK, struct{}{})
	default:
		writeError(w, http.StatusNotFound, "", "Not found")
	}
}

// nbFirewalls answers GET /v4/nodebalancers/{id}/firewalls.
func (c *Cloud) nbFirewalls(w http.ResponseWriter, id int) {
	if st := c.count(MethodFWGet, 0); st != 0 {
		writeError(w, st, "", "injected fault")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held(w, id) == nil {
		return
	}
	var out []wireFW
	for _, f := range c.firewallsOf(id) {
		out = append(out, wireFirewall(*f))
	}
	page(w, out)
}

// attachAtCreate attaches a new NodeBalancer to firewall_id (under mu); a
// *invalid for a firewall the account does not have.
func (c *Cloud) attachAtCreate(fwID, nbID int) *invalid {
	f, ok := c.nb.fws[fwID]
	if !ok {
		return bad("firewall_id", "Firewall %d not found", fwID)
	}
	f.Devices = append(f.Devices, FirewallDevice{ID: c.nextID(), Type: "nodebalancer", EntityID: nbID})
	return nil
}

// detachAll takes a deleted NodeBalancer off its firewalls (under mu).
func (c *Cloud) detachAll(nbID int) {
	for _, f := range c.nb.fws {
		f.Devices = slices.DeleteFunc(f.Devices, func(d FirewallDevice) bool { return d.Type == "nodebalancer" && d.EntityID == nbID })
	}
}

// The firewall objects as the API shows them.
type wireFW struct {
	ID      int       `json:"id"`
	Label   string    `json:"label"`
	Status  string    `json:"status"`
	Tags    []string  `json:"tags"`
	Rules   wireRuleS `json:"rules"`
	Created string    `json:"created"`
	Updated string    `json:"updated"`
}

type wireRuleS struct {
	InboundPolicy  string     `json:"inbound_policy"`
	OutboundPolicy string     `json:"outbound_policy"`
	Inbound        []wireRule `json:"inbound"`
	Outbound       []wireRule `json:"outbound"`
}

type wireRule struct {
	Action    string    `json:"action"`
	Label     string    `json:"label"`
	Protocol  string    `json:"protocol"`
	Ports     string    `json:"ports,omitempty"`
	Addresses wireAddrs `json:"addresses"`
}

type wireAddrs struct {
	IPv4 []string `json:"ipv4,omitempty"`
	IPv6 []string `json:"ipv6,omitempty"`
}

type wireDevice struct {
	ID      int        `json:"id"`
	Entity  wireEntity `json:"entity"`
	Created string     `json:"created"`
	Updated string     `json:"updated"`
}

type wireEntity struct {
	ID    int    `json:"id"`
	Type  string `json:"type"`
	Label string `json:"label"`
	URL   string `json:"url"`
}

func wireRules(f Firewall) wireRuleS {
	rs := wireRuleS{InboundPolicy: f.InboundPolicy, OutboundPolicy: f.OutboundPolicy, Inbound: []wireRule{}, Outbound: []wireRule{}}
	for _, r := range f.Inbound {
		rs.Inbound = append(rs.Inbound, wireRule{Action: r.Action, Label: r.Label, Protocol: r.Protocol, Ports: r.Ports,
			Addresses: wireAddrs{IPv4: r.IPv4, IPv6: r.IPv6}})
	}
	return rs
}

func wireFirewall(f Firewall) wireFW {
	t := f.Created.UTC().Format(timeLayout)
	tags := slices.Clone(f.Tags)
	if tags == nil {
		tags = []string{}
	}
	return wireFW{ID: f.ID, Label: f.Label, Status: f.Status, Tags: tags, Rules: wireRules(f), Created: t, Updated: t}
}

func (c *Cloud) wireDevice(f Firewall, d FirewallDevice) wireDevice {
	label := ""
	if n, ok := c.nb.byID[d.EntityID]; ok {
		label = n.Label
	}
	t := f.Created.UTC().Format(timeLayout)
	return wireDevice{ID: d.ID, Created: t, Updated: t,
		Entity: wireEntity{ID: d.EntityID, Type: d.Type, Label: label, URL: nbPath + "/" + strconv.Itoa(d.EntityID)}}
}

// checkTLS: an https config's ssl_cert and ssl_key are PEM, a certificate
// (chain) and its key; answers the certificate's common name and its
// fingerprint (SHA-1 of the leaf's DER, colon-separated hex), which the
// API shows for the config in place of the redacted fields.
func checkTLS(prefix, cert, key string) (cn, fingerprint string, err *invalid) {
	pair, perr := tls.X509KeyPair([]byte(cert), []byte(key))
	if perr != nil {
		return "", "", bad(prefix+"ssl_key", "Invalid SSL certificate or key (they must be PEM and match)")
	}
	leaf := pair.Leaf
	sum := sha1.Sum(pair.Certificate[0]) //nolint:gosec // ssl_fingerprint
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	if leaf != nil {
		cn = leaf.Subject.CommonName
	}
	return cn, strings.Join(parts, ":"), nil
}
