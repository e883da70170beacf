package ocitest

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/oracle/oci-go-sdk/v65/common"
	"github.com/oracle/oci-go-sdk/v65/core"
)

// vcnClient is the real SDK's Virtual Network client over c, and the
// configuration provider it signs with.
func vcnClient(t *testing.T, c *Cloud) (core.VirtualNetworkClient, common.ConfigurationProvider) {
	t.Helper()
	path, err := c.WriteAPIConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := common.ConfigurationProviderFromFileWithProfile(path, "DEFAULT", "")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := core.NewVirtualNetworkClientWithConfigurationProvider(p)
	if err != nil {
		t.Fatal(err)
	}
	nc.Host = c.Endpoint()
	noRetry := common.NoRetryPolicy()
	nc.SetCustomClientConfiguration(common.CustomClientConfiguration{RetryPolicy: &noRetry})
	return nc, p
}

// vcnStatus is an SDK error's HTTP status and OCI code (0 for nil).
func vcnStatus(err error) (int, string) {
	if err == nil {
		return 0, ""
	}
	if se, ok := common.IsServiceError(err); ok {
		return se.GetHTTPStatusCode(), se.GetCode()
	}
	return -1, err.Error()
}

// rawVCN sends a request the SDK's signer signs (edit runs after
// signing): its status and body.
func rawVCN(t *testing.T, c *Cloud, p common.ConfigurationProvider, method, path, body string, edit func(*http.Request)) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.Endpoint()+apiPrefix+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Date", c.opts.Now().UTC().Format(http.TimeFormat))
	if err := common.DefaultRequestSigner(p).Sign(req); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func port(n int) *core.TcpOptions {
	return &core.TcpOptions{DestinationPortRange: &core.PortRange{Min: common.Int(n), Max: common.Int(n)}}
}

func TestSubnetsAndSecurityLists(t *testing.T) {
	c := NewStarted(t, Options{})
	nc, p := vcnClient(t, c)
	ctx := context.Background()
	l := c.PutSecurityList(SecurityList{DisplayName: "default", Ingress: []core.IngressSecurityRule{
		{Source: common.String("127.0.0.0/8"), Protocol: common.String("6"), TcpOptions: port(22)}}})
	s := c.PutSubnet(Subnet{CIDR: "127.85.1.0/24", SecurityLists: []string{l.ID}})

	sub, err := nc.GetSubnet(ctx, core.GetSubnetRequest{SubnetId: common.String(s.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if *sub.CidrBlock != "127.85.1.0/24" || !slices.Equal(sub.SecurityListIds, []string{l.ID}) || *sub.VcnId != l.VcnID || sub.AvailabilityDomain != nil {
		t.Errorf("subnet %+v", sub.Subnet)
	}
	if _, err := nc.GetSubnet(ctx, core.GetSubnetRequest{SubnetId: common.String("ocid1.subnet.oc1.iad.none")}); !isCode(err, 404, "NotAuthorizedOrNotFound") {
		t.Errorf("an unknown subnet: %v", err)
	}

	got, err := nc.GetSecurityList(ctx, core.GetSecurityListRequest{SecurityListId: common.String(l.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if got.Etag == nil || len(got.IngressSecurityRules) != 1 || len(got.EgressSecurityRules) != 0 || got.EgressSecurityRules == nil {
		t.Fatalf("security list %+v, etag %v", got.SecurityList, got.Etag)
	}
	upd := core.UpdateSecurityListRequest{SecurityListId: common.String(l.ID), IfMatch: got.Etag, UpdateSecurityListDetails: core.UpdateSecurityListDetails{
		IngressSecurityRules: append(got.IngressSecurityRules, core.IngressSecurityRule{Source: common.String("127.85.0.0/16"), Protocol: common.String("6"), TcpOptions: port(80)}),
	}}
	resp, err := nc.UpdateSecurityList(ctx, upd)
	if err != nil {
		t.Fatal(err)
	}
	if *resp.Etag == *got.Etag || len(resp.IngressSecurityRules) != 2 {
		t.Errorf("after the update: etag %s (was %s), %d rules", *resp.Etag, *got.Etag, len(resp.IngressSecurityRules))
	}
	// The old etag is stale now.
	if _, err := nc.UpdateSecurityList(ctx, upd); !isCode(err, 412, "NoEtagMatch") {
		t.Errorf("a stale etag: %v", err)
	}
	// Bad rules.
	for name, r := range map[string]core.IngressSecurityRule{
		"no protocol":     {Source: common.String("127.0.0.0/8")},
		"no source":       {Protocol: common.String("6")},
		"bad cidr":        {Source: common.String("127.0.0.0/40"), Protocol: common.String("6")},
		"tcp on udp":      {Source: common.String("127.0.0.0/8"), Protocol: common.String("17"), TcpOptions: port(80)},
		"port 0":          {Source: common.String("127.0.0.0/8"), Protocol: common.String("6"), TcpOptions: port(0)},
		"an NSG's source": {Source: common.String("ocid1.networksecuritygroup.oc1.iad.x"), SourceType: "NETWORK_SECURITY_GROUP", Protocol: common.String("6")},
	} {
		_, err := nc.UpdateSecurityList(ctx, core.UpdateSecurityListRequest{SecurityListId: common.String(l.ID),
			UpdateSecurityListDetails: core.UpdateSecurityListDetails{IngressSecurityRules: []core.IngressSecurityRule{r}}})
		if st, _ := vcnStatus(err); st != 400 {
			t.Errorf("%s: %v, want 400", name, err)
		}
	}
	if l2, _ := c.SecurityList(l.ID); len(l2.Ingress) != 2 {
		t.Errorf("refused updates changed the list: %d rules", len(l2.Ingress))
	}
	// Strict bodies and signed bodies.
	if st, body := rawVCN(t, c, p, http.MethodPut, "securityLists/"+l.ID, `{"ingressSecurityRules":[],"bogus":1}`, nil); st != 400 || !strings.Contains(body, "bogus") {
		t.Errorf("an unknown field: %d %s", st, body)
	}
	if st, body := rawVCN(t, c, p, http.MethodPut, "securityLists/"+l.ID, `{"ingressSecurityRules":[]}`, func(r *http.Request) {
		// As long as the signed one, so that only the digest tells.
		changed := `{"egressSecurityRules": []}`
		r.Body = io.NopCloser(strings.NewReader(changed))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(changed)), nil }
	}); st != 401 || !strings.Contains(body, "NotAuthenticated") {
		t.Errorf("a body changed after signing: %d %s", st, body)
	}
	if st, _ := rawVCN(t, c, p, http.MethodPut, "securityLists/"+l.ID, `{"ingressSecurityRules":[]}`, func(r *http.Request) {
		r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), " content-length content-type x-content-sha256", "", 1))
	}); st != 401 {
		t.Errorf("a PUT signed without the body's headers: %d", st)
	}
	if st, _ := rawVCN(t, c, p, http.MethodDelete, "securityLists/"+l.ID, "", nil); st != 405 {
		t.Errorf("DELETE of a security list: %d, want 405", st)
	}
	// Faults and counters.
	c.Fail("GetSecurityList", 1, 500)
	if _, err := nc.GetSecurityList(ctx, core.GetSecurityListRequest{SecurityListId: common.String(l.ID)}); !isCode(err, 500, "InternalServerError") {
		t.Errorf("an injected fault: %v", err)
	}
	if n := c.Calls("GetSecurityList"); n != 2 {
		t.Errorf("GetSecurityList counted %d, want 2", n)
	}
	if n := c.Calls("UpdateSecurityList"); n != 1+1+6+1 {
		t.Errorf("UpdateSecurityList counted %d", n)
	}
}

func isCode(err error, status int, code string) bool {
	st, cd := vcnStatus(err)
	return st == status && cd == code
}

func TestSubnetOutsideLoopbackRefused(t *testing.T) {
	c := NewStarted(t, Options{})
	for _, cidr := range []string{"10.0.0.0/24", "0.0.0.0/0", "::1/128", "bogus"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("PutSubnet(%s): no panic", cidr)
				}
			}()
			c.PutSubnet(Subnet{CIDR: cidr})
		}()
	}
}

func TestNetworkSecurityGroups(t *testing.T) {
	c := NewStarted(t, Options{MaxPageSize: 1})
	nc, _ := vcnClient(t, c)
	ctx := context.Background()
	s := c.PutSubnet(Subnet{CIDR: "127.85.1.0/24"})
	create := func(name, token string) (core.CreateNetworkSecurityGroupResponse, error) {
		return nc.CreateNetworkSecurityGroup(ctx, core.CreateNetworkSecurityGroupRequest{OpcRetryToken: common.String(token),
			CreateNetworkSecurityGroupDetails: core.CreateNetworkSecurityGroupDetails{CompartmentId: common.String(c.Compartment()),
				VcnId: common.String(s.VcnID), DisplayName: common.String(name), FreeformTags: map[string]string{"CreatedBy": "CCM"}}})
	}
	a, err := create("a", "tok-a")
	if err != nil {
		t.Fatal(err)
	}
	again, err := create("a", "tok-a")
	if err != nil || *again.Id != *a.Id {
		t.Fatalf("a create retried with its token: %v, %v", again.Id, err)
	}
	b, err := create("b", "tok-b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.CreateNetworkSecurityGroup(ctx, core.CreateNetworkSecurityGroupRequest{CreateNetworkSecurityGroupDetails: core.CreateNetworkSecurityGroupDetails{
		CompartmentId: common.String(c.Compartment()), VcnId: common.String("ocid1.vcn.oc1.iad.none")}}); !isCode(err, 400, "RelatedResourceNotAuthorizedOrNotFound") {
		t.Errorf("an unknown VCN: %v", err)
	}
	if _, err := create(strings.Repeat("n", 256), "tok-long"); !isCode(err, 400, "InvalidParameter") {
		t.Errorf("a name of 256 characters: %v", err)
	}

	// Listed by name, a page at a time.
	var names []string
	var page *string
	for range 5 {
		resp, err := nc.ListNetworkSecurityGroups(ctx, core.ListNetworkSecurityGroupsRequest{CompartmentId: common.String(c.Compartment()),
			VcnId: common.String(s.VcnID), Page: page})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range resp.Items {
			names = append(names, *n.DisplayName)
		}
		if page = resp.OpcNextPage; page == nil {
			break
		}
	}
	if slices.Sort(names); !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("listed %v", names)
	}
	byName, err := nc.ListNetworkSecurityGroups(ctx, core.ListNetworkSecurityGroupsRequest{CompartmentId: common.String(c.Compartment()), DisplayName: common.String("b")})
	if err != nil || len(byName.Items) != 1 || *byName.Items[0].Id != *b.Id {
		t.Errorf("by name: %+v, %v", byName.Items, err)
	}
	if _, err := nc.ListNetworkSecurityGroups(ctx, core.ListNetworkSecurityGroupsRequest{}); !isCode(err, 400, "MissingParameter") {
		t.Errorf("a list of no scope: %v", err)
	}

	// Rules: ids given, listed by direction, more than 25 at once refused,
	// an unknown NSG as a peer refused.
	rule := func(dir core.AddSecurityRuleDetailsDirectionEnum, peer string, nsg bool, p int) core.AddSecurityRuleDetails {
		r := core.AddSecurityRuleDetails{Direction: dir, Protocol: common.String("6"), TcpOptions: port(p), Description: common.String("d")}
		if dir == core.AddSecurityRuleDetailsDirectionIngress {
			r.Source = common.String(peer)
			if nsg {
				r.SourceType = core.AddSecurityRuleDetailsSourceTypeNetworkSecurityGroup
			}
		} else {
			r.Destination = common.String(peer)
			if nsg {
				r.DestinationType = core.AddSecurityRuleDetailsDestinationTypeNetworkSecurityGroup
			}
		}
		return r
	}
	add := func(nsg string, rules ...core.AddSecurityRuleDetails) (core.AddNetworkSecurityGroupSecurityRulesResponse, error) {
		return nc.AddNetworkSecurityGroupSecurityRules(ctx, core.AddNetworkSecurityGroupSecurityRulesRequest{NetworkSecurityGroupId: common.String(nsg),
			AddNetworkSecurityGroupSecurityRulesDetails: core.AddNetworkSecurityGroupSecurityRulesDetails{SecurityRules: rules}})
	}
	added, err := add(*b.Id, rule("INGRESS", *a.Id, true, 30080), rule("INGRESS", "127.85.0.0/16", false, 80), rule("EGRESS", *a.Id, true, 10256))
	if err != nil {
		t.Fatal(err)
	}
	if len(added.SecurityRules) != 3 || added.SecurityRules[0].Id == nil || added.SecurityRules[1].SourceType != core.SecurityRuleSourceTypeCidrBlock {
		t.Errorf("added %+v", added.SecurityRules)
	}
	var many []core.AddSecurityRuleDetails
	for i := range 26 {
		many = append(many, rule("INGRESS", "127.85.0.0/16", false, 1000+i))
	}
	if _, err := add(*b.Id, many...); !isCode(err, 400, "InvalidParameter") {
		t.Errorf("26 rules at once: %v", err)
	}
	if _, err := add(*b.Id, rule("INGRESS", "ocid1.networksecuritygroup.oc1.iad.none", true, 1)); !isCode(err, 400, "RelatedResourceNotAuthorizedOrNotFound") {
		t.Errorf("an unknown NSG as the source: %v", err)
	}
	in, err := nc.ListNetworkSecurityGroupSecurityRules(ctx, core.ListNetworkSecurityGroupSecurityRulesRequest{NetworkSecurityGroupId: b.Id,
		Direction: core.ListNetworkSecurityGroupSecurityRulesDirectionIngress, Limit: common.Int(10)})
	if err != nil || len(in.Items) != 1 || in.OpcNextPage == nil {
		t.Fatalf("ingress rules, first page of 1: %d, %v", len(in.Items), err)
	}
	if _, err := nc.RemoveNetworkSecurityGroupSecurityRules(ctx, core.RemoveNetworkSecurityGroupSecurityRulesRequest{NetworkSecurityGroupId: b.Id,
		RemoveNetworkSecurityGroupSecurityRulesDetails: core.RemoveNetworkSecurityGroupSecurityRulesDetails{SecurityRuleIds: []string{"FFFFFF"}}}); !isCode(err, 400, "InvalidParameter") {
		t.Errorf("removing an unknown rule: %v", err)
	}

	if _, err := add(*b.Id); !isCode(err, 400, "InvalidParameter") {
		t.Errorf("no rules: %v", err)
	}
	var ids []string
	for _, r := range added.SecurityRules[1:] {
		ids = append(ids, *r.Id)
	}
	if _, err := nc.RemoveNetworkSecurityGroupSecurityRules(ctx, core.RemoveNetworkSecurityGroupSecurityRulesRequest{NetworkSecurityGroupId: b.Id,
		RemoveNetworkSecurityGroupSecurityRulesDetails: core.RemoveNetworkSecurityGroupSecurityRulesDetails{SecurityRuleIds: ids}}); err != nil {
		t.Fatal(err)
	}
	c.NSGInUse(func(id string) bool { return id == *a.Id })
	if _, err := nc.DeleteNetworkSecurityGroup(ctx, core.DeleteNetworkSecurityGroupRequest{NetworkSecurityGroupId: a.Id}); !isCode(err, 409, "Conflict") {
		t.Errorf("deleting an NSG in use: %v", err)
	}
	c.NSGInUse(nil)

	// Tags with the etag; a stale one refused.
	got, err := nc.GetNetworkSecurityGroup(ctx, core.GetNetworkSecurityGroupRequest{NetworkSecurityGroupId: a.Id})
	if err != nil {
		t.Fatal(err)
	}
	upd := core.UpdateNetworkSecurityGroupRequest{NetworkSecurityGroupId: a.Id, IfMatch: got.Etag,
		UpdateNetworkSecurityGroupDetails: core.UpdateNetworkSecurityGroupDetails{FreeformTags: map[string]string{"ManagedBy": "CCM"}}}
	if _, err := nc.UpdateNetworkSecurityGroup(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.UpdateNetworkSecurityGroup(ctx, upd); !isCode(err, 412, "NoEtagMatch") {
		t.Errorf("a stale etag: %v", err)
	}
	if _, err := nc.DeleteNetworkSecurityGroup(ctx, core.DeleteNetworkSecurityGroupRequest{NetworkSecurityGroupId: a.Id, IfMatch: got.Etag}); !isCode(err, 412, "NoEtagMatch") {
		t.Errorf("a delete with a stale etag: %v", err)
	}
	if _, err := nc.DeleteNetworkSecurityGroup(ctx, core.DeleteNetworkSecurityGroupRequest{NetworkSecurityGroupId: a.Id}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.GetNetworkSecurityGroup(ctx, core.GetNetworkSecurityGroupRequest{NetworkSecurityGroupId: a.Id}); !isCode(err, 404, "NotAuthorizedOrNotFound") {
		t.Errorf("a deleted NSG: %v", err)
	}
	// b's rule naming it stays, no longer valid.
	if bn, _ := c.NSG(*b.Id); len(bn.Rules) != 1 || bn.Rules[0].IsValid == nil || *bn.Rules[0].IsValid {
		t.Errorf("b's rules after a's deletion: %+v", bn.Rules)
	}
	// Its create's token is spent.
	if _, err := create("a", "tok-a"); !isCode(err, 409, "InvalidatedRetryToken") {
		t.Errorf("the token of a deleted NSG: %v", err)
	}
	for _, m := range []string{"CreateNetworkSecurityGroup", "ListNetworkSecurityGroups", "AddNetworkSecurityGroupSecurityRules",
		"RemoveNetworkSecurityGroupSecurityRules", "DeleteNetworkSecurityGroup", "GetNetworkSecurityGroup", "UpdateNetworkSecurityGroup",
		"ListNetworkSecurityGroupSecurityRules"} {
		if c.Calls(m) == 0 {
			t.Errorf("%s not counted", m)
		}
	}
}
