package awstest

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// DescribeAvailabilityZones lists the region's zones as EC2 documents
// them, through the SDK: names, ids of the region's short code, type,
// state and region; names and ids select, unknown ones are refused.
func TestDescribeAvailabilityZones(t *testing.T) {
	c, _ := newCloud(t, func(o *Options) { o.Region = "eu-west-1" })
	client := ec2Client(c, staticCreds(testUser))
	ctx := context.Background()
	out, err := client.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	if err != nil {
		t.Fatal(err)
	}
	var names, zoneIDs []string
	for _, z := range out.AvailabilityZones {
		names = append(names, aws.ToString(z.ZoneName))
		zoneIDs = append(zoneIDs, aws.ToString(z.ZoneId))
		if aws.ToString(z.RegionName) != "eu-west-1" || aws.ToString(z.ZoneType) != "availability-zone" || z.State != types.AvailabilityZoneStateAvailable ||
			z.OptInStatus != types.AvailabilityZoneOptInStatusOptInNotRequired || aws.ToString(z.NetworkBorderGroup) != "eu-west-1" {
			t.Errorf("zone %+v", z)
		}
	}
	if !slices.Equal(names, []string{"eu-west-1a", "eu-west-1b", "eu-west-1c"}) {
		t.Fatalf("zones %v", names)
	}
	sorted := slices.Sorted(slices.Values(zoneIDs))
	if !slices.Equal(sorted, []string{"euw1-az1", "euw1-az2", "euw1-az3"}) {
		t.Fatalf("zone ids %v", zoneIDs)
	}
	one, err := client.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{ZoneIds: []string{zoneIDs[1]}})
	if err != nil || len(one.AvailabilityZones) != 1 || aws.ToString(one.AvailabilityZones[0].ZoneName) != "eu-west-1b" {
		t.Fatalf("by zone id: %+v, %v", one, err)
	}
	filtered, err := client.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{
		Filters: []types.Filter{{Name: aws.String("zone-name"), Values: []string{"*c"}}},
	})
	if err != nil || len(filtered.AvailabilityZones) != 1 {
		t.Fatalf("filtered: %+v, %v", filtered, err)
	}
	_, err = client.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{"eu-west-1z"}})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidParameterValue")
	_, err = client.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{Filters: []types.Filter{{Name: aws.String("bogus"), Values: []string{"x"}}}})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidParameterValue")

	for region, want := range map[string]string{"us-east-1": "use1", "ap-southeast-2": "apse2", "us-gov-west-1": "usgw1", "ap-northeast-1": "apne1", "ca-central-1": "cac1", "eu-north-1": "eun1"} {
		if got := regionCode(region); got != want {
			t.Errorf("regionCode(%s) = %s, want %s", region, got, want)
		}
	}
}

// DescribeInstanceTopology returns running instances of the types AWS
// documents as supported, with 3 network nodes (4 for p6-b200), the first
// shared by a zone's instances; other types are simply left out.
func TestDescribeInstanceTopology(t *testing.T) {
	c, _ := newCloud(t, nil)
	a := c.Put(Instance{PrivateIP: ip(1), InstanceType: "p5.48xlarge"})
	b := c.Put(Instance{PrivateIP: ip(2), InstanceType: "trn1.32xlarge"})
	four := c.Put(Instance{PrivateIP: ip(3), InstanceType: "p6-b200.48xlarge", Zone: "us-east-1b"})
	plain := c.Put(Instance{PrivateIP: ip(4)})
	stopped := c.Put(Instance{PrivateIP: ip(5), InstanceType: "p5.48xlarge", State: "stopped"})
	client := ec2Client(c, staticCreds(testUser))
	ctx := context.Background()

	out, err := client.DescribeInstanceTopology(ctx, &ec2.DescribeInstanceTopologyInput{InstanceIds: []string{a.ID, b.ID, four.ID, plain.ID, stopped.ID}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]types.InstanceTopology{}
	for _, it := range out.Instances {
		got[aws.ToString(it.InstanceId)] = it
	}
	if len(got) != 3 || len(got[a.ID].NetworkNodes) != 3 || len(got[b.ID].NetworkNodes) != 3 || len(got[four.ID].NetworkNodes) != 4 {
		t.Fatalf("topology %+v", out.Instances)
	}
	if got[a.ID].NetworkNodes[0] != got[b.ID].NetworkNodes[0] || got[a.ID].NetworkNodes[0] == got[four.ID].NetworkNodes[0] {
		t.Fatalf("top nodes: %v, %v, %v", got[a.ID].NetworkNodes, got[b.ID].NetworkNodes, got[four.ID].NetworkNodes)
	}
	if aws.ToString(got[four.ID].AvailabilityZone) != "us-east-1b" || aws.ToString(got[four.ID].ZoneId) != c.zoneID("us-east-1b") || aws.ToString(got[a.ID].InstanceType) != "p5.48xlarge" {
		t.Fatalf("topology of %s: %+v", four.ID, got[four.ID])
	}

	// Pages, and filters.
	pages := ec2.NewDescribeInstanceTopologyPaginator(client, &ec2.DescribeInstanceTopologyInput{MaxResults: aws.Int32(2)})
	var all []string
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Instances {
			all = append(all, aws.ToString(it.InstanceId))
		}
	}
	if len(all) != 3 {
		t.Fatalf("paginated %v", all)
	}
	f, err := client.DescribeInstanceTopology(ctx, &ec2.DescribeInstanceTopologyInput{Filters: []types.Filter{{Name: aws.String("instance-type"), Values: []string{"p5*"}}}})
	if err != nil || len(f.Instances) != 1 {
		t.Fatalf("filtered %+v, %v", f, err)
	}
	_, err = client.DescribeInstanceTopology(ctx, &ec2.DescribeInstanceTopologyInput{InstanceIds: []string{a.ID}, MaxResults: aws.Int32(5)})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidParameterCombination")
}

// Throttling is off by default; on, each action has its own token bucket
// (AWS's defaults, or a test's), a call finding it empty is answered 503
// RequestLimitExceeded and counted, tokens come back with time, and the
// SDK's standard retryer retries the throttled call.
func TestThrottling(t *testing.T) {
	c, clk := newCloud(t, nil)
	client := ec2Client(c, staticCreds(testUser))
	ctx := context.Background()
	describe := func() error {
		_, err := client.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
		return err
	}
	for range 150 {
		if err := describe(); err != nil {
			t.Fatalf("throttled by default: %v", err)
		}
	}
	if b := DefaultBuckets()[ActionDescribeInstances]; b.Size != 100 || b.Refill != 20 {
		t.Fatalf("DescribeInstances bucket %+v", b)
	}

	c.Throttle(nil)
	for i := range 100 {
		if err := describe(); err != nil {
			t.Fatalf("call %d of a full bucket: %v", i, err)
		}
	}
	wantAPIError(t, describe(), http.StatusServiceUnavailable, "RequestLimitExceeded")
	if n := c.Throttled(ActionDescribeAvailabilityZones); n != 1 {
		t.Fatalf("%d throttled calls counted", n)
	}
	// Other actions have buckets of their own.
	if _, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(100 * time.Millisecond) // two tokens at 20 a second
	for range 2 {
		if err := describe(); err != nil {
			t.Fatal(err)
		}
	}
	wantAPIError(t, describe(), http.StatusServiceUnavailable, "RequestLimitExceeded")

	// The SDK retries a throttled call: a bucket of one token, refilled
	// while the retryer waits.
	c.Throttle(map[string]Bucket{ActionDescribeInstances: {Size: 1, Refill: 1}})
	retrying := ec2.NewFromConfig(withRetries(sdkConfig(c, staticCreds(testUser)), 3), func(o *ec2.Options) {
		o.APIOptions = append(o.APIOptions, afterSigning(func(r *smithyhttp.Request) (*smithyhttp.Request, error) {
			if c.Throttled(ActionDescribeInstances) > 0 {
				clk.Advance(time.Second) // time passes between attempts
			}
			return r, nil
		}))
	})
	for range 2 {
		if _, err := retrying.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
			t.Fatalf("with retries: %v", err)
		}
	}
	if n := c.Throttled(ActionDescribeInstances); n != 1 {
		t.Fatalf("%d throttled DescribeInstances, want 1 (then retried)", n)
	}
	c.NoThrottle()
	for range 5 {
		if _, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
			t.Fatal(err)
		}
	}
}
