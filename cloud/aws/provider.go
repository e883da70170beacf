package aws

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/view"
)

// ProviderName is the backend's name, for --cloud-provider and the node
// agent's cloud setting.
const ProviderName = agentid.Name

// Factory builds the provider from its cloud-config; backend.go registers
// it with mooring's backends (cloud.Register, built by cloud.NewProvider).
var Factory = kit.Factory(ParseConfig, func(cfg Config) (*Cloud, error) { return New(cfg) })

// Cloud is AWS as Kubernetes and mooring see it: InstancesV2 over the
// shared view of the cluster's EC2 instances (found by instance id), the
// approver's STS evidence verifier, and, with loadBalancers: upstream, the
// upstream AWS provider's load balancers and routes (upstream.go).
type Cloud struct {
	kit.Base // InstancesV2 over the view (no Zones), the Attester

	cfg      Config
	policy   agentid.NamePolicy
	ec2      EC2API
	view     *view.View
	verifier *Verifier
	// upstream is the upstream AWS provider, nil without load balancers.
	upstream cloudprovider.Interface
	// ids are the instance ids EC2 has shown, and its first misses of
	// others (NewInstanceWindow).
	ids *idTracker
	// challenger makes and checks NitroTPM credential activation
	// challenges (tpm.go), under a key of this process's.
	challenger *tpm.Challenger
}

var _ cloudprovider.InformerUser = (*Cloud)(nil)

// New builds the provider with the AWS SDK's clients: credentials from its
// default chain (environment, shared files, instance profile), the EC2 API
// at ec2Endpoint or the region's endpoint. sdkOptions are added to the
// SDK's default configuration loading (config.LoadDefaultConfig); the
// config's region wins over theirs. It makes no call of its own (see
// NewWithClients for the upstream provider's).
func New(cfg Config, sdkOptions ...func(*awsconfig.LoadOptions) error) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout.Duration)
	defer cancel()
	opts := append(slices.Clone(sdkOptions), awsconfig.WithRegion(cfg.Region))
	sdk, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("aws: load the SDK's configuration: %w", err)
	}
	client := ec2.NewFromConfig(sdk, func(o *ec2.Options) {
		if cfg.EC2Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.EC2Endpoint)
		}
	})
	return NewWithClients(cfg, client, &http.Client{Timeout: cfg.RequestTimeout.Duration})
}

// NewWithClients builds the provider over an EC2 client and the HTTP client
// the evidence verifier sends STS requests with (nil: the verifier's
// default); tests pass clients of an AWS stand-in. It makes no call of its
// own; with loadBalancers: upstream, building the upstream provider may
// (upstream.go).
func NewWithClients(cfg Config, ec2Client EC2API, httpClient *http.Client) (*Cloud, error) {
	return newCloud(cfg, ec2Client, httpClient, registeredUpstream)
}

// newCloud is NewWithClients with the way to build the upstream provider.
func newCloud(cfg Config, ec2Client EC2API, httpClient *http.Client, build upstreamBuilder) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if ec2Client == nil {
		return nil, errors.New("aws: an EC2 client is required")
	}
	policy, err := agentid.ParseNamePolicy(cfg.NodeNamePolicy)
	if err != nil {
		return nil, err // validate has seen it already
	}
	v, err := NewVerifier(VerifierOptions{
		STSEndpoint:          cfg.EffectiveSTSEndpoint(),
		Region:               cfg.Region,
		Account:              cfg.Account,
		NodeRoles:            cfg.NodeRoles,
		HTTPClient:           httpClient,
		NodeInstanceProfiles: cfg.NodeInstanceProfiles,
		NodeRoleIDs:          cfg.NodeRoleIDs,
	})
	if err != nil {
		return nil, fmt.Errorf("aws: evidence verifier: %w", err)
	}
	var up cloudprovider.Interface
	if cfg.LoadBalancers == LoadBalancersUpstream {
		if up, err = buildUpstream(&cfg, build); err != nil {
			return nil, err
		}
	}
	challenger, err := tpm.NewChallenger()
	if err != nil {
		return nil, fmt.Errorf("aws: %w", err)
	}
	ids := newIDTracker(time.Now)
	src := Source{EC2: ec2Client, Region: cfg.Region, ClusterID: cfg.ClusterID, NamePolicy: policy, RequestTimeout: cfg.RequestTimeout.Duration, seen: ids}
	klog.InfoS("AWS cloud provider configured", "region", cfg.Region, "clusterID", cfg.ClusterID, "nodeNamePolicy", policy.String(),
		"ec2Endpoint", cfg.EC2Endpoint, "stsEndpoint", cfg.EffectiveSTSEndpoint(), "loadBalancers", cfg.LoadBalancers)
	c := &Cloud{
		cfg:      cfg,
		policy:   policy,
		ec2:      ec2Client,
		view:     view.New(src, view.Options{MinRefreshInterval: cfg.MinRefreshInterval.Duration}),
		verifier: v,
		upstream: up,
		ids:      ids,

		challenger: challenger,
	}
	// FindInstance is the provider's own (by instance id), and so are
	// EvidenceVerifiers (behind the gate of new instances).
	c.Base = kit.NewBase(kit.Options{Name: ProviderName, View: c.view, MaxAge: cfg.InstanceMaxAge.Duration,
		ClusterTag: cfg.ClusterID, Finder: c})
	return c, nil
}

// EvidenceVerifiers verify nodes' signed STS GetCallerIdentity requests;
// a join whose fresh evidence names an instance EC2 does not show yet is
// retried (NewInstanceWindow).
func (c *Cloud) EvidenceVerifiers() []cloud.EvidenceVerifier {
	return []cloud.EvidenceVerifier{freshInstanceGate{Verifier: c.verifier, view: c.view, maxAge: c.cfg.InstanceMaxAge.Duration, confirm: c.describeByID}}
}

// Config is the provider's effective configuration.
func (c *Cloud) Config() Config { return c.cfg }

// Initialize is called by the CCM before controllers start; it is passed
// on to the upstream provider, if any.
func (c *Cloud) Initialize(b cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	if c.upstream != nil {
		c.upstream.Initialize(b, stop)
	}
}
