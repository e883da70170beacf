package azuretest

import (
	"net/http"
	"testing"
)

// TestNetworkChecks: what the network resource provider refuses is
// refused with its codes: a Basic load balancer, a frontend on a public IP
// that does not exist, a rule naming a probe of no load balancer, two
// frontends on one public IP, a Basic or dynamic public IP, deleting a
// public IP a frontend uses, a NIC naming a pool that does not exist, and
// a security rule's priority out of range.
func TestNetworkChecks(t *testing.T) {
	c := Started(t, Options{})
	vm := c.Put(VM{Name: "n1", PrivateIP: "127.0.84.1"})
	pip, _, err := c.PutPublicIP("", "pip1", nil)
	if err != nil {
		t.Fatal(err)
	}
	lbURL := c.armURL(c.ResourceID("", TypeLoadBalancer, "kubernetes"))
	lbID := c.ResourceID("", TypeLoadBalancer, "kubernetes")
	fe := func(pip string) string {
		return `{"name":"f` + pip[len(pip)-1:] + `","properties":{"publicIPAddress":{"id":"` + pip + `"}}}`
	}
	for body, code := range map[string]string{
		`{"sku":{"name":"Basic"},"properties":{}}`:                                                                                                                   "InvalidLoadBalancerSku",
		`{"sku":{"name":"Standard"},"properties":{"frontendIPConfigurations":[` + fe(pip+"x") + `]}}`:                                                                "InvalidResourceReference",
		`{"sku":{"name":"Standard"},"properties":{"frontendIPConfigurations":[` + fe(pip) + `,{"name":"g","properties":{"publicIPAddress":{"id":"` + pip + `"}}}]}}`: "PublicIPReferencedByMultipleIPConfigs",
		`{"sku":{"name":"Standard"},"properties":{"frontendIPConfigurations":[` + fe(pip) + `],"backendAddressPools":[{"name":"kubernetes"}],"loadBalancingRules":[{"name":"r","properties":{"frontendIPConfiguration":{"id":"` + lbID + `/frontendIPConfigurations/f1"},"backendAddressPool":{"id":"` + lbID + `/backendAddressPools/kubernetes"},"probe":{"id":"` + lbID + `/probes/none"},"protocol":"Tcp","frontendPort":80,"backendPort":30080}}]}}`: "InvalidResourceReference",
		`{"sku":{"name":"Standard"},"properties":{"bogus":1}}`: "InvalidRequestFormat",
	} {
		if resp, b := armDo(t, c, http.MethodPut, lbURL, body); resp.StatusCode != http.StatusBadRequest || errCode(b) != code {
			t.Errorf("%s: %d %v, want 400 %s", body, resp.StatusCode, b, code)
		}
	}
	good := `{"sku":{"name":"Standard"},"properties":{"frontendIPConfigurations":[` + fe(pip) + `],"backendAddressPools":[{"name":"kubernetes"}]}}`
	if resp, b := armDo(t, c, http.MethodPut, lbURL, good); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a good load balancer: %d %v", resp.StatusCode, b)
	}
	if resp, b := armDo(t, c, http.MethodDelete, c.armURL(pip), ""); resp.StatusCode != http.StatusBadRequest || errCode(b) != "PublicIPAddressCannotBeDeleted" {
		t.Errorf("deleting a public IP in use: %d %v", resp.StatusCode, b)
	}
	if resp, b := armDo(t, c, http.MethodPut, c.armURL(c.ResourceID("", TypePublicIP, "dyn")), `{"sku":{"name":"Standard"},"properties":{"publicIPAllocationMethod":"Dynamic"}}`); resp.StatusCode != 400 || errCode(b) != "StandardSkuPublicIPAddressesMustBeStatic" {
		t.Errorf("a dynamic Standard public IP: %d %v", resp.StatusCode, b)
	}
	nic := `{"properties":{"ipConfigurations":[{"name":"ipconfig1","properties":{"privateIPAddress":"127.0.84.1","loadBalancerBackendAddressPools":[{"id":"` + lbID + `/backendAddressPools/nope"}]}}]}}`
	if resp, b := armDo(t, c, http.MethodPut, c.armURL(c.NICID(vm)), nic); resp.StatusCode != 400 || errCode(b) != "InvalidResourceReference" {
		t.Errorf("a NIC naming no pool: %d %v", resp.StatusCode, b)
	}
	nsg := c.armURL(c.ResourceID("", TypeSecurityGroup, "nsg"))
	if resp, b := armDo(t, c, http.MethodPut, nsg, `{"properties":{"securityRules":[{"name":"r","properties":{"protocol":"Tcp","access":"Allow","direction":"Inbound","priority":99,"sourceAddressPrefix":"*","destinationAddressPrefix":"*","sourcePortRange":"*","destinationPortRange":"80"}}]}}`); resp.StatusCode != 400 || errCode(b) != "SecurityRuleInvalidPriority" {
		t.Errorf("priority 99: %d %v", resp.StatusCode, b)
	}
}
