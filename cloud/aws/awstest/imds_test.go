package awstest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// metadata reads a metadata path with the SDK's IMDS client.
func metadata(t *testing.T, client *imds.Client, path string) (string, error) {
	t.Helper()
	out, err := client.GetMetadata(context.Background(), &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", err
	}
	defer out.Content.Close()
	b, err := io.ReadAll(out.Content)
	return string(b), err
}

func wantStatus(t *testing.T, err error, status int) {
	t.Helper()
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != status {
		t.Fatalf("want HTTP %d, got %v", status, err)
	}
}

// The SDK's IMDS client reads an instance's metadata and identity document
// from its own metadata service.
func TestIMDSServesTheInstance(t *testing.T) {
	c, _ := newCloud(t, func(o *Options) { o.Region = "eu-central-1" })
	in := c.Put(Instance{
		PrivateIP:     "127.1.0.7",
		PublicIP:      "127.2.0.7",
		PublicDNSName: "ec2-127-2-0-7.eu-central-1.compute.amazonaws.com",
		InstanceType:  "t3.medium",
		Zone:          "eu-central-1b",
		Role:          "node",
		Tags:          map[string]string{"Name": "worker-7", "team": "a"},
	})
	client := imdsClient(t, c, in.ID)
	for path, want := range map[string]string{
		"instance-id":                 in.ID,
		"instance-type":               "t3.medium",
		"local-ipv4":                  "127.1.0.7",
		"local-hostname":              "ip-127-1-0-7.eu-central-1.compute.internal",
		"public-ipv4":                 "127.2.0.7",
		"public-hostname":             in.PublicDNSName,
		"placement/availability-zone": "eu-central-1b",
		"placement/region":            "eu-central-1",
		"iam/security-credentials/":   "node",
	} {
		got, err := metadata(t, client, path)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", path, got, err, want)
		}
	}
	region, err := client.GetRegion(context.Background(), &imds.GetRegionInput{})
	if err != nil || region.Region != "eu-central-1" {
		t.Fatalf("GetRegion: %+v, %v", region, err)
	}
	doc, err := client.GetInstanceIdentityDocument(context.Background(), &imds.GetInstanceIdentityDocumentInput{})
	if err != nil {
		t.Fatal(err)
	}
	d := doc.InstanceIdentityDocument
	if d.InstanceID != in.ID || d.AccountID != DefaultAccount || d.Region != "eu-central-1" || d.AvailabilityZone != "eu-central-1b" ||
		d.InstanceType != "t3.medium" || d.PrivateIP != "127.1.0.7" || d.Version != "2017-09-30" || d.ImageID != in.ImageID ||
		d.Architecture != "x86_64" || !d.PendingTime.Equal(in.LaunchTime) {
		t.Fatalf("identity document %+v", d)
	}
	info, err := client.GetIAMInfo(context.Background(), &imds.GetIAMInfoInput{})
	if err != nil || info.InstanceProfileArn != "arn:aws:iam::123456789012:instance-profile/node" {
		t.Fatalf("GetIAMInfo: %+v, %v", info, err)
	}

	// Tags are served only with instance metadata tags enabled.
	_, err = metadata(t, client, "tags/instance/Name")
	wantStatus(t, err, http.StatusNotFound)
	in.MetadataTags = true
	c.Put(in)
	if got, err := metadata(t, client, "tags/instance"); err != nil || got != "Name\nteam" {
		t.Fatalf("tags/instance: %q, %v", got, err)
	}
	if got, err := metadata(t, client, "tags/instance/Name"); err != nil || got != "worker-7" {
		t.Fatalf("tags/instance/Name: %q, %v", got, err)
	}
	_, err = metadata(t, client, "tags/instance/missing")
	wantStatus(t, err, http.StatusNotFound)

	// Without a public address or profile, those paths are not there.
	bare := c.Put(Instance{PrivateIP: "127.1.0.8"})
	bareClient := imdsClient(t, c, bare.ID)
	for _, path := range []string{"public-ipv4", "public-hostname", "iam/security-credentials/", "tags/instance"} {
		_, err := metadata(t, bareClient, path)
		wantStatus(t, err, http.StatusNotFound)
	}
	listing, err := metadata(t, bareClient, "")
	if err != nil || strings.Contains(listing, "iam/") || !strings.Contains(listing, "instance-id") {
		t.Fatalf("meta-data/ listing %q, %v", listing, err)
	}
	if n := c.Calls(ActionIMDS); n < 20 {
		t.Fatalf("Calls(IMDS) = %d, want every token PUT and GET counted", n)
	}
}

// rawIMDS sends one request to a metadata service.
func rawIMDS(t *testing.T, method, url string, header map[string]string) (*http.Response, string) {
	t.Helper()
	resp, b := cloudtest.Send(t, method, url, header)
	return resp, strings.TrimSpace(string(b))
}

// IMDSv2's rules: a token from PUT with a TTL of 1-21600 s, never through
// a proxy; GETs without a live token are 401.
func TestIMDSTokens(t *testing.T) {
	c, clk := newCloud(t, nil)
	in := c.Put(Instance{PrivateIP: "127.1.0.1"})
	url, err := c.IMDS(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.IMDS(in.ID); again != url || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("IMDS URL %q, then %q", url, again)
	}
	const ttlHeader = "X-aws-ec2-metadata-token-ttl-seconds"
	get := func(token string) int {
		h := map[string]string{}
		if token != "" {
			h["X-aws-ec2-metadata-token"] = token
		}
		resp, _ := rawIMDS(t, http.MethodGet, url+"/latest/meta-data/instance-id", h)
		return resp.StatusCode
	}
	if got := get(""); got != http.StatusUnauthorized {
		t.Fatalf("GET without a token: %d, want 401", got)
	}
	if got := get("made-up"); got != http.StatusUnauthorized {
		t.Fatalf("GET with a made-up token: %d, want 401", got)
	}
	for _, ttl := range []string{"", "0", "21601", "x"} {
		if resp, _ := rawIMDS(t, http.MethodPut, url+"/latest/api/token", map[string]string{ttlHeader: ttl}); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("token TTL %q: %d, want 400", ttl, resp.StatusCode)
		}
	}
	resp, _ := rawIMDS(t, http.MethodPut, url+"/latest/api/token", map[string]string{ttlHeader: "60", "X-Forwarded-For": "127.0.0.9"})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("token PUT through a proxy: %d, want 403", resp.StatusCode)
	}
	if resp, _ := rawIMDS(t, http.MethodGet, url+"/latest/api/token", map[string]string{ttlHeader: "60"}); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("token GET: %d, want 405", resp.StatusCode)
	}
	resp, token := rawIMDS(t, http.MethodPut, url+"/latest/api/token", map[string]string{ttlHeader: "60"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get(ttlHeader) != "60" || token == "" {
		t.Fatalf("token PUT: %d, TTL header %q, token %q", resp.StatusCode, resp.Header.Get(ttlHeader), token)
	}
	if got := get(token); got != http.StatusOK {
		t.Fatalf("GET with the token: %d", got)
	}
	clk.Advance(60 * time.Second)
	if got := get(token); got != http.StatusUnauthorized {
		t.Fatalf("GET with an expired token: %d, want 401", got)
	}
	if n := c.Calls(ActionIMDS); n != 11 {
		t.Fatalf("Calls(IMDS) = %d, want 11", n)
	}
}

// A metadata service answers only while its instance runs: stopped, its
// connections close unanswered and its tokens die; started, it serves
// again; deleted, it is silent.
func TestIMDSFollowsTheInstance(t *testing.T) {
	c, _ := newCloud(t, nil)
	in := c.Put(Instance{PrivateIP: "127.1.0.1", Role: "node"})
	url, err := c.IMDS(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, token := rawIMDS(t, http.MethodPut, url+"/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "600"})
	client := imdsClient(t, c, in.ID)
	retrying := imds.New(imds.Options{Endpoint: url, DisableDefaultMaxBackoff: true, Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
	})})
	for _, cl := range []*imds.Client{client, retrying} {
		if _, err := metadata(t, cl, "instance-id"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SetState(in.ID, "stopped"); err != nil {
		t.Fatal(err)
	}
	calls := c.Calls(ActionIMDS)
	if _, err := metadata(t, client, "instance-id"); err == nil {
		t.Fatal("a stopped instance's metadata service answered")
	}
	if _, err := instanceRoleCreds(t, c, in.ID).Retrieve(context.Background()); err == nil {
		t.Fatal("a stopped instance's metadata service served credentials")
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/latest/meta-data/instance-id", nil)
	req.Header.Set("X-aws-ec2-metadata-token", token)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a stopped instance's metadata service answered %d", resp.StatusCode)
	}
	if c.Calls(ActionIMDS) != calls {
		t.Fatal("unanswered requests were counted")
	}
	if err := c.SetState(in.ID, "running"); err != nil {
		t.Fatal(err)
	}
	if resp, _ := rawIMDS(t, http.MethodGet, url+"/latest/meta-data/instance-id", map[string]string{"X-aws-ec2-metadata-token": token}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a token from before the stop: %d, want 401", resp.StatusCode)
	}
	// The SDK's client drops its token on the 401 and, when it may retry,
	// fetches a new one.
	if _, err := metadata(t, client, "instance-id"); err == nil {
		t.Fatal("the SDK's token from before the stop still works")
	}
	if _, err := metadata(t, retrying, "instance-id"); err != nil {
		t.Fatalf("a retrying client after the start: %v", err)
	}
	if got, err := metadata(t, client, "instance-id"); err != nil || got != in.ID {
		t.Fatalf("after the start: %q, %v", got, err)
	}
	c.Delete(in.ID)
	if _, err := metadata(t, client, "instance-id"); err == nil {
		t.Fatal("a deleted instance's metadata service answered")
	}
	if _, err := c.IMDS("i-0123456789abcdef0"); err == nil {
		t.Fatal("a metadata service for an unknown instance")
	}
}
