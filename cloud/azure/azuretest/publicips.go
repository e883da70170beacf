package azuretest

import (
	"net/http"
	"strings"
)

// Public IP addresses of load balancer frontends
// (Microsoft.Network/publicIPAddresses written through ARM): SKU Standard,
// allocation Static, IPv4; the address is given at the PUT (on the data
// plane's prefix) and kept while the resource exists. One still named by a
// load balancer's frontend is not deleted (400 PublicIPAddressCannotBeDeleted).
// The VMs' own public IPs (server.go) are listed with them.

var pipProps = []string{"publicIPAllocationMethod", "publicIPAddressVersion", "ipAddress", "idleTimeoutInMinutes", "dnsSettings", "ipConfiguration", "provisioningState", "resourceGuid", "ipTags"}

func checkPIP(c *Cloud, id string, body, old map[string]any) *ARMError {
	if sku := str(m(body, "sku"), "name"); sku != "Standard" {
		return BadRequest("InvalidPublicIPAddressSku", "Public IP address %s: SKU %q; this endpoint models Standard public IPs only.", id, sku)
	}
	props := m(body, "properties")
	if props == nil {
		props = map[string]any{}
		body["properties"] = props
	}
	if e := allowed("PublicIPAddressPropertiesFormat", props, pipProps...); e != nil {
		return e
	}
	if a := str(props, "publicIPAllocationMethod"); a != "Static" {
		return BadRequest("StandardSkuPublicIPAddressesMustBeStatic", "Standard sku publicIp %s must have AllocationMethod set to Static.", id)
	}
	if v := str(props, "publicIPAddressVersion"); v != "" && v != "IPv4" {
		return BadRequest("InvalidPublicIPAddressVersion", "Public IP address %s: version %q; this endpoint models IPv4 only.", id, v)
	}
	addr := str(m(old, "properties"), "ipAddress")
	if want := str(props, "ipAddress"); want != "" && want != addr {
		return BadRequest("InvalidRequestFormat", "Public IP address %s: ipAddress is read-only.", id)
	}
	if addr == "" {
		var err error
		if addr, err = c.lbs.dp.Serve(strings.ToLower(id), nil, nil); err != nil {
			return &ARMError{Status: http.StatusInternalServerError, Code: "InternalServerError", Message: err.Error()}
		}
	}
	props["ipAddress"] = addr
	props["publicIPAddressVersion"] = "IPv4"
	if user := c.pipUser(id); user != "" {
		props["ipConfiguration"] = map[string]any{"id": user}
	} else {
		delete(props, "ipConfiguration")
	}
	return nil
}

// pipUser is the id of the load balancer frontend that names pip, "" when
// none does.
func (c *Cloud) pipUser(pip string) string {
	for _, l := range c.ARMList(TypeLoadBalancer) {
		for _, f := range list(m(l, "properties"), "frontendIPConfigurations") {
			if strings.EqualFold(refID(m(f, "properties"), "publicIPAddress"), pip) {
				return str(f, "id")
			}
		}
	}
	return ""
}

func canDeletePIP(c *Cloud, id string) *ARMError {
	if user := c.pipUser(id); user != "" {
		return BadRequest("PublicIPAddressCannotBeDeleted", "Public IP address %s can not be deleted since it is still allocated to resource %s.", id, user)
	}
	return nil
}

// vmPublicIPs are the VMs' public IPs in the cloud's resource group's
// list.
func vmPublicIPs(c *Cloud, prefix string) []any {
	if !strings.HasPrefix(prefix, strings.ToLower(c.rgID())+"/") {
		return nil
	}
	var items []any
	for _, vm := range c.sortedVMs() {
		if vm.ScaleSet == "" && vm.PublicIP != "" {
			items = append(items, c.publicIPJSON(vm))
		}
	}
	return items
}

// PublicIPs are the public IPs written through ARM.
func (c *Cloud) PublicIPs() []map[string]any { return c.ARMList(TypePublicIP) }

// PutPublicIP stores a public IP as another tool made it (Standard,
// Static, its address given), Succeeded; it returns its id and address.
func (c *Cloud) PutPublicIP(rg, name string, tags map[string]string) (id, addr string, err error) {
	id = c.ResourceID(rg, TypePublicIP, name)
	tg := map[string]any{}
	for k, v := range tags {
		tg[k] = v
	}
	body := map[string]any{"sku": map[string]any{"name": "Standard"}, "tags": tg,
		"properties": map[string]any{"publicIPAllocationMethod": "Static"}}
	if e := checkPIP(c, id, body, nil); e != nil {
		return "", "", e
	}
	c.ARMPut(TypePublicIP, id, body)
	return id, str(m(body, "properties"), "ipAddress"), nil
}
