package ocitest

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// Limits of Virtual Network that the endpoint applies.
const (
	// MaxNSGRulesPerRequest is the most rules one addSecurityRules or
	// removeSecurityRules takes (OCI's API reference: 1 to 25; OCI's CCM
	// sends batches of 25).
	MaxNSGRulesPerRequest = 25
	// MaxNSGRules is the most security rules an NSG holds (OCI's
	// documented limit: 120 per NSG).
	MaxNSGRules = 120
	// MaxNSGDisplayName is the longest NSG display name (255, as OCI's
	// CCM cuts its NSGs' names).
	MaxNSGDisplayName = 255
	// maxDescription is the longest rule description OCI takes.
	maxDescription = 255
)

// Subnet is one subnet of a VCN: its CIDR block (inside 127.0.0.0/8 here)
// and the security lists attached to it.
type Subnet struct {
	// ID is assigned by PutSubnet when "".
	ID, Compartment, VcnID, DisplayName string
	// CIDR is its IPv4 CIDR block, inside 127.0.0.0/8.
	CIDR string
	// AvailabilityDomain: "" for a regional subnet.
	AvailabilityDomain string
	SecurityLists      []string
	Created            time.Time
}

// SecurityList is one security list: its rules, as OCI holds them.
type SecurityList struct {
	// ID is assigned by PutSecurityList when "".
	ID, Compartment, VcnID, DisplayName string
	Ingress                             []core.IngressSecurityRule
	Egress                              []core.EgressSecurityRule
	Created                             time.Time
}

// NSG is one network security group and its rules (each with the id the
// endpoint gave it).
type NSG struct {
	// ID is assigned by PutNSG and create when "".
	ID, Compartment, VcnID, DisplayName string
	FreeformTags                        map[string]string
	Rules                               []core.SecurityRule
	Created                             time.Time
}

// vcnState is the endpoint's Virtual Network: subnets, security lists and
// NSGs by OCID. Its zero value is ready.
type vcnState struct {
	mu       sync.Mutex
	subnets  map[string]Subnet
	lists    map[string]SecurityList
	nsgs     map[string]NSG
	tokens   map[string]string // opc-retry-token of an NSG create -> its NSG
	ruleSeq  int
	beforeSL cloudtest.Hook[string]
	inUse    func(nsg string) bool
}

func (v *vcnState) init() {
	if v.subnets == nil {
		v.subnets, v.lists, v.nsgs, v.tokens = map[string]Subnet{}, map[string]SecurityList{}, map[string]NSG{}, map[string]string{}
	}
}

// clone deep-copies a value of plain data through JSON.
func clone[T any](v T) T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// etagOf is a resource's etag: a digest of what it holds, so that every
// change gives a new one.
func etagOf(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

func (c *Cloud) newOCID(kind string) string {
	return "ocid1." + kind + ".oc1." + c.opts.RegionKey + "." + uniqueID()
}

// PutSubnet adds or replaces a subnet; its CIDR must be inside
// 127.0.0.0/8 (it panics otherwise) and its security lists known.
func (c *Cloud) PutSubnet(s Subnet) Subnet {
	p, err := netip.ParsePrefix(s.CIDR)
	if err != nil || !p.Addr().Is4() || !p.Addr().IsLoopback() || p.Bits() < 8 {
		panic(fmt.Sprintf("ocitest: subnet CIDR %q is not inside 127.0.0.0/8", s.CIDR))
	}
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	c.vcn.init()
	for _, id := range s.SecurityLists {
		if _, ok := c.vcn.lists[id]; !ok {
			panic("ocitest: subnet names unknown security list " + id)
		}
	}
	s.ID = cmp.Or(s.ID, c.newOCID("subnet"))
	s.Compartment = cmp.Or(s.Compartment, c.opts.Compartment)
	s.VcnID = cmp.Or(s.VcnID, c.defaultVcn())
	s.DisplayName = cmp.Or(s.DisplayName, "subnet-"+s.ID[len(s.ID)-6:])
	if s.Created.IsZero() {
		s.Created = c.opts.Now().UTC().Truncate(time.Millisecond)
	}
	s.SecurityLists = slices.Clone(s.SecurityLists)
	c.vcn.subnets[s.ID] = s
	return s
}

// defaultVcn is the VCN of the first subnet, security list or NSG put
// without one.
func (c *Cloud) defaultVcn() string {
	for _, s := range c.vcn.subnets {
		return s.VcnID
	}
	for _, l := range c.vcn.lists {
		return l.VcnID
	}
	return "ocid1.vcn.oc1." + c.opts.RegionKey + ".ocitestvcn"
}

// PutSecurityList adds or replaces a security list.
func (c *Cloud) PutSecurityList(l SecurityList) SecurityList {
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	c.vcn.init()
	l.ID = cmp.Or(l.ID, c.newOCID("securitylist"))
	l.Compartment = cmp.Or(l.Compartment, c.opts.Compartment)
	l.VcnID = cmp.Or(l.VcnID, c.defaultVcn())
	l.DisplayName = cmp.Or(l.DisplayName, "seclist-"+l.ID[len(l.ID)-6:])
	if l.Created.IsZero() {
		l.Created = c.opts.Now().UTC().Truncate(time.Millisecond)
	}
	l = clone(l)
	c.vcn.lists[l.ID] = l
	return clone(l)
}

// SecurityList is a security list as the endpoint holds it.
func (c *Cloud) SecurityList(id string) (SecurityList, bool) {
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	l, ok := c.vcn.lists[id]
	return clone(l), ok
}

// EditSecurityList changes a security list as another writer would (its
// etag changes).
func (c *Cloud) EditSecurityList(id string, f func(*SecurityList)) error {
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	l, ok := c.vcn.lists[id]
	if !ok {
		return fmt.Errorf("ocitest: no security list %s", id)
	}
	l = clone(l)
	f(&l)
	c.vcn.lists[id] = clone(l)
	return nil
}

// BeforeSecurityListUpdate sets f, run with the list's OCID when an
// UpdateSecurityList arrives, before its If-Match is compared (a test
// changes the list there, as a concurrent writer); nil clears it.
func (c *Cloud) BeforeSecurityListUpdate(f func(id string)) { c.vcn.beforeSL.Set(f) }

// PutNSG adds or replaces an NSG; its rules get ids where they have none.
func (c *Cloud) PutNSG(n NSG) NSG {
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	c.vcn.init()
	n.ID = cmp.Or(n.ID, c.newOCID("networksecuritygroup"))
	n.Compartment = cmp.Or(n.Compartment, c.opts.Compartment)
	n.VcnID = cmp.Or(n.VcnID, c.defaultVcn())
	if n.Created.IsZero() {
		n.Created = c.opts.Now().UTC().Truncate(time.Millisecond)
	}
	n = clone(n)
	for i := range n.Rules {
		if n.Rules[i].Id == nil {
			n.Rules[i].Id = common.String(c.vcn.ruleID())
		}
		n.Rules[i].IsValid = common.Bool(true)
	}
	c.vcn.nsgs[n.ID] = n
	return clone(n)
}

// NSG is an NSG as the endpoint holds it.
func (c *Cloud) NSG(id string) (NSG, bool) {
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	n, ok := c.vcn.nsgs[id]
	return clone(n), ok
}

// NSGs are every NSG, by OCID.
func (c *Cloud) NSGs() map[string]NSG {
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	out := map[string]NSG{}
	for id, n := range c.vcn.nsgs {
		out[id] = clone(n)
	}
	return out
}

// NSGInUse sets f, which tells whether an NSG is attached to something
// (a load balancer): DeleteNetworkSecurityGroup of one is 409 Conflict.
func (c *Cloud) NSGInUse(f func(nsg string) bool) {
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	c.vcn.inUse = f
}

// ruleID is a new NSG rule id: six upper-case hex digits, the form OCI
// gives them.
func (v *vcnState) ruleID() string {
	v.ruleSeq++
	return fmt.Sprintf("%06X", v.ruleSeq)
}

// vcnPath reports whether path (after /20160918/) is Virtual Network's
// part that this file serves.
func vcnPath(path string) bool {
	for _, p := range []string{"subnets/", "securityLists/", "networkSecurityGroups"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// serveVCN answers a signed request of Virtual Network's part.
func (c *Cloud) serveVCN(w http.ResponseWriter, r *http.Request, path string) {
	parts := strings.Split(strings.TrimSuffix(path, "/"), "/")
	m := r.Method
	switch {
	case len(parts) == 2 && parts[0] == "subnets" && m == http.MethodGet:
		c.getSubnet(w, parts[1])
	case len(parts) == 2 && parts[0] == "securityLists" && m == http.MethodGet:
		c.getSecurityList(w, parts[1])
	case len(parts) == 2 && parts[0] == "securityLists" && m == http.MethodPut:
		c.updateSecurityList(w, r, parts[1])
	case len(parts) == 1 && parts[0] == "networkSecurityGroups" && m == http.MethodPost:
		c.createNSG(w, r)
	case len(parts) == 1 && parts[0] == "networkSecurityGroups" && m == http.MethodGet:
		c.listNSGs(w, r)
	case len(parts) == 2 && parts[0] == "networkSecurityGroups" && m == http.MethodGet:
		c.getNSG(w, parts[1])
	case len(parts) == 2 && parts[0] == "networkSecurityGroups" && m == http.MethodPut:
		c.updateNSG(w, r, parts[1])
	case len(parts) == 2 && parts[0] == "networkSecurityGroups" && m == http.MethodDelete:
		c.deleteNSG(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "networkSecurityGroups" && parts[2] == "securityRules" && m == http.MethodGet:
		c.listNSGRules(w, r, parts[1])
	case len(parts) == 4 && parts[0] == "networkSecurityGroups" && parts[2] == "actions" && parts[3] == "addSecurityRules" && m == http.MethodPost:
		c.addNSGRules(w, r, parts[1])
	case len(parts) == 4 && parts[0] == "networkSecurityGroups" && parts[2] == "actions" && parts[3] == "removeSecurityRules" && m == http.MethodPost:
		c.removeNSGRules(w, r, parts[1])
	case len(parts) >= 1 && len(parts) <= 4:
		ociError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", m+" is not modelled on this path")
	default:
		ociError(w, http.StatusNotFound, "NotFound", "path not modelled")
	}
}

func notFound(w http.ResponseWriter) {
	ociError(w, http.StatusNotFound, "NotAuthorizedOrNotFound", "Authorization failed or requested resource not found.")
}

// fault counts a call of method and answers its injected fault: true when
// it answered.
func (c *Cloud) fault(w http.ResponseWriter, method string) bool {
	if st := c.count(method, 0); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return true
	}
	return false
}

// ifMatch answers 412 NoEtagMatch when the request's If-Match is set and
// is not etag.
func ifMatch(w http.ResponseWriter, r *http.Request, kind, id, etag string) bool {
	if got := r.Header.Get("If-Match"); got != "" && got != etag {
		ociError(w, http.StatusPreconditionFailed, "NoEtagMatch",
			fmt.Sprintf("The If-Match header of the request (%s) does not match the current etag of %s %s (%s).", got, kind, id, etag))
		return false
	}
	return true
}

// decodeBody reads a JSON body strictly: an unknown field or malformed
// JSON is 400 CannotParseRequest / InvalidParameter.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("Content-Type %q: want application/json", ct))
		return false
	}
	field, err := cloudtest.DecodeStrict(r.Body, v)
	switch {
	case field != "":
		ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("unknown field %q", field))
		return false
	case err != nil:
		ociError(w, http.StatusBadRequest, "CannotParseRequest", "the request body is not valid JSON: "+err.Error())
		return false
	}
	return true
}

func (c *Cloud) getSubnet(w http.ResponseWriter, id string) {
	if c.fault(w, "GetSubnet") {
		return
	}
	c.vcn.mu.Lock()
	s, ok := c.vcn.subnets[id]
	c.vcn.mu.Unlock()
	if !ok {
		notFound(w)
		return
	}
	p := netip.MustParsePrefix(s.CIDR)
	out := core.Subnet{Id: common.String(s.ID), CompartmentId: common.String(s.Compartment), VcnId: common.String(s.VcnID),
		DisplayName: common.String(s.DisplayName), CidrBlock: common.String(s.CIDR), LifecycleState: core.SubnetLifecycleStateAvailable,
		RouteTableId: common.String(strings.Replace(s.VcnID, "ocid1.vcn.", "ocid1.routetable.", 1)), VirtualRouterMac: common.String("00:00:17:00:00:01"),
		VirtualRouterIp: common.String(p.Addr().Next().String()), SecurityListIds: slices.Clone(s.SecurityLists),
		TimeCreated: &common.SDKTime{Time: s.Created}}
	if s.AvailabilityDomain != "" {
		out.AvailabilityDomain = common.String(s.AvailabilityDomain)
	}
	if out.SecurityListIds == nil {
		out.SecurityListIds = []string{}
	}
	w.Header().Set("etag", etagOf(s))
	cloudtest.WriteJSON(w, http.StatusOK, out)
}

func (c *Cloud) wireSecurityList(l SecurityList) core.SecurityList {
	out := core.SecurityList{Id: common.String(l.ID), CompartmentId: common.String(l.Compartment), VcnId: common.String(l.VcnID),
		DisplayName: common.String(l.DisplayName), LifecycleState: core.SecurityListLifecycleStateAvailable,
		TimeCreated: &common.SDKTime{Time: l.Created}, IngressSecurityRules: clone(l.Ingress), EgressSecurityRules: clone(l.Egress)}
	if out.IngressSecurityRules == nil {
		out.IngressSecurityRules = []core.IngressSecurityRule{}
	}
	if out.EgressSecurityRules == nil {
		out.EgressSecurityRules = []core.EgressSecurityRule{}
	}
	return out
}

func (c *Cloud) getSecurityList(w http.ResponseWriter, id string) {
	if c.fault(w, "GetSecurityList") {
		return
	}
	c.vcn.mu.Lock()
	l, ok := c.vcn.lists[id]
	c.vcn.mu.Unlock()
	if !ok {
		notFound(w)
		return
	}
	w.Header().Set("etag", etagOf(l))
	cloudtest.WriteJSON(w, http.StatusOK, c.wireSecurityList(l))
}

func (c *Cloud) updateSecurityList(w http.ResponseWriter, r *http.Request, id string) {
	if c.fault(w, "UpdateSecurityList") {
		return
	}
	var d core.UpdateSecurityListDetails
	if !decodeBody(w, r, &d) {
		return
	}
	if d.DefinedTags != nil {
		ociError(w, http.StatusBadRequest, "InvalidParameter", "definedTags: no tag namespace is defined here")
		return
	}
	if msg := checkListRules(d.IngressSecurityRules, d.EgressSecurityRules); msg != "" {
		ociError(w, http.StatusBadRequest, "InvalidParameter", msg)
		return
	}
	c.vcn.beforeSL.Run(id)
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	l, ok := c.vcn.lists[id]
	if !ok {
		notFound(w)
		return
	}
	if !ifMatch(w, r, "security list", id, etagOf(l)) {
		return
	}
	if d.DisplayName != nil {
		l.DisplayName = *d.DisplayName
	}
	// An absent rule list is left as it is; a present one replaces the
	// list's (OCI's PUT semantics for these arrays).
	if d.IngressSecurityRules != nil {
		l.Ingress = clone(d.IngressSecurityRules)
	}
	if d.EgressSecurityRules != nil {
		l.Egress = clone(d.EgressSecurityRules)
	}
	c.vcn.lists[id] = l
	w.Header().Set("etag", etagOf(l))
	cloudtest.WriteJSON(w, http.StatusOK, c.wireSecurityList(l))
}

// checkRule checks one rule's protocol, address and options: "" when it
// is well formed, else why not.
func checkRule(protocol *string, addr *string, addrName, addrType string, tcp *core.TcpOptions, udp *core.UdpOptions, icmp *core.IcmpOptions, desc *string) string {
	if protocol == nil {
		return "protocol is required"
	}
	switch *protocol {
	case "all", "1", "6", "17", "58":
	default:
		if n, err := strconv.Atoi(*protocol); err != nil || n < 0 || n > 255 {
			return fmt.Sprintf("protocol %q: want all or an IANA protocol number", *protocol)
		}
	}
	if addr == nil || *addr == "" {
		return addrName + " is required"
	}
	switch addrType {
	case "", "CIDR_BLOCK":
		if _, err := netip.ParsePrefix(*addr); err != nil {
			return fmt.Sprintf("%s %q: not a CIDR block", addrName, *addr)
		}
	case "SERVICE_CIDR_BLOCK":
	case "NETWORK_SECURITY_GROUP":
		if !strings.HasPrefix(*addr, "ocid1.networksecuritygroup.") {
			return fmt.Sprintf("%s %q: not an NSG's OCID", addrName, *addr)
		}
	default:
		return fmt.Sprintf("%sType %q: want CIDR_BLOCK, SERVICE_CIDR_BLOCK or NETWORK_SECURITY_GROUP", addrName, addrType)
	}
	if tcp != nil && *protocol != "6" || udp != nil && *protocol != "17" || icmp != nil && *protocol != "1" && *protocol != "58" {
		return fmt.Sprintf("options that do not match protocol %s", *protocol)
	}
	for _, pr := range []*core.PortRange{optRange(tcp, true), optRange(tcp, false), udpRange(udp, true), udpRange(udp, false)} {
		if pr == nil {
			continue
		}
		if pr.Min == nil || pr.Max == nil {
			return "a port range needs min and max"
		}
		if *pr.Min < 1 || *pr.Max > 65535 || *pr.Min > *pr.Max {
			return fmt.Sprintf("port range %d-%d: want 1 <= min <= max <= 65535", *pr.Min, *pr.Max)
		}
	}
	if desc != nil && (len(*desc) < 1 || len(*desc) > maxDescription) {
		return fmt.Sprintf("description: 1 to %d characters", maxDescription)
	}
	return ""
}

func optRange(o *core.TcpOptions, dest bool) *core.PortRange {
	if o == nil {
		return nil
	}
	if dest {
		return o.DestinationPortRange
	}
	return o.SourcePortRange
}

func udpRange(o *core.UdpOptions, dest bool) *core.PortRange {
	if o == nil {
		return nil
	}
	if dest {
		return o.DestinationPortRange
	}
	return o.SourcePortRange
}

func checkListRules(in []core.IngressSecurityRule, out []core.EgressSecurityRule) string {
	for i, r := range in {
		if msg := checkRule(r.Protocol, r.Source, "source", string(r.SourceType), r.TcpOptions, r.UdpOptions, r.IcmpOptions, r.Description); msg != "" {
			return fmt.Sprintf("ingressSecurityRules[%d]: %s", i, msg)
		}
		if r.SourceType == "NETWORK_SECURITY_GROUP" {
			return fmt.Sprintf("ingressSecurityRules[%d]: a security list's rule cannot name an NSG", i)
		}
	}
	for i, r := range out {
		if msg := checkRule(r.Protocol, r.Destination, "destination", string(r.DestinationType), r.TcpOptions, r.UdpOptions, r.IcmpOptions, r.Description); msg != "" {
			return fmt.Sprintf("egressSecurityRules[%d]: %s", i, msg)
		}
		if r.DestinationType == "NETWORK_SECURITY_GROUP" {
			return fmt.Sprintf("egressSecurityRules[%d]: a security list's rule cannot name an NSG", i)
		}
	}
	return ""
}

func (c *Cloud) wireNSG(n NSG) core.NetworkSecurityGroup {
	out := core.NetworkSecurityGroup{Id: common.String(n.ID), CompartmentId: common.String(n.Compartment), VcnId: common.String(n.VcnID),
		LifecycleState: core.NetworkSecurityGroupLifecycleStateAvailable, TimeCreated: &common.SDKTime{Time: n.Created},
		FreeformTags: map[string]string{}, DefinedTags: map[string]map[string]interface{}{}}
	if n.DisplayName != "" {
		out.DisplayName = common.String(n.DisplayName)
	}
	for k, v := range n.FreeformTags {
		out.FreeformTags[k] = v
	}
	return out
}

// nsgEtag is an NSG's etag: of its own fields, not its rules (the rules'
// actions take no If-Match).
func nsgEtag(n NSG) string {
	n.Rules = nil
	return etagOf(n)
}

func (c *Cloud) createNSG(w http.ResponseWriter, r *http.Request) {
	if c.fault(w, "CreateNetworkSecurityGroup") {
		return
	}
	var d core.CreateNetworkSecurityGroupDetails
	if !decodeBody(w, r, &d) {
		return
	}
	switch {
	case d.CompartmentId == nil || *d.CompartmentId == "":
		ociError(w, http.StatusBadRequest, "MissingParameter", "compartmentId is required")
		return
	case d.VcnId == nil || *d.VcnId == "":
		ociError(w, http.StatusBadRequest, "MissingParameter", "vcnId is required")
		return
	case d.DisplayName != nil && len(*d.DisplayName) > MaxNSGDisplayName:
		ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("displayName: longer than %d characters", MaxNSGDisplayName))
		return
	case d.DefinedTags != nil:
		ociError(w, http.StatusBadRequest, "InvalidParameter", "definedTags: no tag namespace is defined here")
		return
	}
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	c.vcn.init()
	if !c.knownVcn(*d.VcnId) {
		ociError(w, http.StatusBadRequest, "RelatedResourceNotAuthorizedOrNotFound", "VCN "+*d.VcnId+" not found or not authorized")
		return
	}
	token := r.Header.Get("opc-retry-token")
	if id, ok := c.vcn.tokens[token]; ok && token != "" {
		n, live := c.vcn.nsgs[id]
		if !live {
			ociError(w, http.StatusConflict, "InvalidatedRetryToken", "the retry token's NSG was deleted; use a new token")
			return
		}
		w.Header().Set("etag", nsgEtag(n))
		cloudtest.WriteJSON(w, http.StatusOK, c.wireNSG(n))
		return
	}
	n := NSG{ID: c.newOCID("networksecuritygroup"), Compartment: *d.CompartmentId, VcnID: *d.VcnId, FreeformTags: clone(d.FreeformTags),
		Created: c.opts.Now().UTC().Truncate(time.Millisecond)}
	if d.DisplayName != nil {
		n.DisplayName = *d.DisplayName
	}
	c.vcn.nsgs[n.ID] = n
	if token != "" {
		c.vcn.tokens[token] = n.ID
	}
	w.Header().Set("etag", nsgEtag(n))
	cloudtest.WriteJSON(w, http.StatusOK, c.wireNSG(n))
}

// knownVcn: a VCN some subnet, security list or NSG is in.
func (c *Cloud) knownVcn(id string) bool {
	for _, s := range c.vcn.subnets {
		if s.VcnID == id {
			return true
		}
	}
	for _, l := range c.vcn.lists {
		if l.VcnID == id {
			return true
		}
	}
	for _, n := range c.vcn.nsgs {
		if n.VcnID == id {
			return true
		}
	}
	return false
}

func (c *Cloud) listNSGs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	comp, vcn, name := q.Get("compartmentId"), q.Get("vcnId"), q.Get("displayName")
	if comp == "" && vcn == "" && q.Get("vlanId") == "" {
		ociError(w, http.StatusBadRequest, "MissingParameter", "compartmentId, vcnId or vlanId is required")
		return
	}
	if s := q.Get("sortBy"); s != "" && s != "TIMECREATED" && s != "DISPLAYNAME" {
		ociError(w, http.StatusBadRequest, "InvalidParameter", "sortBy: want TIMECREATED or DISPLAYNAME")
		return
	}
	if s := q.Get("sortOrder"); s != "" && s != "ASC" && s != "DESC" {
		ociError(w, http.StatusBadRequest, "InvalidParameter", "sortOrder: want ASC or DESC")
		return
	}
	scope := comp + "," + vcn + "," + name
	offset, limit, ok := c.page(w, r, "networkSecurityGroups", scope)
	if !ok {
		return
	}
	if st := c.count("ListNetworkSecurityGroups", offset/max(limit, 1)+1); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	c.vcn.mu.Lock()
	var all []NSG
	for _, n := range c.vcn.nsgs {
		if (comp == "" || n.Compartment == comp) && (vcn == "" || n.VcnID == vcn) && (name == "" || n.DisplayName == name) {
			all = append(all, n)
		}
	}
	c.vcn.mu.Unlock()
	desc := q.Get("sortOrder") == "DESC"
	byName := q.Get("sortBy") == "DISPLAYNAME"
	slices.SortFunc(all, func(a, b NSG) int {
		o := a.Created.Compare(b.Created)
		if byName {
			o = strings.Compare(a.DisplayName, b.DisplayName)
		}
		o = cmp.Or(o, strings.Compare(a.ID, b.ID))
		if desc {
			return -o
		}
		return o
	})
	from, to := min(offset, len(all)), min(offset+limit, len(all))
	items := make([]core.NetworkSecurityGroup, 0, to-from)
	for _, n := range all[from:to] {
		items = append(items, c.wireNSG(n))
	}
	nextPage(w, "networkSecurityGroups", scope, to, len(all))
	cloudtest.WriteJSON(w, http.StatusOK, items)
}

func (c *Cloud) getNSG(w http.ResponseWriter, id string) {
	if c.fault(w, "GetNetworkSecurityGroup") {
		return
	}
	n, ok := c.NSG(id)
	if !ok {
		notFound(w)
		return
	}
	w.Header().Set("etag", nsgEtag(n))
	cloudtest.WriteJSON(w, http.StatusOK, c.wireNSG(n))
}

func (c *Cloud) updateNSG(w http.ResponseWriter, r *http.Request, id string) {
	if c.fault(w, "UpdateNetworkSecurityGroup") {
		return
	}
	var d core.UpdateNetworkSecurityGroupDetails
	if !decodeBody(w, r, &d) {
		return
	}
	if d.DefinedTags != nil {
		ociError(w, http.StatusBadRequest, "InvalidParameter", "definedTags: no tag namespace is defined here")
		return
	}
	if d.DisplayName != nil && len(*d.DisplayName) > MaxNSGDisplayName {
		ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("displayName: longer than %d characters", MaxNSGDisplayName))
		return
	}
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	n, ok := c.vcn.nsgs[id]
	if !ok {
		notFound(w)
		return
	}
	if !ifMatch(w, r, "network security group", id, nsgEtag(n)) {
		return
	}
	if d.DisplayName != nil {
		n.DisplayName = *d.DisplayName
	}
	if d.FreeformTags != nil {
		n.FreeformTags = clone(d.FreeformTags)
	}
	c.vcn.nsgs[id] = n
	w.Header().Set("etag", nsgEtag(n))
	cloudtest.WriteJSON(w, http.StatusOK, c.wireNSG(n))
}

func (c *Cloud) deleteNSG(w http.ResponseWriter, r *http.Request, id string) {
	if c.fault(w, "DeleteNetworkSecurityGroup") {
		return
	}
	c.vcn.mu.Lock()
	n, ok := c.vcn.nsgs[id]
	inUse := c.vcn.inUse
	c.vcn.mu.Unlock()
	if !ok {
		notFound(w)
		return
	}
	if !ifMatch(w, r, "network security group", id, nsgEtag(n)) {
		return
	}
	if inUse != nil && inUse(id) {
		ociError(w, http.StatusConflict, "Conflict", "The network security group "+id+" still has resources attached to it.")
		return
	}
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	delete(c.vcn.nsgs, id)
	// Rules of other NSGs that name it stay, no longer valid (OCI's
	// "Managing Security Rules for an NSG": isValid turns false).
	for oid, o := range c.vcn.nsgs {
		for i, rule := range o.Rules {
			if rule.SourceType == core.SecurityRuleSourceTypeNetworkSecurityGroup && deref(rule.Source) == id ||
				rule.DestinationType == core.SecurityRuleDestinationTypeNetworkSecurityGroup && deref(rule.Destination) == id {
				o.Rules[i].IsValid = common.Bool(false)
			}
		}
		c.vcn.nsgs[oid] = o
	}
	w.WriteHeader(http.StatusNoContent)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (c *Cloud) listNSGRules(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	dir := q.Get("direction")
	if dir != "" && dir != "INGRESS" && dir != "EGRESS" {
		ociError(w, http.StatusBadRequest, "InvalidParameter", "direction: want INGRESS or EGRESS")
		return
	}
	scope := id + "," + dir
	offset, limit, ok := c.page(w, r, "securityRules", scope)
	if !ok {
		return
	}
	if st := c.count("ListNetworkSecurityGroupSecurityRules", offset/max(limit, 1)+1); st != 0 {
		ociError(w, st, codeOf(st), "injected fault")
		return
	}
	n, ok := c.NSG(id)
	if !ok {
		notFound(w)
		return
	}
	var all []core.SecurityRule
	for _, rule := range n.Rules {
		if dir == "" || string(rule.Direction) == dir {
			all = append(all, rule)
		}
	}
	from, to := min(offset, len(all)), min(offset+limit, len(all))
	items := append([]core.SecurityRule{}, all[from:to]...)
	nextPage(w, "securityRules", scope, to, len(all))
	cloudtest.WriteJSON(w, http.StatusOK, items)
}

func (c *Cloud) addNSGRules(w http.ResponseWriter, r *http.Request, id string) {
	if c.fault(w, "AddNetworkSecurityGroupSecurityRules") {
		return
	}
	var d core.AddNetworkSecurityGroupSecurityRulesDetails
	if !decodeBody(w, r, &d) {
		return
	}
	if len(d.SecurityRules) < 1 || len(d.SecurityRules) > MaxNSGRulesPerRequest {
		ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("securityRules: 1 to %d in one request", MaxNSGRulesPerRequest))
		return
	}
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	n, ok := c.vcn.nsgs[id]
	if !ok {
		notFound(w)
		return
	}
	var added []core.SecurityRule
	for i, a := range d.SecurityRules {
		var addr *string
		var addrName, addrType string
		switch a.Direction {
		case core.AddSecurityRuleDetailsDirectionIngress:
			addr, addrName, addrType = a.Source, "source", string(a.SourceType)
			if a.Destination != nil || a.DestinationType != "" {
				ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("securityRules[%d]: an INGRESS rule has no destination", i))
				return
			}
		case core.AddSecurityRuleDetailsDirectionEgress:
			addr, addrName, addrType = a.Destination, "destination", string(a.DestinationType)
			if a.Source != nil || a.SourceType != "" {
				ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("securityRules[%d]: an EGRESS rule has no source", i))
				return
			}
		default:
			ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("securityRules[%d]: direction %q: want INGRESS or EGRESS", i, a.Direction))
			return
		}
		if msg := checkRule(a.Protocol, addr, addrName, addrType, a.TcpOptions, a.UdpOptions, a.IcmpOptions, a.Description); msg != "" {
			ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("securityRules[%d]: %s", i, msg))
			return
		}
		if addrType == "NETWORK_SECURITY_GROUP" {
			if _, ok := c.vcn.nsgs[*addr]; !ok {
				ociError(w, http.StatusBadRequest, "RelatedResourceNotAuthorizedOrNotFound", fmt.Sprintf("securityRules[%d]: NSG %s not found or not authorized", i, *addr))
				return
			}
		}
		rule := core.SecurityRule{Id: common.String(c.vcn.ruleID()), Direction: core.SecurityRuleDirectionEnum(a.Direction), Protocol: a.Protocol,
			Description: a.Description, IsStateless: common.Bool(a.IsStateless != nil && *a.IsStateless), IsValid: common.Bool(true),
			TcpOptions: a.TcpOptions, UdpOptions: a.UdpOptions, IcmpOptions: a.IcmpOptions,
			TimeCreated: &common.SDKTime{Time: c.opts.Now().UTC().Truncate(time.Millisecond)}}
		if a.Direction == core.AddSecurityRuleDetailsDirectionIngress {
			rule.Source, rule.SourceType = a.Source, core.SecurityRuleSourceTypeEnum(cmp.Or(addrType, "CIDR_BLOCK"))
		} else {
			rule.Destination, rule.DestinationType = a.Destination, core.SecurityRuleDestinationTypeEnum(cmp.Or(addrType, "CIDR_BLOCK"))
		}
		added = append(added, rule)
	}
	if len(n.Rules)+len(added) > MaxNSGRules {
		ociError(w, http.StatusBadRequest, "LimitExceeded", fmt.Sprintf("an NSG holds at most %d security rules", MaxNSGRules))
		return
	}
	n.Rules = append(n.Rules, clone(added)...)
	c.vcn.nsgs[id] = n
	cloudtest.WriteJSON(w, http.StatusOK, core.AddedNetworkSecurityGroupSecurityRules{SecurityRules: clone(added)})
}

func (c *Cloud) removeNSGRules(w http.ResponseWriter, r *http.Request, id string) {
	if c.fault(w, "RemoveNetworkSecurityGroupSecurityRules") {
		return
	}
	var d core.RemoveNetworkSecurityGroupSecurityRulesDetails
	if !decodeBody(w, r, &d) {
		return
	}
	if len(d.SecurityRuleIds) < 1 || len(d.SecurityRuleIds) > MaxNSGRulesPerRequest {
		ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("securityRuleIds: 1 to %d in one request", MaxNSGRulesPerRequest))
		return
	}
	c.vcn.mu.Lock()
	defer c.vcn.mu.Unlock()
	n, ok := c.vcn.nsgs[id]
	if !ok {
		notFound(w)
		return
	}
	drop := map[string]bool{}
	for _, rid := range d.SecurityRuleIds {
		if !slices.ContainsFunc(n.Rules, func(r core.SecurityRule) bool { return deref(r.Id) == rid }) {
			ociError(w, http.StatusBadRequest, "InvalidParameter", fmt.Sprintf("security rule %s is not a rule of %s", rid, id))
			return
		}
		drop[rid] = true
	}
	n.Rules = slices.DeleteFunc(n.Rules, func(r core.SecurityRule) bool { return drop[deref(r.Id)] })
	c.vcn.nsgs[id] = n
	w.WriteHeader(http.StatusOK)
}
