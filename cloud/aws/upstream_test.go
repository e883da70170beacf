package aws

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	"gopkg.in/gcfg.v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	cloudprovider "k8s.io/cloud-provider"
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"
	awsv1config "k8s.io/cloud-provider-aws/pkg/providers/v1/config"

	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
)

// fakeUpstream builds the upstream provider over the upstream's own fakes
// (NewFakeAWSServices), reading the config text as the upstream's factory
// does, and keeps what it read.
type fakeUpstream struct {
	services *countingServices
	read     awsv1config.CloudConfig
}

func newFakeUpstream() *fakeUpstream {
	return &fakeUpstream{services: &countingServices{FakeAWSServices: awsv1.NewFakeAWSServices("c1")}}
}

func (f *fakeUpstream) build(r io.Reader) (cloudprovider.Interface, error) {
	if err := gcfg.FatalOnly(gcfg.ReadInto(&f.read, r)); err != nil {
		return nil, err
	}
	return awsv1.NewAWSCloud(f.read, f.services)
}

// countingServices counts the fake ELB's DescribeLoadBalancers calls.
type countingServices struct {
	*awsv1.FakeAWSServices
	describes atomic.Int32
}

func (s *countingServices) LoadBalancing(ctx context.Context, region string, role *stscreds.AssumeRoleProvider) (awsv1.ELB, error) {
	e, err := s.FakeAWSServices.LoadBalancing(ctx, region, role)
	return &countingELB{ELB: e, n: &s.describes}, err
}

type countingELB struct {
	awsv1.ELB
	n *atomic.Int32
}

func (e *countingELB) DescribeLoadBalancers(ctx context.Context, in *elb.DescribeLoadBalancersInput, opts ...func(*elb.Options)) (*elb.DescribeLoadBalancersOutput, error) {
	e.n.Add(1)
	return e.ELB.DescribeLoadBalancers(ctx, in, opts...)
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "upstream.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// upstreamOffEC2 is an upstream config for a CCM that is not on EC2: with
// a VPC and a subnet the upstream provider does not look itself up.
const upstreamOffEC2 = "[Global]\nVPC = vpc-mac0\nSubnetID = subnet-1\n"

// TestUpstreamLoadBalancersAndRoutes: with loadBalancers: upstream, load
// balancer and route calls through this backend reach the upstream
// provider (here over its own fakes), built with this backend's region and
// cluster id, while InstancesV2 stays this backend's.
func TestUpstreamLoadBalancersAndRoutes(t *testing.T) {
	e := newEnv(t)
	in := e.running(t, "127.0.0.3")
	f := newFakeUpstream()
	cfg := e.config()
	cfg.LoadBalancers = LoadBalancersUpstream
	cfg.UpstreamConfig = writeFile(t, upstreamOffEC2)
	p, err := newCloud(cfg, e.ec2, nil, f.build)
	if err != nil {
		t.Fatal(err)
	}
	g := f.read.Global
	if g.Region != awstest.DefaultRegion || g.KubernetesClusterID != "c1" || g.VPC != "vpc-mac0" || g.SubnetID != "subnet-1" {
		t.Fatalf("the upstream read region %q, cluster %q, VPC %q, subnet %q", g.Region, g.KubernetesClusterID, g.VPC, g.SubnetID)
	}
	ctx := context.Background()

	lb, ok := p.LoadBalancer()
	if !ok {
		t.Fatal("no load balancers")
	}
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "6a1b8f52-1b1e-4b4e-9f6a-0c1d2e3f4a5b"},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{Port: 80, NodePort: 30080, Protocol: v1.ProtocolTCP}}},
	}
	status, exists, err := lb.GetLoadBalancer(ctx, "kubernetes", svc)
	if err != nil || !exists || len(status.Ingress) != 1 || status.Ingress[0].Hostname != "mock-dns-name" {
		t.Fatalf("GetLoadBalancer: %+v, %v, %v", status, exists, err)
	}
	if n := f.services.describes.Load(); n != 1 {
		t.Fatalf("%d DescribeLoadBalancers calls reached the upstream's fake ELB, want 1", n)
	}

	routes, ok := p.Routes()
	if !ok {
		t.Fatal("no routes")
	}
	compute, err := f.services.Compute(ctx, awstest.DefaultRegion, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := compute.(*awsv1.FakeEC2Impl).CreateRouteTable(&ec2types.RouteTable{
		RouteTableId: aws.String("rtb-1"),
		Tags:         []ec2types.Tag{{Key: aws.String(clusterTag), Value: aws.String("owned")}},
		Routes:       []ec2types.Route{{DestinationCidrBlock: aws.String("10.244.9.0/24"), State: ec2types.RouteStateBlackhole}},
	}); err != nil {
		t.Fatal(err)
	}
	rs, err := routes.ListRoutes(ctx, "kubernetes")
	if err != nil || len(rs) != 1 || rs[0].DestinationCIDR != "10.244.9.0/24" || !rs[0].Blackhole {
		t.Fatalf("ListRoutes: %+v, %v", rs, err)
	}

	// The informers reach the upstream: its routes index Nodes by instance.
	factory := informers.NewSharedInformerFactory(fake.NewSimpleClientset(), 0)
	p.SetInformers(factory)
	if _, ok := factory.Core().V1().Nodes().Informer().GetIndexer().GetIndexers()["instanceID"]; !ok {
		t.Fatal("SetInformers did not reach the upstream provider")
	}

	// Instances are still this backend's, from EC2 through the view.
	md, err := p.InstanceMetadata(ctx, node(in.PrivateDNSName, ""))
	if err != nil || md.ProviderID != agentid.ProviderID(in.Zone, in.ID) {
		t.Fatalf("InstanceMetadata beside the upstream: %+v, %v", md, err)
	}
}

// TestUpstreamConfigChecks: the upstream's config may repeat this backend's
// region and cluster id, not contradict them, and must be readable.
func TestUpstreamConfigChecks(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ name, text, want string }{
		{"other region", upstreamOffEC2 + "Region = us-west-2\n", `Global.Region "us-west-2"`},
		{"zone of another region", upstreamOffEC2 + "Zone = us-west-2a\n", `Global.Zone "us-west-2a"`},
		{"zone of a longer region", upstreamOffEC2 + "Zone = us-east-12a\n", `Global.Zone "us-east-12a"`},
		{"other cluster id", upstreamOffEC2 + "KubernetesClusterID = c2\n", `Global.KubernetesClusterID "c2"`},
		{"other legacy cluster tag", upstreamOffEC2 + "KubernetesClusterTag = c2\n", `Global.KubernetesClusterTag "c2"`},
		{"not gcfg", "Region: us-east-1\n", "upstreamConfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeUpstream()
			cfg := e.config()
			cfg.LoadBalancers = LoadBalancersUpstream
			cfg.UpstreamConfig = writeFile(t, tc.text)
			if _, err := newCloud(cfg, e.ec2, nil, f.build); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one mentioning %q", err, tc.want)
			}
		})
	}

	// An empty assignment is no value: this backend's are added.
	f0 := newFakeUpstream()
	cfg0 := e.config()
	cfg0.LoadBalancers = LoadBalancersUpstream
	cfg0.UpstreamConfig = writeFile(t, upstreamOffEC2+"Region =\n[ServiceOverride \"1\"]\nService = ec2\n")
	if _, err := newCloud(cfg0, e.ec2, nil, f0.build); err != nil {
		t.Fatal(err)
	}
	if g := f0.read.Global; g.Region != awstest.DefaultRegion || g.KubernetesClusterID != "c1" || f0.read.ServiceOverride["1"] == nil {
		t.Fatalf("the upstream read region %q, cluster id %q, overrides %v", g.Region, g.KubernetesClusterID, f0.read.ServiceOverride)
	}

	// Repeating them is fine, and nothing is added.
	f := newFakeUpstream()
	cfg := e.config()
	cfg.LoadBalancers = LoadBalancersUpstream
	cfg.UpstreamConfig = writeFile(t, upstreamOffEC2+"Region = us-east-1\nZone = us-east-1b\nKubernetesClusterTag = c1\n")
	if _, err := newCloud(cfg, e.ec2, nil, f.build); err != nil {
		t.Fatal(err)
	}
	if f.read.Global.KubernetesClusterID != "" || f.read.Global.KubernetesClusterTag != "c1" {
		t.Fatalf("the upstream read cluster id %q and tag %q", f.read.Global.KubernetesClusterID, f.read.Global.KubernetesClusterTag)
	}

	cfg.UpstreamConfig = filepath.Join(t.TempDir(), "missing.conf")
	if _, err := newCloud(cfg, e.ec2, nil, newFakeUpstream().build); err == nil || !strings.Contains(err.Error(), "missing.conf") {
		t.Fatalf("a missing upstreamConfig: %v", err)
	}
	if _, err := ParseConfig(strings.NewReader(minimalConfig + "loadBalancers: upstream\n")); err == nil || !strings.Contains(err.Error(), "needs upstreamConfig") {
		t.Fatalf("loadBalancers: upstream without upstreamConfig: %v", err)
	}
}

// TestRegisteredUpstream builds the upstream provider as production does,
// with the factory its package registered with k8s.io/cloud-provider,
// kept off the network: the config names a VPC and a subnet (no lookup of
// its own instance), and the metadata service is disabled.
func TestRegisteredUpstream(t *testing.T) {
	e := newEnv(t)
	isolateSDK(t)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("AWS_ACCESS_KEY_ID", testUser.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testUser.SecretAccessKey)
	cfg := e.config()
	cfg.LoadBalancers = LoadBalancersUpstream
	cfg.UpstreamConfig = writeFile(t, upstreamOffEC2)
	p, err := NewWithClients(cfg, e.ec2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.upstream.(*awsv1.Cloud); !ok {
		t.Fatalf("the upstream provider is a %T", p.upstream)
	}
	if _, ok := p.LoadBalancer(); !ok {
		t.Fatal("no load balancers")
	}
}

// TestNoLoadBalancersOrRoutes: without loadBalancers: upstream there are
// none, and the CCM's service and route controllers skip the provider.
func TestNoLoadBalancersOrRoutes(t *testing.T) {
	e := newEnv(t)
	p := e.provider(t, 0)
	if lb, ok := p.LoadBalancer(); ok || lb != nil {
		t.Errorf("LoadBalancer: %v, %v; want nil, false", lb, ok)
	}
	if r, ok := p.Routes(); ok || r != nil {
		t.Errorf("Routes: %v, %v; want nil, false", r, ok)
	}
	if p.Config().LoadBalancers != LoadBalancersNone {
		t.Errorf("loadBalancers defaults to %q", p.Config().LoadBalancers)
	}
	// Nothing to pass on.
	p.SetInformers(informers.NewSharedInformerFactory(fake.NewSimpleClientset(), 0))
	p.Initialize(nil, nil)
}
