package openstack

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/openstack/agentid"
	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/csrapprover/approvertest"
)

const servingWait = 5 * time.Second

// A project member can set any server's accessIPv4 and its metadata item
// hostname to another node's IP or name; the approver used to certify a
// kubelet for every address the server lists. By default now only Nova's
// addresses (Neutron's) and the Node's name back SANs; trustedAddressSources
// opts the others in.
func TestServingDoesNotTrustWhatTenantsSet(t *testing.T) {
	w := newWorld(t, openstacktest.Options{}, nil)
	a := approvertest.Start(t, w.cloud)
	s := w.os.Put(openstacktest.Server{Name: "app-1", Tags: []string{testTag},
		Addresses:  []openstacktest.Address{{Addr: "127.0.93.1"}, {Addr: "127.0.93.101", Floating: true}},
		AccessIPv4: "127.0.93.201", Metadata: map[string]string{"hostname": "app-1.corp.example"}})
	a.Node("app-1", agentid.ProviderID("", s.ID))
	for _, c := range []struct {
		sans []string
		want string
	}{
		{[]string{"app-1", "127.0.93.1", "127.0.93.101"}, csrapprover.ReasonApproved},
		{[]string{"127.0.93.201"}, csrapprover.ReasonSANAsserted},
		{[]string{"app-1.corp.example"}, csrapprover.ReasonSANAsserted},
	} {
		if got := a.Serve(servingWait, "app-1", c.sans...); got != c.want {
			t.Errorf("serving %v: %q, want %q", c.sans, got, c.want)
		}
	}

	// accessIPv4 set to the floating IP (as is common): Neutron assigned
	// it, so it backs a SAN whoever else names it.
	s3 := w.os.Put(openstacktest.Server{Name: "app-3", Tags: []string{testTag},
		Addresses:  []openstacktest.Address{{Addr: "127.0.93.3"}, {Addr: "127.0.93.103", Floating: true}},
		AccessIPv4: "127.0.93.103"})
	a.Node("app-3", agentid.ProviderID("", s3.ID))
	if got := a.Serve(servingWait, "app-3", "127.0.93.103"); got != csrapprover.ReasonApproved {
		t.Errorf("serving the floating IP that accessIPv4 repeats: %q", got)
	}

	trusting := newWorld(t, openstacktest.Options{}, func(c *Config) {
		c.TrustedAddressSources = []string{SourceAccessIPv4, SourceHostnameMetadata}
	})
	b := approvertest.Start(t, trusting.cloud)
	s2 := trusting.os.Put(openstacktest.Server{Name: "app-2", Tags: []string{testTag},
		Addresses:  []openstacktest.Address{{Addr: "127.0.93.2"}},
		AccessIPv4: "127.0.93.202", Metadata: map[string]string{"hostname": "app-2.corp.example"}})
	b.Node("app-2", agentid.ProviderID("", s2.ID))
	if got := b.Serve(servingWait, "app-2", "127.0.93.202", "app-2.corp.example"); got != csrapprover.ReasonApproved {
		t.Errorf("serving with accessIPv4 and the hostname item trusted: %q", got)
	}
}

// With accessIPv4 and the hostname item trusted, a member who sets them on
// one server to another server's fixed IP and Node name gets no
// certificate for them, and the owner none either while the claim stands.
func TestServingForAnotherServersAddressIsDenied(t *testing.T) {
	w := newWorld(t, openstacktest.Options{}, func(c *Config) {
		c.TrustedAddressSources = []string{SourceAccessIPv4, SourceHostnameMetadata}
	})
	a := approvertest.Start(t, w.cloud)
	victim := w.os.Put(openstacktest.Server{Name: "victim", Tags: []string{testTag}, Addresses: []openstacktest.Address{{Addr: "127.0.93.11"}}})
	evil := w.os.Put(openstacktest.Server{Name: "evil", Tags: []string{testTag}, Addresses: []openstacktest.Address{{Addr: "127.0.93.12"}},
		AccessIPv4: "127.0.93.11", Metadata: map[string]string{"hostname": "victim"}})
	a.Node("victim", agentid.ProviderID("", victim.ID), v1.NodeAddress{Type: v1.NodeInternalIP, Address: "127.0.93.11"})
	a.Node("evil", agentid.ProviderID("", evil.ID))
	for _, c := range []struct {
		node string
		sans []string
	}{
		{"evil", []string{"127.0.93.11"}},
		{"evil", []string{"victim"}},
		{"victim", []string{"127.0.93.11"}},
	} {
		if got := a.Serve(servingWait, c.node, c.sans...); got != csrapprover.ReasonAddressClaimedTwice {
			t.Errorf("%s serving %v: %q, want %q", c.node, c.sans, got, csrapprover.ReasonAddressClaimedTwice)
		}
	}
	if got := a.Serve(servingWait, "evil", "evil", "127.0.93.12"); got != csrapprover.ReasonApproved {
		t.Errorf("evil's own name and fixed IP: %q", got)
	}
}
