package aws

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/view"
)

func TestParseProviderID(t *testing.T) {
	for in, want := range map[string][2]string{
		"aws:///us-east-1a/i-0123456789abcdef0": {"us-east-1a", "i-0123456789abcdef0"},
		"aws:////i-0123456789abcdef0":           {"", "i-0123456789abcdef0"},
		"i-0123456789abcdef0":                   {"", "i-0123456789abcdef0"},
		"aws:///eu-west-3c/i-12345678":          {"eu-west-3c", "i-12345678"},
	} {
		zone, id, err := ParseProviderID(in)
		if err != nil || zone != want[0] || id != want[1] {
			t.Errorf("%q: %q, %q, %v; want %q, %q", in, zone, id, err, want[0], want[1])
		}
	}
	for _, bad := range []string{
		"", "i-", "aws:///", "aws:///us-east-1a/", "aws:///us-east-1a/x-123", "aws:///us-east-1a/i-1/extra",
		"aws:///i-0123456789abcdef0", "aws://us-east-1a/i-0123456789abcdef0", "aws:/us-east-1a/i-0123",
		"gce://p/z/i-0123", "local://i-0123", "AWS:///us-east-1a/i-0123", "aws:///us east/i-0123",
		"aws:///us-east-1a/i-01 23", "us-east-1a/i-0123", "i-0123\n",
	} {
		if zone, id, err := ParseProviderID(bad); err == nil {
			t.Errorf("%q accepted as zone %q id %q", bad, zone, id)
		}
	}
	// What the view writes, it reads.
	if zone, id, err := ParseProviderID(agentid.ProviderID("us-east-1b", "i-0aaaaaaaaaaaaaaaa")); err != nil || zone != "us-east-1b" || id != "i-0aaaaaaaaaaaaaaaa" {
		t.Fatalf("round trip: %q %q %v", zone, id, err)
	}
}

// TestNodeAddressOrder checks the upstream AWS CCM's order on an instance
// with two in-use interfaces given out of device order, one detached
// interface, and IPv6: every private IPv4 by device index, the public IPv4,
// the private DNS name as InternalDNS and Hostname, the public DNS name, then
// the first IPv6 of each interface.
func TestNodeAddressOrder(t *testing.T) {
	eni := func(dev int32, status ec2types.NetworkInterfaceStatus, ipv6 []string, ips ...string) ec2types.InstanceNetworkInterface {
		n := ec2types.InstanceNetworkInterface{Status: status, Attachment: &ec2types.InstanceNetworkInterfaceAttachment{DeviceIndex: aws.Int32(dev)}}
		for _, ip := range ips {
			n.PrivateIpAddresses = append(n.PrivateIpAddresses, ec2types.InstancePrivateIpAddress{PrivateIpAddress: aws.String(ip)})
		}
		for _, ip := range ipv6 {
			n.Ipv6Addresses = append(n.Ipv6Addresses, ec2types.InstanceIpv6Address{Ipv6Address: aws.String(ip)})
		}
		return n
	}
	in := &ec2types.Instance{
		InstanceId:       aws.String("i-0123456789abcdef0"),
		PrivateIpAddress: aws.String("10.0.0.1"),
		PublicIpAddress:  aws.String("203.0.113.7"),
		PrivateDnsName:   aws.String("ip-10-0-0-1.ec2.internal"),
		PublicDnsName:    aws.String("ec2-203-0-113-7.compute-1.amazonaws.com"),
		NetworkInterfaces: []ec2types.InstanceNetworkInterface{
			eni(1, ec2types.NetworkInterfaceStatusInUse, []string{"2001:db8::2"}, "10.0.1.5"),
			eni(2, ec2types.NetworkInterfaceStatusDetaching, []string{"2001:db8::9"}, "10.0.9.9"),
			eni(0, ec2types.NetworkInterfaceStatusInUse, []string{"2001:db8::1", "2001:db8::1:1"}, "10.0.0.1", "10.0.0.2", "not-an-ip"),
		},
	}
	want := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.0.0.1"},
		{Type: v1.NodeInternalIP, Address: "10.0.0.2"},
		{Type: v1.NodeInternalIP, Address: "10.0.1.5"},
		{Type: v1.NodeExternalIP, Address: "203.0.113.7"},
		{Type: v1.NodeInternalDNS, Address: "ip-10-0-0-1.ec2.internal"},
		{Type: v1.NodeHostName, Address: "ip-10-0-0-1.ec2.internal"},
		{Type: v1.NodeExternalDNS, Address: "ec2-203-0-113-7.compute-1.amazonaws.com"},
		{Type: v1.NodeInternalIP, Address: "2001:db8::1"},
		{Type: v1.NodeInternalIP, Address: "2001:db8::2"},
	}
	if got := nodeAddresses(in); !reflect.DeepEqual(got, want) {
		t.Fatalf("addresses:\n got %v\nwant %v", got, want)
	}
	// The caller's interfaces are not reordered.
	if aws.ToInt32(in.NetworkInterfaces[0].Attachment.DeviceIndex) != 1 {
		t.Fatal("nodeAddresses reordered the instance's interfaces")
	}
	// Without interfaces: the primary addresses.
	bare := &ec2types.Instance{PrivateIpAddress: aws.String("10.0.0.1"), Ipv6Address: aws.String("2001:db8::1"), PrivateDnsName: aws.String("h")}
	want = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeInternalDNS, Address: "h"},
		{Type: v1.NodeHostName, Address: "h"}, {Type: v1.NodeInternalIP, Address: "2001:db8::1"}}
	if got := nodeAddresses(bare); !reflect.DeepEqual(got, want) {
		t.Fatalf("addresses without interfaces:\n got %v\nwant %v", got, want)
	}
}

func TestViewStateMapping(t *testing.T) {
	for ec2State, want := range map[ec2types.InstanceStateName]view.State{
		"pending": view.StatePending, "running": view.StateRunning,
		"stopping": view.StateStopped, "stopped": view.StateStopped,
		"shutting-down": view.StateTerminated, "terminated": view.StateTerminated,
		"hibernating-someday": view.StatePending, "": view.StatePending,
	} {
		if got := viewState("i-1", ec2State); got != want {
			t.Errorf("%q: %q, want %q", ec2State, got, want)
		}
	}
}

// TestSourceThroughEC2 lists through the real EC2 client against awstest:
// only owned and shared instances of the cluster, each state mapped, the
// providerID, zone, region, type, name and addresses as EC2 describes them.
func TestSourceThroughEC2(t *testing.T) {
	e := newEnv(t)
	other := map[string]string{"kubernetes.io/cluster/c2": "owned"}
	e.put(t, awstest.Instance{PrivateIP: "127.0.1.1", Tags: other})
	e.put(t, awstest.Instance{PrivateIP: "127.0.1.2", Tags: map[string]string{clusterTag: "foreign"}})
	e.put(t, awstest.Instance{PrivateIP: "127.0.1.3", Tags: map[string]string{clusterTag: ""}})
	e.put(t, awstest.Instance{PrivateIP: "127.0.1.4"})
	want := map[string]view.State{}
	ips := map[string]string{}
	for i, st := range []string{"pending", "running", "stopping", "stopped", "shutting-down", "terminated"} {
		tags := map[string]string{clusterTag: "owned", "Name": "web-" + st}
		if i%2 == 1 {
			tags[clusterTag] = "shared"
		}
		var role string // every other instance has an instance profile
		if i%2 == 0 {
			role = "node"
		}
		in := e.put(t, awstest.Instance{State: st, PrivateIP: fmt.Sprintf("127.0.0.%d", i+1), PublicIP: fmt.Sprintf("127.0.2.%d", i+1),
			PublicDNSName: fmt.Sprintf("pub-%d.example.com", i), Zone: "us-east-1c", InstanceType: "t3.small", Tags: tags, Role: role})
		want[in.ID] = viewState(in.ID, ec2types.InstanceStateName(st))
		ips[in.ID] = in.PrivateIP
	}
	got, err := e.source().ListInstances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d instances, want the cluster's %d: %+v", len(got), len(want), got)
	}
	for _, in := range got {
		st, ok := want[in.ID]
		if !ok {
			t.Errorf("listed %s, not the cluster's", in.ID)
			continue
		}
		stored, _ := e.aws.Get(in.ID)
		// EC2 describes a stopped instance without its public address, and
		// a terminated one without any address or DNS name.
		gone := st == view.StateTerminated
		wantName := strings.ToLower(stored.PrivateDNSName)
		if gone {
			wantName = ""
		}
		if in.State != st || in.ProviderID != "aws:///us-east-1c/"+in.ID || in.Zone != "us-east-1c" || in.Region != awstest.DefaultRegion ||
			in.InstanceType != "t3.small" || in.Cluster != "c1" || in.Name != "web-"+stored.State || in.NodeName != wantName ||
			(stored.Role == "") != (in.Identity == "") || (stored.Role != "" && in.Identity != "arn:aws:iam::123456789012:instance-profile/node") {
			t.Errorf("instance %s: %+v (stored %+v)", in.ID, in, stored)
		}
		var wantAddrs []v1.NodeAddress
		switch {
		case st == view.StatePending || st == view.StateRunning:
			wantAddrs = []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: ips[in.ID]},
				{Type: v1.NodeExternalIP, Address: stored.PublicIP},
				{Type: v1.NodeInternalDNS, Address: stored.PrivateDNSName},
				{Type: v1.NodeHostName, Address: stored.PrivateDNSName},
				{Type: v1.NodeExternalDNS, Address: stored.PublicDNSName},
			}
		case st == view.StateStopped:
			wantAddrs = []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: ips[in.ID]},
				{Type: v1.NodeInternalDNS, Address: stored.PrivateDNSName},
				{Type: v1.NodeHostName, Address: stored.PrivateDNSName},
			}
		}
		if !reflect.DeepEqual(in.Addresses, wantAddrs) {
			t.Errorf("instance %s (%s) addresses:\n got %v\nwant %v", in.ID, stored.State, in.Addresses, wantAddrs)
		}
	}
}

// TestSourcePagination: 2,500 instances come in three DescribeInstances
// calls of at most 1,000.
func TestSourcePagination(t *testing.T) {
	e := newEnv(t)
	ids := map[string]bool{}
	for i := range 2500 {
		in := e.put(t, awstest.Instance{PrivateIP: fmt.Sprintf("127.1.%d.%d", i/250, i%250+1), Tags: map[string]string{clusterTag: "owned"}})
		ids[in.ID] = true
	}
	before := e.aws.Calls("DescribeInstances")
	got, err := e.source().ListInstances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if calls := e.aws.Calls("DescribeInstances") - before; calls != 3 {
		t.Errorf("%d DescribeInstances calls, want 3", calls)
	}
	seen := map[string]bool{}
	for _, in := range got {
		if !ids[in.ID] || seen[in.ID] {
			t.Fatalf("instance %s listed unexpectedly or twice", in.ID)
		}
		seen[in.ID] = true
	}
	if len(seen) != len(ids) {
		t.Fatalf("listed %d instances, want %d", len(seen), len(ids))
	}
}

// capturingEC2 records DescribeInstances inputs and answers two empty pages.
type capturingEC2 struct{ inputs []*ec2.DescribeInstancesInput }

func (c *capturingEC2) DescribeInstances(_ context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	c.inputs = append(c.inputs, in)
	if len(c.inputs) == 1 {
		return &ec2.DescribeInstancesOutput{NextToken: aws.String("page-2")}, nil
	}
	return &ec2.DescribeInstancesOutput{}, nil
}

// TestSourceRequest: the list asks for the cluster tag's key, 1,000 at a
// time, and follows NextToken.
func TestSourceRequest(t *testing.T) {
	fake := &capturingEC2{}
	if _, err := (Source{EC2: fake, ClusterID: "c1"}).ListInstances(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(fake.inputs) != 2 {
		t.Fatalf("%d calls, want 2", len(fake.inputs))
	}
	for i, in := range fake.inputs {
		if aws.ToInt32(in.MaxResults) != 1000 || len(in.InstanceIds) != 0 || len(in.Filters) != 1 ||
			aws.ToString(in.Filters[0].Name) != "tag-key" || !reflect.DeepEqual(in.Filters[0].Values, []string{clusterTag}) {
			t.Errorf("call %d: %+v", i, in)
		}
	}
	if fake.inputs[0].NextToken != nil || aws.ToString(fake.inputs[1].NextToken) != "page-2" {
		t.Errorf("tokens %v, %v", fake.inputs[0].NextToken, fake.inputs[1].NextToken)
	}
}

// TestNodeNamePolicies finds each policy's Node name through the view.
func TestNodeNamePolicies(t *testing.T) {
	e := newEnv(t)
	in := e.put(t, awstest.Instance{PrivateIP: "127.0.0.9", PrivateDNSName: "IP-127-0-0-9.ec2.internal",
		Tags: map[string]string{clusterTag: "owned", "k8s-node": "Worker-9"}})
	untagged := e.put(t, awstest.Instance{PrivateIP: "127.0.0.10", Tags: map[string]string{clusterTag: "owned"}})
	for policy, wantName := range map[string]string{
		"":               "ip-127-0-0-9.ec2.internal",
		"PrivateDNSName": "ip-127-0-0-9.ec2.internal",
		"InstanceID":     in.ID,
		"Tag:k8s-node":   "worker-9",
	} {
		t.Run("policy "+policy, func(t *testing.T) {
			p, err := agentid.ParseNamePolicy(policy)
			if err != nil {
				t.Fatal(err)
			}
			src := e.source()
			src.NamePolicy = p
			v := view.New(src, view.Options{})
			got, err := v.ByNodeName(context.Background(), strings.ToUpper(wantName), 0)
			if err != nil || got.ID != in.ID || got.NodeName != wantName {
				t.Fatalf("ByNodeName(%q): %+v, %v", wantName, got, err)
			}
			if policy == "Tag:k8s-node" {
				other, err := v.ByID(context.Background(), untagged.ID, 0)
				if err != nil || other.NodeName != "" {
					t.Fatalf("an instance without the tag has Node name %q, %v; want none", other.NodeName, err)
				}
			}
		})
	}
}

// TestSourceCreationTime: the view's creation time is the attachment time
// of the primary network interface as the real EC2 client decodes it from
// awstest's XML: exactly the time an instance was created with, unmoved by
// a stop and start (which moves launchTime), as join tickets need it.
func TestSourceCreationTime(t *testing.T) {
	e := newEnv(t)
	made := time.Date(2025, 3, 1, 10, 20, 30, 0, time.UTC)
	ticketed := e.put(t, awstest.Instance{PrivateIP: "127.0.0.1", Created: made, Tags: map[string]string{clusterTag: "owned", "Name": "ticketed"}})
	plain := e.put(t, awstest.Instance{PrivateIP: "127.0.0.2", Tags: map[string]string{clusterTag: "owned", "Name": "plain"}})
	for _, st := range []string{"stopped", "running"} {
		if err := e.aws.SetState(ticketed.ID, st); err != nil {
			t.Fatal(err)
		}
	}
	if again, _ := e.aws.Get(ticketed.ID); !again.LaunchTime.After(made) {
		t.Fatalf("the start left the launch time at %v", again.LaunchTime)
	}
	v := view.New(e.source(), view.Options{})
	named, err := v.Named(context.Background(), "ticketed", 0)
	if err != nil || len(named) != 1 || named[0].ID != ticketed.ID {
		t.Fatalf("Named(ticketed): %+v, %v", named, err)
	}
	if !named[0].Created.Equal(made) {
		t.Errorf("created %v, want %v (not the last launch)", named[0].Created, made)
	}
	got, err := v.ByID(context.Background(), plain.ID, 0)
	if err != nil || got.Created.IsZero() || !got.Created.Equal(plain.Created) {
		t.Errorf("default creation time: %v (%v), want %v", got.Created, err, plain.Created)
	}
}

// TestCreatedTime takes the primary interface's attachment time only: not
// another card's device 0, not an attachment without a device index, and
// nothing when there are no interfaces.
func TestCreatedTime(t *testing.T) {
	first := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	later := first.Add(time.Hour)
	att := func(card, dev *int32, at time.Time) ec2types.InstanceNetworkInterface {
		return ec2types.InstanceNetworkInterface{Attachment: &ec2types.InstanceNetworkInterfaceAttachment{
			NetworkCardIndex: card, DeviceIndex: dev, AttachTime: aws.Time(at)}}
	}
	for name, c := range map[string]struct {
		enis []ec2types.InstanceNetworkInterface
		want time.Time
	}{
		"primary":                 {[]ec2types.InstanceNetworkInterface{att(aws.Int32(0), aws.Int32(1), later), att(aws.Int32(0), aws.Int32(0), first)}, first},
		"no card index is card 0": {[]ec2types.InstanceNetworkInterface{att(nil, aws.Int32(0), first)}, first},
		"another card's device 0": {[]ec2types.InstanceNetworkInterface{att(aws.Int32(1), aws.Int32(0), later)}, time.Time{}},
		"no device index":         {[]ec2types.InstanceNetworkInterface{att(aws.Int32(0), nil, later)}, time.Time{}},
		"no attachment":           {[]ec2types.InstanceNetworkInterface{{}}, time.Time{}},
		"no interfaces":           {nil, time.Time{}},
	} {
		if got := createdTime(&ec2types.Instance{NetworkInterfaces: c.enis}); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}
