package aws

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"

	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
)

// upstreamOnAWSTest builds the upstream AWS provider as production does
// (its registered factory), its EC2 calls sent to the stand-in through its
// own [ServiceOverride] section, with the stand-in's user's keys.
func upstreamOnAWSTest(t *testing.T, c *awstest.Cloud) cloudprovider.InstancesV2 {
	t.Helper()
	isolateSDK(t)
	t.Setenv("AWS_ACCESS_KEY_ID", testUser.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testUser.SecretAccessKey)
	text := fmt.Sprintf("[Global]\nRegion = %[1]s\nKubernetesClusterID = c1\nVPC = vpc-x\nSubnetID = subnet-x\n"+
		"[ServiceOverride \"1\"]\nService = EC2\nRegion = %[1]s\nURL = %[2]s\nSigningRegion = %[1]s\nSigningName = ec2\n", c.Region(), c.Endpoint())
	cp, err := registeredUpstream(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	iv2, ok := cp.InstancesV2()
	if !ok {
		t.Fatal("the upstream provider has no InstancesV2")
	}
	return iv2
}

// The upstream provider's InstancesV2 against the stand-in: its
// InstanceMetadata needs DescribeInstances, DescribeAvailabilityZones (the
// zone id label) and DescribeInstanceTopology (network node labels, for
// the types that have them), and answers what EC2 holds; InstanceExists
// follows EC2. With throttling on, the upstream's SDK retries the throttled
// calls, which the stand-in counts.
func TestUpstreamInstancesV2OnAWSTest(t *testing.T) {
	e := newEnv(t)
	up := upstreamOnAWSTest(t, e.aws)
	ctx := context.Background()
	plain := e.put(t, awstest.Instance{PrivateIP: "127.0.0.81", PublicIP: "127.0.0.181", Zone: "us-east-1b", Tags: map[string]string{clusterTag: "owned"}})
	gpu := e.put(t, awstest.Instance{PrivateIP: "127.0.0.82", Zone: "us-east-1c", InstanceType: "p5.48xlarge", Tags: map[string]string{clusterTag: "owned"}})
	nodeOf := func(in awstest.Instance) *v1.Node { return node(in.PrivateDNSName, agentid.ProviderID(in.Zone, in.ID)) }
	zoneIDs := map[string]string{}
	for _, z := range []string{"us-east-1b", "us-east-1c"} {
		zoneIDs[z] = zoneIDOf(t, e, z)
	}

	for _, in := range []awstest.Instance{plain, gpu} {
		md, err := up.InstanceMetadata(ctx, nodeOf(in))
		if err != nil {
			t.Fatalf("InstanceMetadata of %s: %v", in.ID, err)
		}
		if md.ProviderID != agentid.ProviderID(in.Zone, in.ID) || md.InstanceType != in.InstanceType || md.Zone != in.Zone || md.Region != awstest.DefaultRegion {
			t.Errorf("metadata of %s: %+v", in.ID, md)
		}
		if !slices.Contains(md.NodeAddresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: in.PrivateIP}) ||
			!slices.Contains(md.NodeAddresses, v1.NodeAddress{Type: v1.NodeInternalDNS, Address: in.PrivateDNSName}) {
			t.Errorf("addresses of %s: %v", in.ID, md.NodeAddresses)
		}
		if in.PublicIP != "" && !slices.Contains(md.NodeAddresses, v1.NodeAddress{Type: v1.NodeExternalIP, Address: in.PublicIP}) {
			t.Errorf("addresses of %s: %v; want its public one", in.ID, md.NodeAddresses)
		}
		if got := md.AdditionalLabels[awsv1.LabelZoneID]; got != zoneIDs[in.Zone] {
			t.Errorf("zone id label of %s: %q, want %q", in.ID, got, zoneIDs[in.Zone])
		}
		_, layered := md.AdditionalLabels[awsv1.LabelNetworkNodePrefix+"3"]
		if layered != (in.ID == gpu.ID) {
			t.Errorf("network node labels of %s (%s): %v", in.ID, in.InstanceType, md.AdditionalLabels)
		}
		if exists, err := up.InstanceExists(ctx, nodeOf(in)); err != nil || !exists {
			t.Errorf("InstanceExists of %s: %v, %v", in.ID, exists, err)
		}
	}
	if e.aws.Calls(awstest.ActionDescribeAvailabilityZones) == 0 || e.aws.Calls(awstest.ActionDescribeInstanceTopology) == 0 {
		t.Fatalf("the upstream made %d DescribeAvailabilityZones and %d DescribeInstanceTopology calls",
			e.aws.Calls(awstest.ActionDescribeAvailabilityZones), e.aws.Calls(awstest.ActionDescribeInstanceTopology))
	}

	// Throttled: one token, refilled at 4 a second, while the upstream's
	// batcher sends a call every 100 ms or so: the second call finds the
	// bucket empty, and the SDK's retry waits for a token.
	e.aws.Throttle(map[string]awstest.Bucket{awstest.ActionDescribeInstances: {Size: 1, Refill: 4}})
	for i := 0; i < 5 && e.aws.Throttled(awstest.ActionDescribeInstances) == 0; i++ {
		if exists, err := up.InstanceExists(ctx, nodeOf(plain)); err != nil || !exists {
			t.Fatalf("InstanceExists under throttling: %v, %v", exists, err)
		}
	}
	if n := e.aws.Throttled(awstest.ActionDescribeInstances); n == 0 {
		t.Fatal("no DescribeInstances was throttled")
	}
	e.aws.NoThrottle()

	e.aws.Delete(plain.ID)
	if exists, err := up.InstanceExists(ctx, nodeOf(plain)); err != nil || exists {
		t.Fatalf("InstanceExists of a deleted instance: %v, %v", exists, err)
	}
}

// zoneIDOf is the stand-in's id of a zone, as EC2 describes it.
func zoneIDOf(t *testing.T, e *env, zone string) string {
	t.Helper()
	out, err := e.ec2.DescribeAvailabilityZones(context.Background(), &ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{zone}})
	if err != nil || len(out.AvailabilityZones) != 1 {
		t.Fatalf("DescribeAvailabilityZones %s: %v", zone, err)
	}
	return *out.AvailabilityZones[0].ZoneId
}
