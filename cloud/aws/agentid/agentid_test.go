package agentid

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

// TestNewNodeIdentityMakesNoCall: the agent validates its config by
// building the identity, which must not touch the network.
func TestNewNodeIdentityMakesNoCall(t *testing.T) {
	var hits atomic.Int32
	md := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer md.Close()
	for _, cfg := range []nodeid.Config{
		{},
		{MetadataURL: md.URL},
		{MetadataURL: md.URL, NodeNamePolicy: "Tag:k8s-name", Settings: map[string]string{SettingSTSEndpoint: md.URL, SettingRegion: "eu-west-1"}},
	} {
		if _, err := NewNodeIdentity(cfg); err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("construction made %d calls", hits.Load())
	}
}

// nodeidtest.Check: registered and refusing what every backend refuses;
// its own refusals: unknown settings, bad STS endpoints and regions,
// policies it has not.
func TestShared(t *testing.T) {
	nodeidtest.Check(t, nodeidtest.Spec[*NodeIdentity]{Name: Name, New: func(cfg nodeid.Config) (*NodeIdentity, error) { return NewNodeIdentity(cfg) },
		Refusals: map[string]nodeid.Config{
			"unknown setting":      {Settings: map[string]string{"stsendpoint": "https://sts.example"}},
			"another unknown":      {Settings: map[string]string{"metadataURL": "http://127.0.0.1:1"}},
			"endpoint with a path": {Settings: map[string]string{SettingSTSEndpoint: "https://sts.example/v1"}},
			"endpoint not http":    {Settings: map[string]string{SettingSTSEndpoint: "sts.us-east-1.amazonaws.com"}},
			"bad region":           {Settings: map[string]string{SettingRegion: "us east 1"}},
			"empty region":         {Settings: map[string]string{SettingRegion: ""}},
			"bad policy":           {NodeNamePolicy: "Hostname"},
			"bad tag policy":       {NodeNamePolicy: "Tag:aws:name"},
		}})
}

// TestInstanceNamePolicies: each policy names the Node from metadata.
func TestInstanceNamePolicies(t *testing.T) {
	c := awstest.NewStarted(t, awstest.Options{})
	tagged := c.Put(awstest.Instance{PrivateIP: "127.0.0.20", PrivateDNSName: "IP-10-0-0-20.EC2.Internal", Role: testRole,
		Tags: map[string]string{"Name": "web one", "k8s-name": "Node-20"}, MetadataTags: true})
	untagged := c.Put(awstest.Instance{PrivateIP: "127.0.0.21", Role: testRole, Zone: "us-east-1c",
		Tags: map[string]string{"Name": "hidden", "k8s-name": "node-21"}})
	ctx := context.Background()
	instance := func(in awstest.Instance, policy string) (nodeid.Instance, error) {
		t.Helper()
		u, err := c.IMDS(in.ID)
		if err != nil {
			t.Fatal(err)
		}
		n, err := NewNodeIdentity(nodeid.Config{MetadataURL: u, NodeNamePolicy: policy})
		if err != nil {
			t.Fatal(err)
		}
		return n.Instance(ctx)
	}
	for _, tc := range []struct {
		in       awstest.Instance
		policy   string
		nodeName string
		name     string
	}{
		{tagged, "", "ip-10-0-0-20.ec2.internal", "web one"},
		{tagged, PolicyPrivateDNSName, "ip-10-0-0-20.ec2.internal", "web one"},
		{tagged, PolicyInstanceID, tagged.ID, "web one"},
		{tagged, "Tag:k8s-name", "node-20", "web one"},
		{tagged, "Tag:Name", "web one", "web one"},
		{untagged, "", "ip-127-0-0-21.ec2.internal", untagged.ID},
		{untagged, PolicyInstanceID, untagged.ID, untagged.ID},
	} {
		got, err := instance(tc.in, tc.policy)
		if err != nil {
			t.Fatalf("%s under %q: %v", tc.in.ID, tc.policy, err)
		}
		want := nodeid.Instance{ID: tc.in.ID, Name: tc.name, NodeName: tc.nodeName, ProviderID: "aws:///" + tc.in.Zone + "/" + tc.in.ID, InternalIP: tc.in.PrivateIP}
		if got != want {
			t.Errorf("under %q: %+v, want %+v", tc.policy, got, want)
		}
	}
	// A tag policy needs the tag, readable in metadata.
	for _, in := range []awstest.Instance{untagged, tagged} {
		if got, err := instance(in, "Tag:missing"); err == nil || !strings.Contains(err.Error(), "no node name") {
			t.Errorf("%s under Tag:missing: %+v, %v; want an error", in.ID, got, err)
		}
	}
	if _, err := instance(untagged, "Tag:k8s-name"); err == nil {
		t.Error("a tag policy without metadata tags: no error")
	}
}

// TestEvidenceRegionSetting: the region setting overrides metadata's.
func TestEvidenceRegionSetting(t *testing.T) {
	w := newWorld(t, awstest.Options{})
	n := w.agentOf(w.in.ID, map[string]string{SettingRegion: "eu-west-1", SettingSTSEndpoint: w.cloud.Endpoint()})
	r, err := DecodeSTSRequest(w.evidenceOf(n, nodeidtest.NewBinding(t)))
	if err != nil {
		t.Fatal(err)
	}
	auth, err := ParseAuthorization(r.Authorization)
	if err != nil || auth.Region != "eu-west-1" || auth.Service != "sts" {
		t.Fatalf("scope %+v, %v", auth, err)
	}
}

func TestEvidenceErrors(t *testing.T) {
	w := newWorld(t, awstest.Options{})
	ctx := context.Background()
	for _, b := range []string{"", strings.Repeat("A", maxBinding+1), "with space", "new\nline"} {
		if _, err := w.agent.Evidence(ctx, b); err == nil {
			t.Errorf("binding %q: no error", b)
		}
	}
	noRole := w.cloud.Put(awstest.Instance{PrivateIP: "127.0.0.30"})
	if _, err := w.agentOf(noRole.ID, nil).Evidence(ctx, nodeidtest.NewBinding(t)); err == nil {
		t.Error("an instance without an instance profile: no error")
	}
	if err := w.cloud.SetState(w.in.ID, "stopped"); err != nil {
		t.Fatal(err)
	}
	u, err := w.cloud.IMDS(w.in.ID)
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNodeIdentity(nodeid.Config{MetadataURL: u}, withIMDSOptions(func(o *imds.Options) { o.Retryer = aws.NopRetryer{} }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Evidence(ctx, nodeidtest.NewBinding(t)); err == nil {
		t.Error("a stopped instance's metadata: no error")
	}
	if _, err := n.Instance(ctx); err == nil {
		t.Error("a stopped instance's metadata: no error")
	}
}

// The global STS endpoint accepts only signatures for us-east-1: an agent
// of another region is refused that endpoint, at start when the region
// setting names the region, else when it signs; in us-east-1 it signs for
// us-east-1 and STS (the stand-in, answering for the host as AWS does)
// accepts it.
func TestGlobalSTSEndpoint(t *testing.T) {
	global := map[string]string{SettingSTSEndpoint: "https://" + GlobalSTSHost}
	if _, err := NewNodeIdentity(nodeid.Config{Settings: map[string]string{SettingSTSEndpoint: "https://" + GlobalSTSHost, SettingRegion: "eu-west-1"}}); err == nil ||
		!strings.Contains(err.Error(), "https://sts.eu-west-1.amazonaws.com") {
		t.Fatalf("global endpoint with region eu-west-1: %v", err)
	}
	if _, err := NewNodeIdentity(nodeid.Config{Settings: map[string]string{SettingSTSEndpoint: "https://sts.us-west-2.amazonaws.com", SettingRegion: "eu-west-1"}}); err == nil {
		t.Fatal("another region's endpoint: accepted")
	}

	eu := newWorld(t, awstest.Options{Region: "eu-west-1"})
	if _, err := eu.agentOf(eu.in.ID, global).Evidence(context.Background(), nodeidtest.NewBinding(t)); err == nil || !strings.Contains(err.Error(), "global endpoint") {
		t.Fatalf("global endpoint in eu-west-1 (region from metadata): %v", err)
	}
	// What the check spares: signed for the node's region, the global
	// endpoint refuses the request.
	creds, err := eu.cloud.RoleCredentials(eu.in.ID)
	if err != nil {
		t.Fatal(err)
	}
	r, err := SignCallerIdentity(context.Background(), v4.NewSigner(), creds, "https://"+GlobalSTSHost, "eu-west-1", nodeidtest.NewBinding(t), eu.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if code := postSigned(t, eu.cloud, "https://"+GlobalSTSHost, r); code != http.StatusForbidden {
		t.Fatalf("signed for eu-west-1 at the global endpoint: HTTP %d, want 403", code)
	}

	us := newWorld(t, awstest.Options{})
	b := nodeidtest.NewBinding(t)
	r, err = DecodeSTSRequest(us.evidenceOf(us.agentOf(us.in.ID, global), b))
	if err != nil {
		t.Fatal(err)
	}
	if auth, err := ParseAuthorization(r.Authorization); err != nil || auth.Region != "us-east-1" {
		t.Fatalf("scope %+v, %v", auth, err)
	}
	if code := postSigned(t, us.cloud, "https://"+GlobalSTSHost, r); code != http.StatusOK {
		t.Fatalf("signed for us-east-1 at the global endpoint: HTTP %d", code)
	}
}

// postSigned sends the signed request to endpoint (served by the cloud
// under AWS's name) and returns the HTTP status.
func postSigned(t *testing.T, c *awstest.Cloud, endpoint string, r STSRequest) int {
	t.Helper()
	req, err := http.NewRequest(STSMethod, endpoint+"/", strings.NewReader(STSBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", STSContentType)
	req.Header.Set("X-Amz-Date", r.Date)
	req.Header.Set("X-Amz-Security-Token", r.SecurityToken)
	req.Header.Set(BindingHeader, r.Binding)
	req.Header.Set("Authorization", r.Authorization)
	resp, err := c.AWSNamesClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestTPMKey: an EC2 instance quotes with the default AK and sends its EK,
// which the approver checks against GetInstanceTpmEkPub.
func TestTPMKey(t *testing.T) {
	k := (&NodeIdentity{}).TPMKey()
	if !k.WithEK || k.Load == nil {
		t.Fatalf("TPMKey %+v: want the default AK with the EK", k)
	}
}
