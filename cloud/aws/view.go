package aws

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/view"
)

// EC2API is the part of the EC2 client the backend calls; the SDK's
// *ec2.Client is one.
type EC2API interface {
	ec2.DescribeInstancesAPIClient
}

// pageSize is DescribeInstances' MaxResults: EC2's largest page.
const pageSize = 1000

// Source lists a cluster's EC2 instances for the shared instance view: one
// paginated DescribeInstances filtered by the cluster tag's key, keeping the
// instances whose tag value is owned or shared.
type Source struct {
	// EC2 is the client DescribeInstances goes through.
	EC2 EC2API
	// Region is written into every instance (EC2 answers for one region).
	Region string
	// ClusterID is the cluster's id (Config.ClusterID).
	ClusterID string
	// NamePolicy derives each instance's Node name.
	NamePolicy agentid.NamePolicy
	// RequestTimeout bounds each page's call; 0 leaves it to the context.
	RequestTimeout time.Duration

	seen *idTracker // told of every id listed; nil: none
}

var _ view.Source = Source{}

// ListInstances follows every page of the cluster's instances, terminated
// ones EC2 still reports included.
func (s Source) ListInstances(ctx context.Context) ([]view.Instance, error) {
	tagKey := ClusterTagPrefix + s.ClusterID
	in := &ec2.DescribeInstancesInput{
		Filters: []ec2types.Filter{{Name: aws.String("tag-key"), Values: []string{tagKey}}},
	}
	pages := ec2.NewDescribeInstancesPaginator(s.EC2, in, func(o *ec2.DescribeInstancesPaginatorOptions) {
		o.Limit = pageSize
		o.StopOnDuplicateToken = true
	})
	var out []view.Instance
	for n := 1; pages.HasMorePages(); n++ {
		page, err := s.page(ctx, pages)
		if err != nil {
			return nil, fmt.Errorf("ec2 DescribeInstances (page %d, filter tag-key=%s): %w", n, tagKey, err)
		}
		for _, r := range page.Reservations {
			for i := range r.Instances {
				if vi, ok := s.toView(&r.Instances[i]); ok {
					out = append(out, vi)
					s.seen.described(vi.ID)
				}
			}
		}
	}
	return out, nil
}

func (s Source) page(ctx context.Context, p *ec2.DescribeInstancesPaginator) (*ec2.DescribeInstancesOutput, error) {
	if s.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.RequestTimeout)
		defer cancel()
	}
	return p.NextPage(ctx)
}

// toView converts an EC2 instance into the shared view's form; false when
// the instance is not the cluster's (no cluster tag, or a value other than
// owned or shared).
func (s Source) toView(in *ec2types.Instance) (view.Instance, bool) {
	tags := make(map[string]string, len(in.Tags))
	for _, t := range in.Tags {
		tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	switch tags[ClusterTagPrefix+s.ClusterID] {
	case ClusterTagOwned, ClusterTagShared:
	default:
		return view.Instance{}, false
	}
	id := aws.ToString(in.InstanceId)
	var zone string
	if in.Placement != nil {
		zone = aws.ToString(in.Placement.AvailabilityZone)
	}
	var state ec2types.InstanceStateName
	if in.State != nil {
		state = in.State.Name
	}
	created := createdTime(in)
	if created.IsZero() && state != ec2types.InstanceStateNameShuttingDown && state != ec2types.InstanceStateNameTerminated {
		klog.V(2).InfoS("EC2 describes no attachment time of the instance's primary network interface; its creation time is unknown (a join ticket cannot name it)", "instance", id)
	}
	return view.Instance{
		ProviderID:   agentid.ProviderID(zone, id),
		ID:           id,
		Name:         tags["Name"],
		NodeName:     s.NamePolicy.NodeName(id, aws.ToString(in.PrivateDnsName), tags),
		Zone:         zone,
		Region:       s.Region,
		InstanceType: string(in.InstanceType),
		Cluster:      s.ClusterID,
		State:        viewState(id, state),
		Addresses:    nodeAddresses(in),
		Created:      created,
		Identity:     profileARN(in),
		// EC2 describes an instance configured for NitroTPM with
		// tpmSupport v2.0 (the EC2 API reference's Instance.TpmSupport).
		VTPM: aws.ToString(in.TpmSupport) == nitroTPMSupport,
	}, true
}

// nitroTPMSupport is the tpmSupport of an instance with NitroTPM.
const nitroTPMSupport = "v2.0"

// createdTime is when EC2 first launched the instance: the attachment time
// of its primary network interface, the one at network card 0 and device
// index 0; zero when EC2 describes none (a terminated instance has lost
// its interfaces).
//
// Not LaunchTime: EC2's API documentation of Instance.LaunchTime (as the
// SDK's ec2/types carries it) says it is the time the instance was last
// launched, and to see the attachment time of the primary network
// interface for the time it was first launched. A
// stop and start moves LaunchTime. For join tickets that would cut both
// ways: an instance stopped and started after its ticket expired would be
// refused (conservative), but an instance created before the ticket was
// issued, stopped and started within its life, would pass for one created
// for it: the very case the creation time is checked for. The primary
// interface is attached at launch and cannot be detached (EC2 User Guide,
// "Network interface attachments"), so its attachment time stays the first
// launch's. UsageOperationUpdateTime is "the time that the usage operation
// was last updated", a billing code's, not the instance's creation.
func createdTime(in *ec2types.Instance) time.Time {
	for _, eni := range in.NetworkInterfaces {
		a := eni.Attachment
		// A missing network card index is card 0, EC2's default.
		if a != nil && a.DeviceIndex != nil && *a.DeviceIndex == 0 && aws.ToInt32(a.NetworkCardIndex) == 0 && a.AttachTime != nil {
			return *a.AttachTime
		}
	}
	return time.Time{}
}

// profileARN is the ARN of the instance profile EC2 says the instance is
// associated with now, "" for none.
func profileARN(in *ec2types.Instance) string {
	if in.IamInstanceProfile == nil {
		return ""
	}
	return aws.ToString(in.IamInstanceProfile.Arn)
}

// viewState maps EC2's instance states onto the view's: stopping counts as
// stopped and shutting-down as terminated, as both are on their way there.
// A state EC2 may add later is pending: neither running (no join) nor gone.
func viewState(id string, s ec2types.InstanceStateName) view.State {
	switch s {
	case ec2types.InstanceStateNamePending:
		return view.StatePending
	case ec2types.InstanceStateNameRunning:
		return view.StateRunning
	case ec2types.InstanceStateNameStopping, ec2types.InstanceStateNameStopped:
		return view.StateStopped
	case ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameTerminated:
		return view.StateTerminated
	}
	klog.V(2).InfoS("Unknown EC2 instance state; treating it as pending", "instance", id, "state", s)
	return view.StatePending
}

// nodeAddresses lists an instance's addresses in the upstream AWS CCM's
// order: the private IPv4 addresses of its in-use network interfaces by
// device index, the public IPv4 address (ExternalIP), the private DNS name
// (InternalDNS, then Hostname), the public DNS name (ExternalDNS), and last
// the first IPv6 address of each in-use interface (InternalIP: EC2 gives
// IPv6 addresses no DNS names, and upstream counts them internal). An
// instance described without network interfaces falls back to its primary
// private address and IPv6 address. Unparsable addresses are left out.
func nodeAddresses(in *ec2types.Instance) []v1.NodeAddress {
	id := aws.ToString(in.InstanceId)
	var out []v1.NodeAddress
	add := func(t v1.NodeAddressType, addr string, ip bool) {
		if addr == "" {
			return
		}
		if ip {
			parsed := net.ParseIP(addr)
			if parsed == nil {
				klog.V(2).InfoS("Leaving out an unparsable EC2 address", "instance", id, "type", t, "address", addr)
				return
			}
			addr = parsed.String()
		}
		out = append(out, v1.NodeAddress{Type: t, Address: addr})
	}

	enis := inUseInterfaces(in.NetworkInterfaces)
	for _, eni := range enis {
		for _, p := range eni.PrivateIpAddresses {
			add(v1.NodeInternalIP, aws.ToString(p.PrivateIpAddress), true)
		}
	}
	if len(in.NetworkInterfaces) == 0 {
		add(v1.NodeInternalIP, aws.ToString(in.PrivateIpAddress), true)
	}
	add(v1.NodeExternalIP, aws.ToString(in.PublicIpAddress), true)
	if dns := aws.ToString(in.PrivateDnsName); dns != "" {
		add(v1.NodeInternalDNS, dns, false)
		add(v1.NodeHostName, dns, false)
	}
	add(v1.NodeExternalDNS, aws.ToString(in.PublicDnsName), false)
	for _, eni := range enis {
		if len(eni.Ipv6Addresses) > 0 {
			add(v1.NodeInternalIP, aws.ToString(eni.Ipv6Addresses[0].Ipv6Address), true)
		}
	}
	if len(in.NetworkInterfaces) == 0 {
		add(v1.NodeInternalIP, aws.ToString(in.Ipv6Address), true)
	}
	return out
}

// inUseInterfaces are the in-use network interfaces, attached ones first by
// device index (the primary interface is device 0).
func inUseInterfaces(all []ec2types.InstanceNetworkInterface) []ec2types.InstanceNetworkInterface {
	var out []ec2types.InstanceNetworkInterface
	for _, eni := range all {
		if eni.Status == ec2types.NetworkInterfaceStatusInUse {
			out = append(out, eni)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		ai, aj := out[i].Attachment, out[j].Attachment
		switch {
		case ai == nil:
			return false
		case aj == nil:
			return true
		}
		return aws.ToInt32(ai.DeviceIndex) < aws.ToInt32(aj.DeviceIndex)
	})
	return out
}

// ParseProviderID reads the providerID of an EC2 instance's Node in the
// forms the upstream AWS CCM accepts: aws:///<zone>/<instance-id> (the one it
// and this backend write), aws:////<instance-id> (no zone), and a bare
// instance id. Instance ids start with "i-". Anything else is an error.
func ParseProviderID(providerID string) (zone, id string, err error) {
	rest, ok := strings.CutPrefix(providerID, agentid.ProviderIDPrefix)
	switch {
	case !ok && !strings.Contains(providerID, "/") && !strings.Contains(providerID, ":"):
		id = providerID // a bare instance id
	case ok && strings.Count(rest, "/") == 1:
		zone, id, _ = strings.Cut(rest, "/")
	default:
		return "", "", fmt.Errorf("providerID %q: want %s<zone>/<instance-id>, %s/<instance-id> or a bare instance id", providerID, agentid.ProviderIDPrefix, agentid.ProviderIDPrefix)
	}
	if !validInstanceID(id) {
		return "", "", fmt.Errorf("providerID %q: %q is not an EC2 instance id (i-...)", providerID, id)
	}
	if strings.ContainsFunc(zone, isSpaceOrControl) {
		return "", "", fmt.Errorf("providerID %q: zone %q is not a zone name", providerID, zone)
	}
	return zone, id, nil
}

// validInstanceID: "i-" and at least one more character, with no '/',
// spaces or control characters (EC2 ids are i- and 8 or 17 hex digits;
// upstream assumes no length).
func validInstanceID(id string) bool {
	return len(id) > 2 && strings.HasPrefix(id, "i-") && !strings.ContainsFunc(id, func(r rune) bool {
		return r == '/' || isSpaceOrControl(r)
	})
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }
