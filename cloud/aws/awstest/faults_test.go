package awstest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// Fail's faults reach the SDK as the error codes and statuses asked for,
// queue in order, count as calls, and retrying SDK clients get past them.
func TestFail(t *testing.T) {
	c, _ := newCloud(t, nil)
	in := c.Put(Instance{PrivateIP: "127.1.0.1"})
	ctx := context.Background()
	ec2c := ec2Client(c, staticCreds(testUser))
	stsc := stsClient(c, staticCreds(testUser))

	c.Fail(ActionDescribeInstances, 1, http.StatusServiceUnavailable, "RequestLimitExceeded")
	c.Fail(ActionDescribeInstances, 1, http.StatusBadRequest, "InvalidParameterValue")
	_, err := ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
	ae := wantAPIError(t, err, http.StatusServiceUnavailable, "RequestLimitExceeded")
	wantMessage(t, ae, "Fail")
	_, err = ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidParameterValue")
	if _, err := ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatalf("after the faults: %v", err)
	}
	if n := c.Calls(ActionDescribeInstances); n != 3 {
		t.Fatalf("Calls(DescribeInstances) = %d, want 3", n)
	}

	// STS faults are in STS's error format; a Fail does not touch other
	// actions.
	c.Fail(ActionGetCallerIdentity, 2, http.StatusInternalServerError, "InternalFailure")
	if _, err := ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatal(err)
	}
	_, err = stsc.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	wantAPIError(t, err, http.StatusInternalServerError, "InternalFailure")
	// A retrying client gets past the second one.
	retrying := sts.NewFromConfig(withRetries(sdkConfig(c, staticCreds(testUser)), 3))
	if _, err := retrying.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{}); err != nil {
		t.Fatalf("retried past a 500: %v", err)
	}
	if n := c.Calls(ActionGetCallerIdentity); n != 3 {
		t.Fatalf("Calls(GetCallerIdentity) = %d, want 3", n)
	}

	// n <= 0 clears an action's queue.
	c.Fail(ActionDescribeInstances, 5, 500, "InternalError")
	c.Fail(ActionDescribeInstances, 0, 0, "")
	if _, err := ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatalf("after clearing: %v", err)
	}

	// IMDS faults answer the status with the code as the body.
	client := imdsClient(t, c, in.ID)
	if _, err := metadata(t, client, "instance-id"); err != nil { // holds a token now
		t.Fatal(err)
	}
	c.Fail(ActionIMDS, 1, http.StatusServiceUnavailable, "SlowDown")
	_, err = metadata(t, client, "instance-id")
	wantStatus(t, err, http.StatusServiceUnavailable)
	if got, err := metadata(t, client, "instance-id"); err != nil || got != in.ID {
		t.Fatalf("after the IMDS fault: %q, %v", got, err)
	}
	url, _ := c.IMDS(in.ID)
	c.Fail(ActionIMDS, 1, http.StatusInternalServerError, "Broken")
	if resp, body := rawIMDS(t, http.MethodGet, url+"/latest/meta-data/", nil); resp.StatusCode != 500 || body != "Broken" {
		t.Fatalf("IMDS fault: %d %q", resp.StatusCode, body)
	}
}

// The SDK corrects its signing clock from the Date header, so a cloud whose
// clock is 20 minutes ahead of the machine's works with a retrying client
// after one refused attempt, as AWS does with a skewed client.
func TestClockSkewCorrection(t *testing.T) {
	c, clk := newCloud(t, nil)
	clk.Advance(20 * time.Minute)
	client := sts.NewFromConfig(withRetries(sdkConfig(c, staticCreds(testUser)), 3))
	if _, err := client.GetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{}); err != nil {
		t.Fatal(err)
	}
	if c.Refused("SignatureDoesNotMatch") != 1 || c.Calls(ActionGetCallerIdentity) != 1 {
		t.Fatalf("refused %d, answered %d; want 1 and 1", c.Refused("SignatureDoesNotMatch"), c.Calls(ActionGetCallerIdentity))
	}
	// The client keeps its correction.
	if _, err := client.GetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{}); err != nil || c.Refused("SignatureDoesNotMatch") != 1 {
		t.Fatalf("second call: %v, refused %d", err, c.Refused("SignatureDoesNotMatch"))
	}
}

// Put's defaults, its refusals, and the rest of the instance API.
func TestInstances(t *testing.T) {
	c, clk := newCloud(t, nil)
	in := c.Put(Instance{PrivateIP: "127.3.4.5"})
	if !instanceIDPattern.MatchString(in.ID) || len(in.ID) != 19 {
		t.Fatalf("assigned id %q", in.ID)
	}
	if in.Zone != "us-east-1a" || in.InstanceType != "m5.large" || in.State != "running" ||
		in.PrivateDNSName != "ip-127-3-4-5.ec2.internal" || !in.LaunchTime.Equal(clk.Now()) || !in.Created.Equal(in.LaunchTime) ||
		!strings.HasPrefix(in.ImageID, "ami-") {
		t.Fatalf("defaults: %+v", in)
	}
	// A creation time alone is the launch time too; a launch time alone is
	// the creation time too; both are kept by a Put that leaves them zero.
	made := clk.Now().Add(-time.Hour)
	if got := c.Put(Instance{PrivateIP: "127.3.4.7", Created: made}); !got.Created.Equal(made) || !got.LaunchTime.Equal(made) {
		t.Fatalf("created only: created %v, launched %v; want both %v", got.Created, got.LaunchTime, made)
	}
	started := c.Put(Instance{PrivateIP: "127.3.4.8", LaunchTime: made, Created: made.Add(-time.Hour)})
	if kept := c.Put(Instance{ID: started.ID, PrivateIP: "127.3.4.8"}); !kept.Created.Equal(made.Add(-time.Hour)) || !kept.LaunchTime.Equal(made) {
		t.Fatalf("replaced without times: created %v, launched %v", kept.Created, kept.LaunchTime)
	}
	if other := c.Put(Instance{PrivateIP: "127.3.4.6"}); other.ID == in.ID {
		t.Fatal("two instances got one id")
	}
	// Replacing keeps the launch time and copies the tags.
	tags := map[string]string{"a": "1"}
	clk.Advance(time.Minute)
	in.Tags = tags
	c.Put(in)
	tags["a"] = "changed"
	got, ok := c.Get(in.ID)
	if !ok || got.Tags["a"] != "1" || !got.LaunchTime.Equal(in.LaunchTime) {
		t.Fatalf("replaced: %+v", got)
	}
	got.Tags["a"] = "changed too"
	if again, _ := c.Get(in.ID); again.Tags["a"] != "1" {
		t.Fatal("Get shares its tags with the cloud")
	}
	if err := c.SetState(in.ID, "sleeping"); err == nil {
		t.Fatal("an unknown state was set")
	}
	if err := c.SetState("i-0123456789abcdef0", "running"); err == nil {
		t.Fatal("the state of an unknown instance was set")
	}
	c.Delete(in.ID)
	if _, ok := c.Get(in.ID); ok {
		t.Fatal("deleted, still there")
	}

	for name, bad := range map[string]Instance{
		"no private IP":         {},
		"private IP off loop":   {PrivateIP: "10.0.0.1"},
		"IPv6 private IP":       {PrivateIP: "::1"},
		"public IP off loop":    {PrivateIP: "127.0.0.2", PublicIP: "8.8.8.8"},
		"zone of another place": {PrivateIP: "127.0.0.2", Zone: "eu-west-1a"},
		"malformed id":          {PrivateIP: "127.0.0.2", ID: "i-XYZ"},
		"unknown state":         {PrivateIP: "127.0.0.2", State: "asleep"},
		"created after launch":  {PrivateIP: "127.0.0.2", LaunchTime: clk.Now(), Created: clk.Now().Add(time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("Put did not panic")
				}
			}()
			c.Put(bad)
		})
	}
}

// Start, Close and the endpoint.
func TestLifecycle(t *testing.T) {
	c := New(Options{})
	if c.Endpoint() != "" || c.Account() != DefaultAccount || c.Region() != DefaultRegion {
		t.Fatalf("before Start: %q %q %q", c.Endpoint(), c.Account(), c.Region())
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err == nil {
		t.Fatal("started twice")
	}
	if !strings.HasPrefix(c.Endpoint(), "http://127.0.0.1:") {
		t.Fatalf("endpoint %q", c.Endpoint())
	}
	in := c.Put(Instance{PrivateIP: "127.0.0.2"})
	url, err := c.IMDS(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	client := imds.New(imds.Options{Endpoint: url, Retryer: aws.NopRetryer{}})
	if _, err := client.GetMetadata(context.Background(), &imds.GetMetadataInput{Path: "instance-id"}); err == nil {
		t.Fatal("a metadata service answered after Close")
	}
	if _, err := http.Get(c.Endpoint()); err == nil {
		t.Fatal("the API answered after Close")
	}
	if _, err := c.IMDS(in.ID); err == nil {
		t.Fatal("a metadata service started after Close")
	}
	if err := c.Start(); err == nil {
		t.Fatal("started after Close")
	}
}

// EC2's filter wildcards.
func TestWildcardMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"abc", "abc", true},
		{"abc", "abcd", false},
		{"a*", "a", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbbd", false},
		{"*b*", "abc", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{`a\*c`, "a*c", true},
		{`a\*c`, "abc", false},
		{`a\?`, "a?", true},
		{"*", "", true},
		{"", "", true},
		{"kubernetes.io/cluster/*", "kubernetes.io/cluster/a", true},
		{"*-1", "web-1", true},
		{"*-1", "web-12", false},
	} {
		if got := wildcardMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("wildcardMatch(%q, %q) = %v", tc.pattern, tc.s, got)
		}
	}
}
