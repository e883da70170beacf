package awstest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// GetCallerIdentity names a user by its IAM ARN, and an instance's role
// credentials, as the SDK on the instance reads them from IMDS, by the
// assumed-role ARN whose session is the instance id.
func TestGetCallerIdentity(t *testing.T) {
	c, _ := newCloud(t, func(o *Options) { o.Account = "210987654321" })
	in := c.Put(Instance{PrivateIP: "127.1.0.1", Role: "mooring-node"})
	ctx := context.Background()

	out, err := stsClient(c, staticCreds(testUser)).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(out.Arn); got != "arn:aws:iam::210987654321:user/ccm" {
		t.Fatalf("user ARN %q", got)
	}
	if aws.ToString(out.Account) != "210987654321" || !strings.HasPrefix(aws.ToString(out.UserId), "AIDA") {
		t.Fatalf("user: account %q, user id %q", aws.ToString(out.Account), aws.ToString(out.UserId))
	}

	creds := instanceRoleCreds(t, c, in.ID)
	out, err = stsClient(c, creds).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := aws.ToString(out.Arn), "arn:aws:sts::210987654321:assumed-role/mooring-node/"+in.ID; got != want {
		t.Fatalf("role ARN %q, want %q", got, want)
	}
	if uid := aws.ToString(out.UserId); !strings.HasPrefix(uid, "AROA") || !strings.HasSuffix(uid, ":"+in.ID) {
		t.Fatalf("role user id %q", uid)
	}
	// What the SDK read from IMDS is the cloud's current set (the SDK caps
	// its expiry to an hour from its own clock, so that is not compared).
	got, err := creds.Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := c.RoleCredentials(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.AccessKeyID != want.AccessKeyID || got.SessionToken != want.SessionToken || !strings.HasPrefix(got.AccessKeyID, "ASIA") {
		t.Fatalf("IMDS credentials %+v, RoleCredentials %+v", got, want)
	}
	if n := c.Calls(ActionGetCallerIdentity); n != 2 {
		t.Fatalf("Calls(GetCallerIdentity) = %d, want 2", n)
	}

	// STS answers nothing else.
	_, err = stsClient(c, staticCreds(testUser)).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String("arn:aws:iam::210987654321:role/x"), RoleSessionName: aws.String("s")})
	wantAPIError(t, err, http.StatusBadRequest, "InvalidAction")
}

// Instance-profile credentials rotate when asked within a third of their
// lifetime of expiry; the earlier set works until it expires.
func TestRoleCredentialRotation(t *testing.T) {
	c, clk := newCloud(t, nil) // 6h lifetime: rotation once 2h or less remain
	in := c.Put(Instance{PrivateIP: "127.1.0.1", Role: "node"})
	first, err := c.RoleCredentials(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Expires.Equal(clk.Now().Add(6 * time.Hour)) {
		t.Fatalf("expiry %v, want 6h from %v", first.Expires, clk.Now())
	}
	clk.Advance(4*time.Hour - time.Second)
	same, _ := c.RoleCredentials(in.ID)
	if same.AccessKeyID != first.AccessKeyID {
		t.Fatal("rotated with more than a third of the lifetime left")
	}
	clk.Advance(time.Second)
	// The metadata service rotates them too: read through IMDS.
	second, err := instanceRoleCreds(t, c, in.ID).Retrieve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if second.AccessKeyID == first.AccessKeyID || second.SessionToken == first.SessionToken {
		t.Fatal("not rotated with a third of the lifetime left")
	}
	if cur, _ := c.RoleCredentials(in.ID); cur.AccessKeyID != second.AccessKeyID || !cur.Expires.Equal(clk.Now().Add(6*time.Hour)) {
		t.Fatalf("current set %s expiring %v, want %s expiring 6h from now", cur.AccessKeyID, cur.Expires, second.AccessKeyID)
	}
	whoami := func(creds aws.Credentials) error {
		client := stsClient(c, roleCredsProvider(creds), func(o *sts.Options) { o.HTTPSignerV4 = signerAt{at: clk.Now} })
		_, err := client.GetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{})
		return err
	}
	if err := whoami(first); err != nil {
		t.Fatalf("the earlier set before its expiry: %v", err)
	}
	if err := whoami(second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	wantAPIError(t, whoami(first), http.StatusForbidden, "ExpiredToken")
	if err := whoami(second); err != nil {
		t.Fatal(err)
	}

	// No instance profile, no credentials; unknown instance, an error.
	bare := c.Put(Instance{PrivateIP: "127.1.0.2"})
	if _, err := c.RoleCredentials(bare.ID); err == nil {
		t.Fatal("credentials for an instance without a profile")
	}
	if _, err := c.RoleCredentials("i-0123456789abcdef0"); err == nil {
		t.Fatal("credentials for an unknown instance")
	}
}

// An instance's profile can be swapped for another role's: DescribeInstances
// shows the new profile, the metadata service serves the new role's
// credentials, and the old role's set still names the old role until it
// expires. A role recreated under its name gets a new unique id, which only
// sets issued after carry in their UserId.
func TestProfileSwapAndRoleRecreation(t *testing.T) {
	c, clk := newCloud(t, nil)
	in := c.Put(Instance{PrivateIP: "127.1.0.1", Role: "node", InstanceProfile: "node-profile"})
	ctx := context.Background()
	profileOf := func() *types.IamInstanceProfile {
		t.Helper()
		client := ec2Client(c, staticCreds(testUser), func(o *ec2.Options) { o.HTTPSignerV4 = signerAt{at: clk.Now} })
		out, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{in.ID}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Reservations[0].Instances[0].IamInstanceProfile
	}
	whoami := func(creds aws.Credentials) (arn, userID string) {
		t.Helper()
		client := stsClient(c, roleCredsProvider(creds), func(o *sts.Options) { o.HTTPSignerV4 = signerAt{at: clk.Now} })
		out, err := client.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.Arn), aws.ToString(out.UserId)
	}
	if p := profileOf(); aws.ToString(p.Arn) != "arn:aws:iam::123456789012:instance-profile/node-profile" || !strings.HasPrefix(aws.ToString(p.Id), "AIPA") {
		t.Fatalf("profile %+v", p)
	}
	old, err := c.RoleCredentials(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	nodeID := c.RoleID("node")
	if arn, uid := whoami(old); arn != "arn:aws:sts::123456789012:assumed-role/node/"+in.ID || uid != nodeID+":"+in.ID {
		t.Fatalf("before the swap: %s, %s", arn, uid)
	}

	if err := c.SetInstanceProfile(in.ID, "admin-profile", "admin"); err != nil {
		t.Fatal(err)
	}
	if p := profileOf(); aws.ToString(p.Arn) != "arn:aws:iam::123456789012:instance-profile/admin-profile" {
		t.Fatalf("after the swap: profile %+v", p)
	}
	cur, err := instanceRoleCreds(t, c, in.ID).Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if arn, _ := whoami(cur); arn != "arn:aws:sts::123456789012:assumed-role/admin/"+in.ID {
		t.Fatalf("the metadata service's set after the swap is %s", arn)
	}
	if arn, _ := whoami(old); arn != "arn:aws:sts::123456789012:assumed-role/node/"+in.ID {
		t.Fatalf("the set issued before the swap is now %s", arn)
	}

	if err := c.SetInstanceProfile(in.ID, "node-profile", "node"); err != nil {
		t.Fatal(err)
	}
	newID := c.RecreateRole("node")
	if newID == nodeID || !strings.HasPrefix(newID, "AROA") || c.RoleID("node") != newID {
		t.Fatalf("recreated role id %q (was %q)", newID, nodeID)
	}
	fresh, err := c.RoleCredentials(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, uid := whoami(fresh); uid != newID+":"+in.ID {
		t.Fatalf("a set issued after the recreation has user id %s, want %s:%s", uid, newID, in.ID)
	}
	if _, uid := whoami(old); uid != nodeID+":"+in.ID {
		t.Fatalf("a set issued before the recreation has user id %s", uid)
	}

	// Disassociated: no profile shown, no credentials.
	if err := c.SetInstanceProfile(in.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	if p := profileOf(); p != nil {
		t.Fatalf("disassociated, yet profile %+v", p)
	}
	if _, err := c.RoleCredentials(in.ID); err == nil {
		t.Fatal("credentials without a profile")
	}
	if err := c.SetInstanceProfile(in.ID, "", "node"); err == nil {
		t.Fatal("a role without a profile was accepted")
	}
	if err := c.SetInstanceProfile("i-0123456789abcdef0", "p", "r"); err == nil {
		t.Fatal("an unknown instance was accepted")
	}
}

// An endpoint of AWS's accepts only signatures for its own region: the
// global sts.amazonaws.com only us-east-1's, a regional one only its
// region's, whatever the cloud's region; any other host is the cloud's
// region. The SDK signs for the region of its config.
func TestSTSEndpointRegion(t *testing.T) {
	c, _ := newCloud(t, func(o *Options) { o.Region = "eu-west-1" })
	ctx := context.Background()
	whoami := func(endpoint, region string) error {
		cfg := sdkConfig(c, staticCreds(testUser))
		cfg.HTTPClient = c.AWSNamesClient()
		cfg.Region = region
		_, err := sts.NewFromConfig(cfg, func(o *sts.Options) { o.BaseEndpoint = aws.String(endpoint) }).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
		return err
	}
	for _, tc := range []struct {
		endpoint, region string
		ok               bool
	}{
		{"https://sts.amazonaws.com", "us-east-1", true},
		{"https://sts.amazonaws.com", "eu-west-1", false},
		{"https://sts.eu-west-1.amazonaws.com", "eu-west-1", true},
		{"https://sts.eu-west-1.amazonaws.com", "us-east-1", false},
		{"https://sts.us-west-2.amazonaws.com", "us-west-2", true},
		{"https://sts.us-west-2.amazonaws.com", "eu-west-1", false},
		{"https://sts-fips.us-east-2.amazonaws.com", "us-east-2", true},
		{"https://sts.cn-north-1.amazonaws.com.cn", "cn-north-1", true},
		{c.Endpoint(), "eu-west-1", true},
		{c.Endpoint(), "us-east-1", false},
	} {
		err := whoami(tc.endpoint, tc.region)
		if tc.ok != (err == nil) {
			t.Errorf("%s signed for %s: %v; want ok %v", tc.endpoint, tc.region, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "SignatureDoesNotMatch") {
			t.Errorf("%s signed for %s: %v; want SignatureDoesNotMatch", tc.endpoint, tc.region, err)
		}
	}
}
