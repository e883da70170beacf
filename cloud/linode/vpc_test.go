package linode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/linode/agentid"
	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
)

// vpcWorld is lbWorld on a cluster configured with the VPC cluster-vpc
// (subnets default, 127.0.99.0/24, and other, 127.0.100.0/24), each Linode
// holding an address in both.
func vpcWorld(t *testing.T) (*world, cloud.LoadBalancerInventory, []*v1.Node, linodetest.VPC) {
	t.Helper()
	w := newWorld(t, linodetest.Options{}, func(c *Config) { c.VPCNames = []string{"cluster-vpc"} })
	vpc := w.ln.PutVPC(linodetest.VPC{Label: "cluster-vpc", Subnets: []linodetest.Subnet{
		{Label: "default", IPv4: "127.0.99.0/24"}, {Label: "other", IPv4: "127.0.100.0/24"}}})
	w.ln.PutVPC(linodetest.VPC{Label: "elsewhere", Subnets: []linodetest.Subnet{{Label: "default", IPv4: "127.0.101.0/24"}}})
	var nodes []*v1.Node
	for i := 1; i <= 2; i++ {
		in := w.add(fmt.Sprintf("lb-%d", i), 40+i)
		for j, s := range vpc.Subnets {
			if err := w.ln.AddVPCAddress(in.ID, s.ID, fmt.Sprintf("127.0.%d.%d", 99+j, 10+i)); err != nil {
				t.Fatal(err)
			}
		}
		n := node(agentid.NodeName(in.Label), agentid.ProviderID(in.ID))
		n.Labels = map[string]string{v1.LabelTopologyRegion: "eu-central"}
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: in.PrivateIP}, {Type: v1.NodeExternalIP, Address: in.PublicIP}}
		nodes = append(nodes, n)
	}
	lb, _ := w.cloud.LoadBalancer()
	return w, lb.(cloud.LoadBalancerInventory), nodes, vpc
}

func nodeAddrs(nb linodetest.NodeBalancer) []string {
	var out []string
	for _, nd := range nb.Configs[0].Nodes {
		out = append(out, fmt.Sprintf("%s@%d", nd.Address, nd.SubnetID))
	}
	slices.Sort(out)
	return out
}

// With vpcNames in the cloud config, a NodeBalancer has VPC backends, as
// Linode's CCM makes them: the create's vpcs names the subnet (the
// config's first VPC and subnet, or the annotations'), with
// backend-ipv4-range; each node is its Linode's address in the subnet,
// sent with the subnet's id. Ensured again, nothing is written.
func TestLBVPCBackends(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ann    map[string]string
		subnet int // index in cluster-vpc
		rng    string
	}{
		{"config", nil, 0, ""},
		{"subnet name and range", map[string]string{AnnBackendSubnetName: "other", AnnBackendIPv4Range: "127.0.100.248/30"}, 1, "127.0.100.248/30"},
		{"subnet id", nil, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, lbs, nodes, vpc := vpcWorld(t)
			ann := tc.ann
			if tc.name == "subnet id" {
				ann = map[string]string{AnnBackendSubnetID: fmt.Sprint(vpc.Subnets[1].ID)}
			}
			svc := lbSvc(ann)
			if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
				t.Fatal(err)
			}
			nb := w.ln.NodeBalancers()[0]
			s := vpc.Subnets[tc.subnet]
			if len(nb.VPCs) != 1 || nb.VPCs[0].SubnetID != s.ID || nb.VPCs[0].IPv4Range != tc.rng {
				t.Fatalf("VPCs %+v, want subnet %d range %q", nb.VPCs, s.ID, tc.rng)
			}
			want := []string{fmt.Sprintf("127.0.%d.11:30080@%d", 99+tc.subnet, s.ID), fmt.Sprintf("127.0.%d.12:30080@%d", 99+tc.subnet, s.ID)}
			if got := nodeAddrs(nb); !slices.Equal(got, want) {
				t.Fatalf("nodes %v, want %v", got, want)
			}
			nds, err := w.cloud.client.ListNodeBalancerNodes(context.Background(), nb.ID, nb.Configs[0].ID, nil)
			if err != nil || len(nds) != 2 || nds[0].VPCConfigID == 0 {
				t.Errorf("the API's nodes: %+v, %v", nds, err)
			}
			writes := lbWrites(w)
			if _, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nodes); err != nil {
				t.Fatal(err)
			}
			if n := lbWrites(w) - writes; n != 0 {
				t.Errorf("ensured again: %d writes, want 0", n)
			}
			// A node leaving is one rebuild, in the subnet.
			if err := lbs.UpdateLoadBalancer(context.Background(), "kubernetes", svc, nodes[:1]); err != nil {
				t.Fatal(err)
			}
			now, _ := w.ln.NodeBalancer(nb.ID)
			if got := nodeAddrs(now); !slices.Equal(got, want[:1]) {
				t.Errorf("after a node left: %v", got)
			}
		})
	}
}

// VPC annotations on a cluster without vpcNames, a malformed range or id,
// a VPC or subnet that does not exist, and a node without an address in
// the subnet: an error naming it, and nothing written.
func TestLBVPCBadInput(t *testing.T) {
	t.Run("no vpcNames", func(t *testing.T) {
		w, lbs, nodes := lbWorld(t)
		for _, ann := range []string{AnnBackendVPCName, AnnBackendSubnetName, AnnBackendSubnetID, AnnBackendIPv4Range} {
			_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", lbSvc(map[string]string{ann: "1"}), nodes)
			if err == nil || !strings.Contains(err.Error(), ann) || !strings.Contains(err.Error(), "vpcNames") {
				t.Errorf("%s: %v", ann, err)
			}
		}
		if n := lbCalls(w); n != 0 {
			t.Errorf("API calls %d, want 0", n)
		}
	})
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want string
	}{
		{"range", map[string]string{AnnBackendIPv4Range: "10.0.0.1/30"}, AnnBackendIPv4Range},
		{"id", map[string]string{AnnBackendSubnetID: "x"}, AnnBackendSubnetID},
		{"no such VPC", map[string]string{AnnBackendVPCName: "nope"}, `there is no VPC "nope"`},
		{"no such subnet", map[string]string{AnnBackendSubnetName: "nope"}, `has no subnet "nope"`},
		{"no such subnet id", map[string]string{AnnBackendSubnetID: "123456"}, "no VPC has the subnet 123456"},
		{"a node outside", map[string]string{AnnBackendVPCName: "elsewhere"}, "has no address in the NodeBalancer's VPC subnet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, lbs, nodes, _ := vpcWorld(t)
			_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", lbSvc(tc.ann), nodes)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("EnsureLoadBalancer: %v, want an error naming %s", err, tc.want)
			}
			if n := lbWrites(w); n != 0 || len(w.ln.NodeBalancers()) != 0 {
				t.Errorf("writes %d, NodeBalancers %d", n, len(w.ln.NodeBalancers()))
			}
		})
	}
}

// The config: subnetNames default to [default] with vpcNames; subnetNames
// alone is an error.
func TestConfigVPC(t *testing.T) {
	c := Config{ClusterID: "c1", TokenEnv: "X", VPCNames: []string{"v"}}
	c.defaults()
	if !slices.Equal(c.SubnetNames, []string{"default"}) {
		t.Errorf("subnetNames %v", c.SubnetNames)
	}
	bad := Config{ClusterID: "c1", TokenEnv: "X", SubnetNames: []string{"s"}}
	bad.defaults()
	if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "subnetNames") {
		t.Errorf("subnetNames alone: %v", err)
	}
}
