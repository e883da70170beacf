package gcetest

import (
	"net/http"
	"reflect"

	compute "google.golang.org/api/compute/v1"
)

// Reads the upstream GCE provider makes besides its load balancers' own
// (lb.go's doc): a zone's instances (instances.list, for the Nodes behind a
// target pool), a region, a network and its subnetworks. Networks and
// subnetworks are not stored: every project has the network "default"
// (custom mode, so that a client picks no subnetwork by itself) and, in
// every region of its zones, the subnetwork "default" on the data plane's
// prefix.
func init() {
	handle(http.MethodGet, `zones/([^/]+)/instances`, (*Cloud).serveInstanceList)
	handle(http.MethodGet, `regions/([^/]+)`, (*Cloud).serveRegionGet)
	handle(http.MethodGet, `global/networks/([^/]+)`, (*Cloud).serveNetworkGet)
	handle(http.MethodGet, `regions/([^/]+)/subnetworks`, (*Cloud).serveSubnetworkList)
	handle(http.MethodGet, `regions/([^/]+)/subnetworks/([^/]+)`, (*Cloud).serveSubnetworkGet)
}

func (c *Cloud) serveInstanceList(w http.ResponseWriter, r *http.Request, m []string) {
	project, zone := m[1], m[2]
	if !c.call(w, "instances.list", project) {
		return
	}
	self := scopeURL(project, "zones/"+zone) + "/instances"
	lq, aerr := c.parseListQuery(r, self, reflect.TypeFor[compute.Instance]())
	if aerr != nil {
		aerr.write(w)
		return
	}
	var all []compute.Instance
	for _, in := range c.instances.List(func(in *Instance) bool { return in.Project == project && in.Zone == zone }) {
		all = append(all, *wire(in))
	}
	items, next := page(lq, all, func(in *compute.Instance) string { return in.Name })
	writeList(w, "compute#instanceList", self, items, next)
}

// regionZones are the zones of a region the project sees.
func (c *Cloud) regionZones(project, region string) []string {
	var out []string
	for _, z := range c.zones(project) {
		if zoneRegion(z.Name) == region {
			out = append(out, z.SelfLink)
		}
	}
	return out
}

func (c *Cloud) serveRegionGet(w http.ResponseWriter, r *http.Request, m []string) {
	project, region := m[1], m[2]
	if !c.call(w, "regions.get", project) {
		return
	}
	zones := c.regionZones(project, region)
	if len(zones) == 0 {
		notFound("projects/" + project + "/regions/" + region).write(w)
		return
	}
	writeJSON(w, http.StatusOK, &compute.Region{Kind: "compute#region", Name: region, Status: "UP", Zones: zones,
		Id: uint64(projectNumber(region)), SelfLink: scopeURL(project, "regions/"+region)})
}

func (c *Cloud) serveNetworkGet(w http.ResponseWriter, r *http.Request, m []string) {
	project, name := m[1], m[2]
	if !c.call(w, "networks.get", project) {
		return
	}
	if name != "default" {
		notFound("projects/" + project + "/global/networks/" + name).write(w)
		return
	}
	self := scopeURL(project, "global") + "/networks/default"
	n := &compute.Network{Kind: "compute#network", Name: name, SelfLink: self, Id: uint64(projectNumber(project + "/default")),
		AutoCreateSubnetworks: false, ForceSendFields: []string{"AutoCreateSubnetworks"}}
	for _, z := range c.zones(project) {
		link := scopeURL(project, "regions/"+zoneRegion(z.Name)) + "/subnetworks/default"
		if len(n.Subnetworks) == 0 || n.Subnetworks[len(n.Subnetworks)-1] != link {
			n.Subnetworks = append(n.Subnetworks, link)
		}
	}
	writeJSON(w, http.StatusOK, n)
}

func (c *Cloud) subnetwork(project, region string) compute.Subnetwork {
	return compute.Subnetwork{Kind: "compute#subnetwork", Name: "default", Region: scopeURL(project, "regions/"+region),
		Network: scopeURL(project, "global") + "/networks/default", IpCidrRange: DataPlanePrefix.String(),
		GatewayAddress: "127.86.0.1", Id: uint64(projectNumber(project + "/" + region)),
		SelfLink: scopeURL(project, "regions/"+region) + "/subnetworks/default"}
}

func (c *Cloud) serveSubnetworkList(w http.ResponseWriter, r *http.Request, m []string) {
	project, region := m[1], m[2]
	if !c.call(w, "subnetworks.list", project) {
		return
	}
	self := scopeURL(project, "regions/"+region) + "/subnetworks"
	lq, aerr := c.parseListQuery(r, self, reflect.TypeFor[compute.Subnetwork]())
	if aerr != nil {
		aerr.write(w)
		return
	}
	var all []compute.Subnetwork
	if len(c.regionZones(project, region)) > 0 {
		all = append(all, c.subnetwork(project, region))
	}
	items, next := page(lq, all, func(s *compute.Subnetwork) string { return s.Name })
	writeList(w, "compute#subnetworkList", self, items, next)
}

func (c *Cloud) serveSubnetworkGet(w http.ResponseWriter, r *http.Request, m []string) {
	project, region, name := m[1], m[2], m[3]
	if !c.call(w, "subnetworks.get", project) {
		return
	}
	if name != "default" || len(c.regionZones(project, region)) == 0 {
		notFound("projects/" + project + "/regions/" + region + "/subnetworks/" + name).write(w)
		return
	}
	writeJSON(w, http.StatusOK, c.subnetwork(project, region))
}
