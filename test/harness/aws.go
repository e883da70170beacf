package harness

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"
)

// AWSCloud is an AWS-compatible endpoint (cloud/aws/awstest: EC2, STS and
// per-instance IMDSv2 on loopback) as mooring's binaries are set up for AWS:
// the CCM and the approver call EC2 and STS with an IAM user's keys, nodes
// carry an instance profile of NodeRole.
type AWSCloud struct {
	*awstest.Cloud
	// User is the CCM's and the approver's IAM user.
	User awstest.User
	// NodeRole is the nodes' instance profile role.
	NodeRole string

	mu     sync.Mutex
	nextIP netip.Addr
	ids    map[string]string // instance ids by the name AddNode was given
}

// AWS test identities.
const (
	AWSNodeRole = "mooring-node"
	// AWSAddressBase is where nodes' private addresses start (loopback).
	AWSAddressBase = "127.0.77.10"
)

// StartAWSCloud starts the endpoint; the test's cleanup stops it.
func StartAWSCloud(t testing.TB) *AWSCloud {
	t.Helper()
	user := awstest.User{Name: "mooring-control-plane", AccessKeyID: "AKIAMOORINGTEST00001", SecretAccessKey: "mooring-test-secret-key-of-the-control-plane"}
	c := awstest.New(awstest.Options{Users: []awstest.User{user}})
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &AWSCloud{Cloud: c, User: user, NodeRole: AWSNodeRole, nextIP: netip.MustParseAddr(AWSAddressBase)}
}

// ClusterTag is the tag key of cluster's instances.
func ClusterTag(cluster string) string { return "kubernetes.io/cluster/" + cluster }

// AddNode makes a running instance of cluster with an instance profile
// (the cluster tag owned, a Name tag) on the next free loopback address.
func (a *AWSCloud) AddNode(cluster, name string) awstest.Instance {
	a.mu.Lock()
	ip := a.nextIP
	a.nextIP = ip.Next()
	a.mu.Unlock()
	in := a.Put(awstest.Instance{
		PrivateIP: ip.String(), Role: a.NodeRole,
		Tags: map[string]string{ClusterTag(cluster): "owned", "Name": name},
	})
	a.mu.Lock()
	if a.ids == nil {
		a.ids = map[string]string{}
	}
	a.ids[name] = in.ID
	a.mu.Unlock()
	return in
}

// InstanceOf is the instance AddNode made for a machine name, as stored.
func (a *AWSCloud) InstanceOf(name string) (awstest.Instance, bool) {
	a.mu.Lock()
	id, ok := a.ids[name]
	a.mu.Unlock()
	if !ok {
		return awstest.Instance{}, false
	}
	return a.Get(id)
}

// ProvisionTPM makes a booted machine's TPM simulator its instance's
// NitroTPM (BootOptions.ProvisionTPM): EC2 then describes the instance
// with tpmSupport v2.0 and GetInstanceTpmEkPub serves the simulator's
// RSA endorsement key, as AWS reports a NitroTPM's.
func (a *AWSCloud) ProvisionTPM(_ context.Context, name string, _ Provisioned, sim *tpmtest.Sim) error {
	a.mu.Lock()
	id, ok := a.ids[name]
	a.mu.Unlock()
	if !ok {
		return fmt.Errorf("no instance was made for machine %s", name)
	}
	ek, err := sim.EKPublic()
	if err != nil {
		return fmt.Errorf("the TPM's endorsement key: %w", err)
	}
	in, ok := a.Get(id)
	if !ok {
		return fmt.Errorf("instance %s of machine %s is gone", id, name)
	}
	in.NitroTPM = &awstest.NitroTPM{RSA: ek}
	a.Put(in)
	return nil
}

// Provisioner makes fleet machines as EC2 instances of cluster whose agents
// use `cloud: aws` against this endpoint (FleetOptions.Provision).
func (a *AWSCloud) Provisioner(cluster string) func(ctx context.Context, name string) (Provisioned, error) {
	return func(_ context.Context, name string) (Provisioned, error) {
		in := a.AddNode(cluster, name)
		md, err := a.IMDS(in.ID)
		if err != nil {
			return Provisioned{}, err
		}
		return Provisioned{NodeName: in.PrivateDNSName, Address: in.PrivateIP, AgentConfig: a.AgentConfig(md)}, nil
	}
}

// AgentConfig is the agent config's cloud part for an instance whose IMDS
// is at metadataURL.
func (a *AWSCloud) AgentConfig(metadataURL string) string {
	return fmt.Sprintf("cloud: aws\nmetadataURL: %s\ncloudSettings:\n  stsEndpoint: %s\n", metadataURL, a.Endpoint())
}

// ProviderName is "aws".
func (a *AWSCloud) ProviderName() string { return "aws" }

// WriteProviderConfig writes the AWS provider's config (docs/aws.md) for
// cluster, with both API endpoints pointing here.
func (a *AWSCloud) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	path := filepath.Join(dir, "cloud.yaml")
	cfg := fmt.Sprintf("region: %s\nclusterID: %s\naccount: %q\nnodeRoles: [%s]\nec2Endpoint: %s\nstsEndpoint: %s\n%s",
		a.Region(), cluster, a.Account(), a.NodeRole, a.Endpoint(), a.Endpoint(), extra)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// ProviderEnv holds the IAM user's keys, as the SDK's default chain reads
// them, and keeps the SDK off any real instance metadata or shared files.
func (a *AWSCloud) ProviderEnv() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + a.User.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + a.User.SecretAccessKey,
		"AWS_REGION=" + a.Region(), "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
	}
}

// Upstream is this endpoint as the upstream AWS cloud-controller-manager
// (k8s.io/cloud-provider-aws's provider, --cloud-provider=aws) is set up
// for it: its own cloud-config (gcfg) whose [ServiceOverride] sections send
// its EC2 calls here and its metadata calls to this loopback endpoint too
// (which is no metadata service: the provider logs that and goes on), with
// the same IAM user's keys. VPC and SubnetID are named so that it does not
// look its own instance up at start, as off EC2 it must.
func (a *AWSCloud) Upstream() Provider { return upstreamAWS{a} }

type upstreamAWS struct{ a *AWSCloud }

func (u upstreamAWS) ProviderName() string  { return "aws" }
func (u upstreamAWS) ProviderEnv() []string { return u.a.ProviderEnv() }

// WriteProviderConfig writes the upstream's cloud-config for cluster, with
// extra lines (gcfg) appended.
func (u upstreamAWS) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	path := filepath.Join(dir, "cloud.conf")
	r, url := u.a.Region(), u.a.Endpoint()
	cfg := fmt.Sprintf("[Global]\nRegion = %[1]s\nKubernetesClusterID = %[3]s\nVPC = vpc-0bench\nSubnetID = subnet-0bench\n\n"+
		"[ServiceOverride \"ec2\"]\nService = EC2\nRegion = %[1]s\nURL = %[2]s\nSigningRegion = %[1]s\nSigningName = ec2\n\n"+
		"[ServiceOverride \"imds\"]\nService = ec2imds\nRegion = %[1]s\nURL = %[2]s\nSigningRegion = %[1]s\n%[4]s",
		r, url, cluster, extra)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}
