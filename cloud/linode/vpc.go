package linode

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/linode/linodego"

	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// The annotations of VPC backends (Linode's CCM's names and meanings).
const (
	AnnBackendVPCName    = AnnotationPrefix + "backend-vpc-name"
	AnnBackendSubnetName = AnnotationPrefix + "backend-subnet-name"
	AnnBackendSubnetID   = AnnotationPrefix + "backend-subnet-id"
	AnnBackendIPv4Range  = AnnotationPrefix + "backend-ipv4-range"
)

// vpcChoice is the subnet a NodeBalancer reaches its nodes in: by id, else
// by the labels of the VPC and the subnet; ipv4Range is the range of the
// NodeBalancer's own addresses there ("" for Linode's choice).
type vpcChoice struct {
	vpcName, subnetName string
	subnetID            int
	ipv4Range           string
}

// subnetRef is a subnet found: its VPC's id and its own.
type subnetRef struct{ vpcID, subnetID int }

// vpcChoice reads the VPC annotations: with vpcNames in the config, the
// Service's NodeBalancer has VPC backends (the annotations' subnet, else
// the config's first VPC and subnet), as with Linode's CCM; without, the
// annotations are an error (Linode's CCM refuses them too).
func (l *nodeBalancers) vpcChoice(a *loadbalancer.Annotations) *vpcChoice {
	cfg := l.c.cfg
	if len(cfg.VPCNames) == 0 {
		for _, n := range []string{AnnBackendVPCName, AnnBackendSubnetName, AnnBackendSubnetID, AnnBackendIPv4Range} {
			if a.Has(n) {
				a.Fail(n, "it unset, or a cloud config that names the cluster's VPC (vpcNames, as Linode's CCM's --vpc-names)")
			}
		}
		return nil
	}
	v := &vpcChoice{vpcName: a.String(AnnBackendVPCName, cfg.VPCNames[0]), subnetName: a.String(AnnBackendSubnetName, cfg.SubnetNames[0])}
	if a.Has(AnnBackendSubnetID) {
		v.subnetID = a.Int(AnnBackendSubnetID, 0, 1, 1<<31-1)
	}
	if r := a.String(AnnBackendIPv4Range, ""); r != "" {
		p, err := netip.ParsePrefix(r)
		if err != nil || !p.Addr().Is4() || p.Masked() != p {
			a.Fail(AnnBackendIPv4Range, "an IPv4 range in CIDR notation, such as 10.100.0.0/30")
		}
		v.ipv4Range = r
	}
	return v
}

// subnet finds v's subnet with one list of the account's VPCs (they carry
// their subnets), remembered for the process as Linode's CCM does.
func (l *nodeBalancers) subnet(ctx context.Context, v *vpcChoice) (subnetRef, error) {
	key := "name:" + v.vpcName + "/" + v.subnetName
	if v.subnetID != 0 {
		key = "id:" + strconv.Itoa(v.subnetID)
	}
	if ref, ok := l.subnets.Load(key); ok {
		return ref.(subnetRef), nil
	}
	vpcs, err := l.c.client.ListVPCs(ctx, &linodego.ListOptions{PageSize: l.c.cfg.PageSize})
	if err != nil {
		return subnetRef{}, fmt.Errorf("listing VPCs: %w", err)
	}
	var ref subnetRef
	vpcFound := false
	for _, vpc := range vpcs {
		for _, s := range vpc.Subnets {
			if v.subnetID != 0 && s.ID == v.subnetID || v.subnetID == 0 && vpc.Label == v.vpcName && s.Label == v.subnetName {
				ref = subnetRef{vpcID: vpc.ID, subnetID: s.ID}
			}
		}
		vpcFound = vpcFound || vpc.Label == v.vpcName
	}
	switch {
	case ref.subnetID != 0:
	case v.subnetID != 0:
		return ref, fmt.Errorf("no VPC has the subnet %d (%s)", v.subnetID, AnnBackendSubnetID)
	case !vpcFound:
		return ref, fmt.Errorf("there is no VPC %q (%s, else the cloud config's vpcNames)", v.vpcName, AnnBackendVPCName)
	default:
		return ref, fmt.Errorf("VPC %q has no subnet %q (%s, else the cloud config's subnetNames)", v.vpcName, v.subnetName, AnnBackendSubnetName)
	}
	l.subnets.Store(key, ref)
	return ref, nil
}

// vpcAddresses are the Linodes' addresses in ref's subnet, by Linode id:
// one list of the VPC's addresses.
func (l *nodeBalancers) vpcAddresses(ctx context.Context, ref subnetRef) (map[int]string, error) {
	ips, err := l.c.client.ListVPCIPAddresses(ctx, ref.vpcID, &linodego.ListOptions{PageSize: l.c.cfg.PageSize})
	if err != nil {
		return nil, fmt.Errorf("the addresses of VPC %d: %w", ref.vpcID, err)
	}
	out := map[int]string{}
	for _, ip := range ips {
		if ip.SubnetID == ref.subnetID && ip.LinodeID != 0 && ip.Address != nil && *ip.Address != "" {
			if _, had := out[ip.LinodeID]; !had {
				out[ip.LinodeID] = *ip.Address
			}
		}
	}
	return out, nil
}
