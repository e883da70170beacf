package aws

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// clusterTag is the tag of cluster c1, the tests' cluster.
const clusterTag = "kubernetes.io/cluster/c1"

var testUser = awstest.User{Name: "ccm", AccessKeyID: "AKIAMOORINGTEST00001", SecretAccessKey: "mooring-test-secret-0001"}

// env is an awstest cloud and an EC2 client of its user.
type env struct {
	aws *awstest.Cloud
	ec2 *ec2.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, awstest.Options{})
}

// newEnvWith is newEnv with the stand-in's options (testUser added).
func newEnvWith(t *testing.T, opts awstest.Options) *env {
	t.Helper()
	opts.Users = append(opts.Users, testUser)
	c := awstest.New(opts)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	client := ec2.New(ec2.Options{
		Region:       awstest.DefaultRegion,
		BaseEndpoint: aws.String(c.Endpoint()),
		Credentials:  credentials.NewStaticCredentialsProvider(testUser.AccessKeyID, testUser.SecretAccessKey, ""),
		// One call per attempt, so that awstest.Fail counts are exact.
		Retryer: aws.NopRetryer{},
		// Immune to the SDK closing request bodies under net/http on
		// loopback (see awstest.HTTPClient).
		HTTPClient: awstest.HTTPClient(),
	})
	return &env{aws: c, ec2: client}
}

func (e *env) put(t *testing.T, in awstest.Instance) awstest.Instance {
	t.Helper()
	return e.aws.Put(in)
}

// running puts a running instance of the cluster.
func (e *env) running(t *testing.T, ip string) awstest.Instance {
	t.Helper()
	return e.put(t, awstest.Instance{PrivateIP: ip, Tags: map[string]string{clusterTag: "owned"}})
}

func (e *env) source() Source {
	return Source{EC2: e.ec2, Region: awstest.DefaultRegion, ClusterID: "c1", RequestTimeout: 10 * time.Second}
}

func (e *env) config() Config {
	return Config{
		Region: awstest.DefaultRegion, ClusterID: "c1", Account: e.aws.Account(), NodeRoles: []string{"node"},
		STSEndpoint: e.aws.Endpoint(),
	}
}

// provider builds a Cloud over the env's EC2 client; minRefresh bounds how
// often a miss lists again (0: the default).
func (e *env) provider(t *testing.T, minRefresh time.Duration) *Cloud {
	t.Helper()
	cfg := e.config()
	cfg.MinRefreshInterval = metav1.Duration{Duration: minRefresh}
	p, err := NewWithClients(cfg, e.ec2, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func node(name, providerID string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{ProviderID: providerID}}
}

func TestInstanceMetadata(t *testing.T) {
	e := newEnv(t)
	in := e.put(t, awstest.Instance{PrivateIP: "127.0.0.5", PublicIP: "127.0.3.5", Zone: "us-east-1d", InstanceType: "c6i.xlarge",
		PublicDNSName: "ec2-127-0-3-5.compute-1.amazonaws.com", Tags: map[string]string{clusterTag: "shared", "Name": "worker"}})
	p := e.provider(t, 0)
	ctx := context.Background()
	want := &cloudprovider.InstanceMetadata{
		ProviderID:   "aws:///us-east-1d/" + in.ID,
		InstanceType: "c6i.xlarge",
		NodeAddresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "127.0.0.5"},
			{Type: v1.NodeExternalIP, Address: "127.0.3.5"},
			{Type: v1.NodeInternalDNS, Address: in.PrivateDNSName},
			{Type: v1.NodeHostName, Address: in.PrivateDNSName},
			{Type: v1.NodeExternalDNS, Address: "ec2-127-0-3-5.compute-1.amazonaws.com"},
		},
		Zone:   "us-east-1d",
		Region: awstest.DefaultRegion,
	}
	for _, n := range []*v1.Node{
		node(in.PrivateDNSName, ""), // found by the node name policy
		node("whatever", want.ProviderID),
		node("whatever", "aws:////"+in.ID), // the upstream's legacy forms
		node("whatever", in.ID),
	} {
		md, err := p.InstanceMetadata(ctx, n)
		if err != nil {
			t.Fatalf("node %s (%q): %v", n.Name, n.Spec.ProviderID, err)
		}
		if !reflect.DeepEqual(md, want) {
			t.Fatalf("node %s (%q):\n got %+v\nwant %+v", n.Name, n.Spec.ProviderID, md, want)
		}
	}
	if calls := e.aws.Calls("DescribeInstances"); calls != 1 {
		t.Errorf("%d DescribeInstances calls for four lookups, want 1 (the shared view)", calls)
	}
}

// TestInstanceStates: the EC2 states beyond the conformance suite's
// (pending, stopped, terminated by providerID) through InstanceExists,
// InstanceShutdown and InstanceMetadata, by providerID and by Node name.
func TestInstanceStates(t *testing.T) {
	e := newEnv(t)
	p := e.provider(t, 0)
	in := e.running(t, "127.0.0.7")
	ctx := context.Background()
	for _, tc := range []struct {
		state            string
		exists, shutdown bool
		gone             bool // terminated: InstanceNotFound, and no Node name
	}{
		{"running", true, false, false},
		{"stopping", true, true, false},
		{"shutting-down", false, false, true},
	} {
		if err := e.aws.SetState(in.ID, tc.state); err != nil {
			t.Fatal(err)
		}
		p.InstanceView().Invalidate()
		n := node("n", agentid.ProviderID(in.Zone, in.ID))
		exists, err := p.InstanceExists(ctx, n)
		if err != nil || exists != tc.exists {
			t.Errorf("%s: exists %v, %v; want %v", tc.state, exists, err, tc.exists)
		}
		shutdown, err := p.InstanceShutdown(ctx, n)
		if err != nil || shutdown != tc.shutdown {
			t.Errorf("%s: shutdown %v, %v; want %v", tc.state, shutdown, err, tc.shutdown)
		}
		_, err = p.InstanceMetadata(ctx, n)
		if notFound := errors.Is(err, cloudprovider.InstanceNotFound); notFound != tc.gone || (err != nil && !notFound) {
			t.Errorf("%s: metadata error %v; want InstanceNotFound: %v", tc.state, err, tc.gone)
		}

		// By Node name: EC2 gives a terminated instance no private DNS
		// name, so the Node cannot be tied to it, and that is never gone.
		byName := node(in.PrivateDNSName, "")
		exists, err = p.InstanceExists(ctx, byName)
		if tc.gone {
			if err == nil {
				t.Errorf("%s by name: exists %v and no error; want an error", tc.state, exists)
			}
			continue
		}
		if err != nil || exists != tc.exists {
			t.Errorf("%s by name: exists %v, %v; want %v", tc.state, exists, err, tc.exists)
		}
		if shutdown, err := p.InstanceShutdown(ctx, byName); err != nil || shutdown != tc.shutdown {
			t.Errorf("%s by name: shutdown %v, %v; want %v", tc.state, shutdown, err, tc.shutdown)
		}
	}
}

// TestInstanceDeleted: an instance EC2 no longer knows is gone after two
// calls, the list and a DescribeInstances of its id (that it is gone, and
// only after a get, is the conformance suite's).
func TestInstanceDeleted(t *testing.T) {
	e := newEnv(t)
	p := e.provider(t, time.Nanosecond)
	in := e.running(t, "127.0.0.8")
	ctx := context.Background()
	n := node("n", agentid.ProviderID(in.Zone, in.ID))
	if exists, err := p.InstanceExists(ctx, n); err != nil || !exists {
		t.Fatalf("before the deletion: %v, %v", exists, err)
	}
	e.aws.Delete(in.ID)
	p.InstanceView().Invalidate()
	before := e.aws.Calls("DescribeInstances")
	if exists, err := p.InstanceExists(ctx, n); err != nil || exists {
		t.Fatalf("deleted instance: exists %v, %v; want false", exists, err)
	}
	// The list (which began after the question, so its miss is an answer),
	// then the id itself.
	if calls := e.aws.Calls("DescribeInstances") - before; calls != 2 {
		t.Errorf("%d DescribeInstances calls, want 2", calls)
	}
}

// TestViewMissConfirmedByID: the list may lag behind EC2. An instance the
// snapshot does not hold (and that is too young to list again) is asked for
// by id, found, and the view is listed anew.
func TestViewMissConfirmedByID(t *testing.T) {
	e := newEnv(t)
	p := e.provider(t, time.Hour) // a miss never lists again here
	e.running(t, "127.0.0.1")
	ctx := context.Background()
	if err := p.InstanceView().Refresh(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	late := e.running(t, "127.0.0.2")
	n := node("n", agentid.ProviderID(late.Zone, late.ID))
	before := e.aws.Calls("DescribeInstances")
	if exists, err := p.InstanceExists(ctx, n); err != nil || !exists {
		t.Fatalf("an instance newer than the snapshot: exists %v, %v; want true", exists, err)
	}
	if calls := e.aws.Calls("DescribeInstances") - before; calls != 1 {
		t.Fatalf("%d DescribeInstances calls, want the one by id", calls)
	}
	// The view was invalidated: the next lookup lists and finds it.
	if md, err := p.InstanceMetadata(ctx, n); err != nil || md.ProviderID != n.Spec.ProviderID {
		t.Fatalf("after the confirmation: %+v, %v", md, err)
	}
	// An instance of another cluster (left alone: the conformance suite)
	// has no metadata for this cluster.
	foreign := e.put(t, awstest.Instance{PrivateIP: "127.0.0.3", Tags: map[string]string{"kubernetes.io/cluster/c2": "owned"}})
	fn := node("f", agentid.ProviderID(foreign.Zone, foreign.ID))
	if _, err := p.InstanceMetadata(ctx, fn); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("another cluster's instance: metadata %v; want InstanceNotFound", err)
	}
}

// TestOutageIsNeverGone: EC2 failing with the errors beyond the
// conformance suite's (503 Unavailable, InvalidClientTokenId and
// RequestLimitExceeded from the rate limit; a failing get alone) is an
// error of every method, never "gone".
func TestOutageIsNeverGone(t *testing.T) {
	e := newEnv(t)
	in := e.running(t, "127.0.0.4")
	ctx := context.Background()
	byID := node("n", agentid.ProviderID(in.Zone, in.ID))
	byName := node(in.PrivateDNSName, "")

	p := e.provider(t, 0)
	for _, code := range []struct {
		status int
		code   string
	}{{500, "InternalError"}, {400, "RequestLimitExceeded"}, {403, "UnauthorizedOperation"}} {
		for _, n := range []*v1.Node{byID, byName} {
			p.InstanceView().Invalidate()
			e.aws.Fail("DescribeInstances", 1, code.status, code.code)
			if exists, err := p.InstanceExists(ctx, n); err == nil {
				t.Errorf("%s, providerID %q: exists %v and no error", code.code, n.Spec.ProviderID, exists)
			}
			p.InstanceView().Invalidate()
			e.aws.Fail("DescribeInstances", 1, code.status, code.code)
			if _, err := p.InstanceShutdown(ctx, n); err == nil {
				t.Errorf("%s: shutdown answered during an outage", code.code)
			}
			p.InstanceView().Invalidate()
			e.aws.Fail("DescribeInstances", 1, code.status, code.code)
			if _, err := p.InstanceMetadata(ctx, n); err == nil || errors.Is(err, cloudprovider.InstanceNotFound) {
				t.Errorf("%s: metadata error %v during an outage; want an error other than InstanceNotFound", code.code, err)
			}
		}
	}

	// An id EC2 calls malformed (InvalidInstanceID.Malformed) is an error
	// too: only InvalidInstanceID.NotFound means gone.
	if exists, err := p.InstanceExists(ctx, node("odd", "aws:///us-east-1a/i-not-hex")); err == nil {
		t.Fatalf("a malformed id: exists %v and no error", exists)
	}
}

func TestInvalidProviderID(t *testing.T) {
	e := newEnv(t)
	p := e.provider(t, 0)
	for _, id := range []string{"gce://p/z/i-0123", "aws:///us-east-1a/x", "aws://us-east-1a/i-0123"} {
		exists, err := p.InstanceExists(context.Background(), node("n", id))
		if err == nil {
			t.Errorf("%q: exists %v and no error", id, exists)
		}
		if _, err := p.InstanceMetadata(context.Background(), node("n", id)); err == nil {
			t.Errorf("%q: metadata without an error", id)
		}
	}
	if calls := e.aws.Calls("DescribeInstances"); calls != 0 {
		t.Errorf("%d DescribeInstances calls for unparsable providerIDs", calls)
	}
}

// TestProviderInterfaces: the cluster tag is the cluster id, and a
// provider needs an EC2 client and a valid config (its faces are the
// conformance suite's).
func TestProviderInterfaces(t *testing.T) {
	e := newEnv(t)
	if p := e.provider(t, 0); p.ClusterTag() != "c1" {
		t.Fatalf("cluster tag %q", p.ClusterTag())
	}
	if _, err := NewWithClients(e.config(), nil, nil); err == nil {
		t.Error("a provider without an EC2 client")
	}
	bad := e.config()
	bad.Account = "x"
	if _, err := NewWithClients(bad, e.ec2, nil); err == nil || !strings.Contains(err.Error(), "account") {
		t.Errorf("an invalid config: %v", err)
	}
}

// TestFactoryThroughRegistry builds the provider as mooring's binaries do:
// by name through cloud.NewProvider. k8s.io/cloud-provider's registry holds
// the upstream AWS provider under the same name (upstream.go), not this one.
func TestFactoryThroughRegistry(t *testing.T) {
	isolateSDK(t)
	path := filepath.Join(t.TempDir(), "cloud.yaml")
	cfg := "region: us-west-2\nclusterID: c1\naccount: \"123456789012\"\nnodeRoles: [node]\nec2Endpoint: http://127.0.0.1:1\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := cloud.NewProvider(ProviderName, path)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := cp.(*Cloud)
	if !ok {
		t.Fatalf("the backend's %q provider is a %T", ProviderName, cp)
	}
	if c := p.Config(); c.Region != "us-west-2" || c.EC2Endpoint != "http://127.0.0.1:1" || c.EffectiveSTSEndpoint() != "https://sts.us-west-2.amazonaws.com" {
		t.Fatalf("config through the registry: %+v", c)
	}
	if _, err := Factory(strings.NewReader("region: us-east-1\n")); err == nil {
		t.Fatal("Factory accepted an incomplete config")
	}
	if _, err := nodeid.New(ProviderName, nodeid.Config{MetadataURL: "http://127.0.0.1:1"}); err != nil {
		t.Fatalf("the backend's node identity: %v", err)
	}
}

// TestNewWithDefaultChain: New's EC2 client takes its credentials from the
// SDK's default chain (here the environment), its endpoint from the config,
// and its region from the config rather than the environment.
func TestNewWithDefaultChain(t *testing.T) {
	e := newEnv(t)
	in := e.running(t, "127.0.0.9")
	isolateSDK(t)
	t.Setenv("AWS_ACCESS_KEY_ID", testUser.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testUser.SecretAccessKey)
	t.Setenv("AWS_REGION", "eu-west-1") // the config's region wins
	cfg := e.config()
	cfg.EC2Endpoint = e.aws.Endpoint()
	p, err := New(cfg, awsconfig.WithHTTPClient(awstest.HTTPClient()))
	if err != nil {
		t.Fatal(err)
	}
	md, err := p.InstanceMetadata(context.Background(), node(in.PrivateDNSName, ""))
	if err != nil || md.ProviderID != agentid.ProviderID(in.Zone, in.ID) {
		t.Fatalf("metadata through the SDK's default chain: %+v, %v", md, err)
	}
	// Without credentials anywhere the call fails: an error, not "gone".
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	p, err = New(cfg, awsconfig.WithHTTPClient(awstest.HTTPClient()))
	if err != nil {
		t.Fatal(err)
	}
	if exists, err := p.InstanceExists(context.Background(), node("n", agentid.ProviderID(in.Zone, in.ID))); err == nil {
		t.Fatalf("without credentials: exists %v and no error", exists)
	}
}

// isolateSDK keeps the SDK's default chain away from this machine's AWS
// files, profile and instance metadata service.
func isolateSDK(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": dir + "/config", "AWS_SHARED_CREDENTIALS_FILE": dir + "/credentials",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "", "AWS_CA_BUNDLE": "",
	} {
		t.Setenv(k, v)
	}
}
