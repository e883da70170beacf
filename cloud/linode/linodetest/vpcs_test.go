package linodetest

import (
	"context"
	"testing"

	"github.com/linode/linodego"
)

// VPCs as linodego reads them (the list with their subnets, a VPC's
// addresses), and a NodeBalancer with VPC backends: the create's vpcs of a
// subnet of the account's, nodes sent with a subnet_id of it at an
// address of a Linode in it; each otherwise a 400 naming the field.
func TestVPCsWithLinodego(t *testing.T) {
	c := NewStarted(t, Options{})
	in := c.Put(Instance{Label: "web-1", PublicIP: "127.0.96.1", PrivateIP: "127.0.95.1"})
	v := c.PutVPC(VPC{Label: "vpc-1", Subnets: []Subnet{{Label: "default", IPv4: "127.0.99.0/24"}, {Label: "b", IPv4: "127.0.100.0/24"}}})
	sub, other := v.Subnets[0].ID, v.Subnets[1].ID
	if err := c.AddVPCAddress(in.ID, sub, "127.0.99.5"); err != nil {
		t.Fatal(err)
	}
	if err := c.AddVPCAddress(in.ID, sub, "127.0.100.5"); err == nil {
		t.Fatal("an address outside its subnet was added")
	}
	lc := client(t, c, c.Token())
	ctx := context.Background()
	vpcs, err := lc.ListVPCs(ctx, nil)
	if err != nil || len(vpcs) != 1 || vpcs[0].Label != "vpc-1" || len(vpcs[0].Subnets) != 2 || vpcs[0].Subnets[0].IPv4 != "127.0.99.0/24" {
		t.Fatalf("VPCs %+v, %v", vpcs, err)
	}
	ips, err := lc.ListVPCIPAddresses(ctx, v.ID, nil)
	if err != nil || len(ips) != 1 || *ips[0].Address != "127.0.99.5" || ips[0].LinodeID != in.ID || ips[0].SubnetID != sub {
		t.Fatalf("VPC addresses %+v, %v", ips, err)
	}
	create := func(vpcs []linodego.NodeBalancerVPCOptions, addr string, subnet int) error {
		cf := linodego.NodeBalancerConfigCreateOptions{Port: 80, Protocol: "tcp",
			Nodes: []linodego.NodeBalancerNodeCreateOptions{{Address: addr, Label: "node-1", SubnetID: subnet}}}
		_, err := lc.CreateNodeBalancer(ctx, linodego.NodeBalancerCreateOptions{Region: "us-east", VPCs: vpcs,
			Configs: []*linodego.NodeBalancerConfigCreateOptions{&cf}})
		return err
	}
	for _, tc := range []struct {
		name   string
		vpcs   []linodego.NodeBalancerVPCOptions
		addr   string
		subnet int
		field  string
	}{
		{"unknown subnet", []linodego.NodeBalancerVPCOptions{{SubnetID: 424242}}, "127.0.99.5:30080", sub, "vpcs[0].subnet_id"},
		{"bad range", []linodego.NodeBalancerVPCOptions{{SubnetID: sub, IPv4Range: "127.0.99.1/30"}}, "127.0.99.5:30080", sub, "vpcs[0].ipv4_range"},
		{"node of another subnet", []linodego.NodeBalancerVPCOptions{{SubnetID: sub}}, "127.0.99.5:30080", other, "configs[0].nodes[0].address"},
		{"no VPC config of the node's subnet", nil, "127.0.99.5:30080", sub, "configs[0].nodes[0].subnet_id"},
		{"a private address in a subnet", []linodego.NodeBalancerVPCOptions{{SubnetID: sub}}, "127.0.95.1:30080", sub, "configs[0].nodes[0].address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := create(tc.vpcs, tc.addr, tc.subnet)
			if st, field := apiErr(err); st != 400 || field != tc.field {
				t.Fatalf("create: %v, want a 400 naming %s", err, tc.field)
			}
		})
	}
	if len(c.NodeBalancers()) != 0 {
		t.Fatal("a NodeBalancer was made")
	}
	if err := create([]linodego.NodeBalancerVPCOptions{{SubnetID: sub, IPv4Range: "127.0.99.252/30"}}, "127.0.99.5:30080", sub); err != nil {
		t.Fatal(err)
	}
	nb := c.NodeBalancers()[0]
	nodes, err := lc.ListNodeBalancerNodes(ctx, nb.ID, nb.Configs[0].ID, nil)
	if err != nil || len(nodes) != 1 || nodes[0].VPCConfigID != nb.VPCs[0].ID {
		t.Fatalf("nodes %+v, %v (VPC config %+v)", nodes, err, nb.VPCs)
	}
}
