package linodetest

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MethodVPCGet counts the VPC reads (GET /v4/vpcs, .../{id}/subnets,
// .../{id}/ips), for Calls and Fail.
const MethodVPCGet = "vpc-get"

// ScopeVPCReadOnly is the scope the VPC reads accept.
const ScopeVPCReadOnly = "vpc:read_only"

const vpcPath = "/v4/vpcs"

// VPC is a VPC as the endpoint holds it: made by the test (PutVPC), with
// its subnets; Linodes get addresses in them with AddVPCAddress.
type VPC struct {
	ID      int
	Label   string
	Region  string
	Subnets []Subnet
	Created time.Time
}

// Subnet is a VPC's subnet: IPv4 is its range. Here its addresses are on
// loopback, so that the data plane reaches them.
type Subnet struct {
	ID    int
	Label string
	IPv4  string
}

// vpcAddress is a Linode's address in a subnet.
type vpcAddress struct {
	linodeID, vpcID, subnetID int
	address                   string
}

// vpcState is the endpoint's VPCs, under its own lock (the NodeBalancer
// checks read it under c.mu and without).
type vpcState struct {
	mu    sync.Mutex
	vpcs  []VPC
	addrs []vpcAddress
}

// PutVPC adds a VPC and its subnets (ids assigned; region default
// DefaultRegion); a subnet's IPv4 must be a loopback range.
func (c *Cloud) PutVPC(v VPC) VPC {
	c.mu.Lock()
	v.ID = c.nextID()
	v.Subnets = slices.Clone(v.Subnets)
	for i := range v.Subnets {
		v.Subnets[i].ID = c.nextID()
	}
	c.mu.Unlock()
	v.Region = cmpOr(v.Region, DefaultRegion)
	v.Created = c.opts.Now().UTC().Truncate(time.Second)
	for _, s := range v.Subnets {
		if p, err := netip.ParsePrefix(s.IPv4); err != nil || !p.Addr().IsLoopback() {
			panic(fmt.Sprintf("linodetest: subnet %s: %q is not a loopback range", s.Label, s.IPv4))
		}
	}
	c.nb.vpc.mu.Lock()
	defer c.nb.vpc.mu.Unlock()
	c.nb.vpc.vpcs = append(c.nb.vpc.vpcs, v)
	return v
}

// AddVPCAddress gives Linode linodeID the address in subnet subnetID (as
// its VPC interface's): an error when there is no such subnet or the
// address is not in its range.
func (c *Cloud) AddVPCAddress(linodeID, subnetID int, address string) error {
	c.nb.vpc.mu.Lock()
	defer c.nb.vpc.mu.Unlock()
	for _, v := range c.nb.vpc.vpcs {
		for _, s := range v.Subnets {
			if s.ID != subnetID {
				continue
			}
			a, err := netip.ParseAddr(address)
			if err != nil || !netip.MustParsePrefix(s.IPv4).Contains(a) {
				return fmt.Errorf("linodetest: %q is not an address of subnet %s (%s)", address, s.Label, s.IPv4)
			}
			c.nb.vpc.addrs = append(c.nb.vpc.addrs, vpcAddress{linodeID: linodeID, vpcID: v.ID, subnetID: subnetID, address: a.String()})
			return nil
		}
	}
	return fmt.Errorf("linodetest: no subnet %d", subnetID)
}

// subnetExists: a subnet of the account's VPCs.
func (c *Cloud) subnetExists(id int) bool {
	c.nb.vpc.mu.Lock()
	defer c.nb.vpc.mu.Unlock()
	for _, v := range c.nb.vpc.vpcs {
		if slices.ContainsFunc(v.Subnets, func(s Subnet) bool { return s.ID == id }) {
			return true
		}
	}
	return false
}

// inSubnet: ip is a Linode's address in subnet id.
func (c *Cloud) inSubnet(ip string, id int) bool {
	c.nb.vpc.mu.Lock()
	defer c.nb.vpc.mu.Unlock()
	return slices.ContainsFunc(c.nb.vpc.addrs, func(a vpcAddress) bool { return a.subnetID == id && a.address == ip })
}

// serveVPCs routes GET /v4/vpcs, /v4/vpcs/{id}/subnets and
// /v4/vpcs/{id}/ips (each its one page).
func (c *Cloud) serveVPCs(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(AcceptedScopesHeader, ScopeVPCReadOnly)
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "", "linodetest serves only GET on VPCs")
		return
	}
	if st := c.count(MethodVPCGet, 0); st != 0 {
		writeError(w, st, "", "injected fault")
		return
	}
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, vpcPath), "/")
	c.nb.vpc.mu.Lock()
	defer c.nb.vpc.mu.Unlock()
	if rest == "" {
		var out []wireVPC
		for _, v := range c.nb.vpc.vpcs {
			out = append(out, c.wireVPC(v))
		}
		page(w, out)
		return
	}
	parts := strings.Split(rest, "/")
	id, err := strconv.Atoi(parts[0])
	i := slices.IndexFunc(c.nb.vpc.vpcs, func(v VPC) bool { return v.ID == id })
	if err != nil || i < 0 || len(parts) != 2 {
		writeError(w, http.StatusNotFound, "", "Not found")
		return
	}
	v := c.nb.vpc.vpcs[i]
	switch parts[1] {
	case "subnets":
		page(w, c.wireVPC(v).Subnets)
	case "ips":
		var out []wireVPCIP
		for _, a := range c.nb.vpc.addrs {
			if a.vpcID != v.ID {
				continue
			}
			addr := a.address
			s := v.Subnets[slices.IndexFunc(v.Subnets, func(s Subnet) bool { return s.ID == a.subnetID })]
			p := netip.MustParsePrefix(s.IPv4)
			out = append(out, wireVPCIP{Address: &addr, LinodeID: a.linodeID, VPCID: v.ID, SubnetID: a.subnetID, Region: v.Region,
				Active: true, Prefix: p.Bits(), Gateway: p.Addr().Next().String()})
		}
		page(w, out)
	default:
		writeError(w, http.StatusNotFound, "", "Not found")
	}
}

type wireVPC struct {
	ID          int          `json:"id"`
	Label       string       `json:"label"`
	Description string       `json:"description"`
	Region      string       `json:"region"`
	Subnets     []wireSubnet `json:"subnets"`
	Created     string       `json:"created"`
	Updated     string       `json:"updated"`
}

type wireSubnet struct {
	ID            int                  `json:"id"`
	Label         string               `json:"label"`
	IPv4          string               `json:"ipv4"`
	Linodes       []wireSubnetLinode   `json:"linodes"`
	Nodebalancers []wireSubnetEntityID `json:"nodebalancers"`
	Databases     []wireSubnetEntityID `json:"databases"`
	Created       string               `json:"created"`
	Updated       string               `json:"updated"`
}

type wireSubnetLinode struct {
	ID int `json:"id"`
}

type wireSubnetEntityID struct {
	ID int `json:"id"`
}

type wireVPCIP struct {
	Address  *string `json:"address"`
	Gateway  string  `json:"gateway"`
	Prefix   int     `json:"prefix"`
	LinodeID int     `json:"linode_id"`
	Region   string  `json:"region"`
	Active   bool    `json:"active"`
	VPCID    int     `json:"vpc_id"`
	SubnetID int     `json:"subnet_id"`
}

// wireVPC shows v (under c.nb.vpc.mu).
func (c *Cloud) wireVPC(v VPC) wireVPC {
	t := v.Created.UTC().Format(timeLayout)
	out := wireVPC{ID: v.ID, Label: v.Label, Region: v.Region, Created: t, Updated: t, Subnets: []wireSubnet{}}
	for _, s := range v.Subnets {
		ws := wireSubnet{ID: s.ID, Label: s.Label, IPv4: s.IPv4, Created: t, Updated: t, Linodes: []wireSubnetLinode{},
			Nodebalancers: []wireSubnetEntityID{}, Databases: []wireSubnetEntityID{}}
		for _, a := range c.nb.vpc.addrs {
			if a.subnetID == s.ID && !slices.Contains(ws.Linodes, wireSubnetLinode{ID: a.linodeID}) {
				ws.Linodes = append(ws.Linodes, wireSubnetLinode{ID: a.linodeID})
			}
		}
		out.Subnets = append(out.Subnets, ws)
	}
	return out
}

// vpcBody is a NodeBalancer create's vpcs entry.
type vpcBody struct {
	SubnetID            int    `json:"subnet_id"`
	IPv4Range           string `json:"ipv4_range"`
	IPv6Range           string `json:"ipv6_range"`
	IPv4RangeAutoAssign bool   `json:"ipv4_range_auto_assign"`
}

// NBVPC is a NodeBalancer's backend VPC configuration: its subnet and the
// range of its own addresses there ("" for one the API picks).
type NBVPC struct {
	ID        int
	SubnetID  int
	IPv4Range string
}

// checkVPCs checks a create's vpcs: one entry, a subnet of the account's,
// an IPv4 range in CIDR form; IPv6 and auto-assign are not modelled.
func (c *Cloud) checkVPCs(bs []vpcBody) ([]NBVPC, *invalid) {
	if len(bs) > 1 {
		return nil, bad("vpcs", "linodetest models one backend VPC subnet")
	}
	var out []NBVPC
	for i, b := range bs {
		f := fmt.Sprintf("vpcs[%d].", i)
		switch {
		case !c.subnetExists(b.SubnetID):
			return nil, bad(f+"subnet_id", "Subnet not found")
		case b.IPv6Range != "" || b.IPv4RangeAutoAssign:
			return nil, bad(f+"ipv6_range", "linodetest does not model this field")
		}
		if b.IPv4Range != "" {
			if p, err := netip.ParsePrefix(b.IPv4Range); err != nil || !p.Addr().Is4() || p.Masked() != p {
				return nil, bad(f+"ipv4_range", "Must be an IPv4 range in CIDR notation")
			}
		}
		out = append(out, NBVPC{SubnetID: b.SubnetID, IPv4Range: b.IPv4Range})
	}
	return out, nil
}

// checkNodeSubnets: every node of cf with a subnet_id is in a subnet n has
// a VPC configuration of (made with it: the create's vpcs).
func checkNodeSubnets(prefix string, n *NodeBalancer, cf NBConfig) *invalid {
	for i, nd := range cf.Nodes {
		if nd.SubnetID != 0 && !slices.ContainsFunc(n.VPCs, func(v NBVPC) bool { return v.SubnetID == nd.SubnetID }) {
			return bad(fmt.Sprintf("%snodes[%d].subnet_id", prefix, i), "The NodeBalancer has no VPC configuration of subnet %d", nd.SubnetID)
		}
	}
	return nil
}

// vpcConfigID is the id of n's VPC configuration of subnet (nil without).
func vpcConfigID(n NodeBalancer, subnet int) *int {
	for _, v := range n.VPCs {
		if v.SubnetID == subnet && subnet != 0 {
			id := v.ID
			return &id
		}
	}
	return nil
}
