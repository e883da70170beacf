// Package agentid is the AWS backend's side of the node agent: it reads the
// instance's metadata over IMDSv2 and signs, with the instance profile's
// credentials, an STS GetCallerIdentity request whose signed headers carry
// the CSR key's binding (the evidence; its wire form is evidence.go). It
// registers the node identity of the backend "aws" (cloud/nodeid), and
// holds what the approver's verifier and the provider share with it: the
// evidence's form, the node name policy (names.go), providerIDs and the
// default STS endpoint. It imports neither (mooring-agent links it
// without them).
package agentid

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/linklocal"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// Name is the backend's name, the agent config's cloud: aws.
const Name = "aws"

func init() {
	nodeid.Register(Name, func(cfg nodeid.Config) (nodeid.Identity, error) { return NewNodeIdentity(cfg) })
}

// The agent's cloudSettings keys.
const (
	// SettingSTSEndpoint overrides the STS URL the node signs for (its
	// host is signed); default https://sts.<region>.amazonaws.com (.com.cn
	// in China). The approver's STSEndpoint must have the same host. The
	// node signs for its region, which an endpoint of AWS's must accept
	// (CheckEndpointRegion): the global sts.amazonaws.com only in
	// us-east-1.
	SettingSTSEndpoint = "stsEndpoint"
	// SettingRegion overrides the region read from instance metadata.
	SettingRegion = "region"
)

// DefaultSTSEndpoint is the regional STS endpoint of a region: the one the
// node signs for, and the approver's default.
func DefaultSTSEndpoint(region string) string {
	if strings.HasPrefix(region, "cn-") {
		return "https://sts." + region + ".amazonaws.com.cn"
	}
	return "https://sts." + region + ".amazonaws.com"
}

// GlobalSTSHost is STS's global endpoint. AWS serves it from us-east-1:
// it accepts only signatures scoped to us-east-1, whatever the caller's
// region, and answers any other scope with SignatureDoesNotMatch.
const GlobalSTSHost = "sts.amazonaws.com"

// globalSTSRegion is the only region GlobalSTSHost accepts signatures for.
const globalSTSRegion = "us-east-1"

// stsHostRE matches STS's regional endpoints as AWS names them:
// sts.<region>.amazonaws.com, sts-fips.<region>.amazonaws.com, the China
// regions' sts.<region>.amazonaws.com.cn, and interface VPC endpoints'
// <vpce-id>.sts.<region>.vpce.amazonaws.com.
var stsHostRE = regexp.MustCompile(`^(?:sts|sts-fips|[a-z0-9-]+\.sts)\.([a-z]{2}(?:-[a-z]+)+-[0-9]+)\.(?:vpce\.)?amazonaws\.com(?:\.cn)?$`)

// EndpointRegion is the region an AWS STS endpoint's host (a port allowed)
// accepts signatures for: the region a regional endpoint names, and
// us-east-1 for the global sts.amazonaws.com. ok is false for any other
// host (a test's stand-in, a proxy): its region cannot be told from its
// name.
func EndpointRegion(host string) (region string, ok bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == GlobalSTSHost {
		return globalSTSRegion, true
	}
	if m := stsHostRE.FindStringSubmatch(host); m != nil {
		return m[1], true
	}
	return "", false
}

// CheckEndpointRegion refuses an STS endpoint of AWS's that would refuse
// signatures scoped to region: the global endpoint outside us-east-1, or
// another region's endpoint. Every join would fail with a signature error
// at STS, so the agent and the approver refuse the configuration instead.
func CheckEndpointRegion(endpoint, region string) error {
	_, host, err := ParseEndpoint(endpoint)
	if err != nil {
		return err
	}
	want, ok := EndpointRegion(host)
	switch {
	case !ok || want == region:
		return nil
	case want == globalSTSRegion && strings.TrimSuffix(strings.ToLower(host), ".") == GlobalSTSHost:
		return fmt.Errorf("STS endpoint %s is the global endpoint, which accepts only signatures for %s; the region is %s: use its regional endpoint %s (the default)",
			endpoint, globalSTSRegion, region, DefaultSTSEndpoint(region))
	}
	return fmt.Errorf("STS endpoint %s is region %s's, which accepts only signatures for %s; the region is %s: use %s (the default)",
		endpoint, want, want, region, DefaultSTSEndpoint(region))
}

// maxMetadataValue bounds one instance metadata answer the agent reads.
const maxMetadataValue = 4 << 10

// NodeIdentity is an EC2 instance as its node agent sees it: instance
// metadata (IMDSv2 only) and evidence signed with its instance profile's
// credentials.
type NodeIdentity struct {
	imds        *imds.Client
	creds       aws.CredentialsProvider
	policy      NamePolicy
	stsEndpoint string // "" is the region's public endpoint
	region      string // "" is the instance's region from metadata
	signer      *v4.Signer
	now         func() time.Time
}

var _ nodeid.Identity = (*NodeIdentity)(nil)

// Option changes what NewNodeIdentity makes.
type Option func(*options)

type options struct {
	now      func() time.Time
	imdsOpts []func(*imds.Options)
}

// WithClock dates the signatures by now instead of time.Now (tests whose
// STS stand-in keeps its own clock).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// withIMDSOptions changes the metadata client's options (tests make it
// retry less).
func withIMDSOptions(f ...func(*imds.Options)) Option {
	return func(o *options) { o.imdsOpts = append(o.imdsOpts, f...) }
}

// NewNodeIdentity reads the agent's configuration of the aws backend:
// cfg.MetadataURL ("" is the instance metadata service's own address),
// cfg.NodeNamePolicy (see ParseNamePolicy) and the settings stsEndpoint and
// region, both optional. It calls nothing.
func NewNodeIdentity(cfg nodeid.Config, opts ...Option) (*NodeIdentity, error) {
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	policy, err := ParseNamePolicy(cfg.NodeNamePolicy)
	if err != nil {
		return nil, fmt.Errorf("aws: %w", err)
	}
	n := &NodeIdentity{policy: policy, signer: v4.NewSigner(), now: o.now}
	for k, val := range cfg.Settings {
		switch k {
		case SettingSTSEndpoint:
			if _, _, err := ParseEndpoint(val); err != nil {
				return nil, fmt.Errorf("aws: cloudSettings.%s: %w", k, err)
			}
			n.stsEndpoint = val
		case SettingRegion:
			if !ValidRegion(val) {
				return nil, fmt.Errorf("aws: cloudSettings.%s %q: want a region name such as us-east-1", k, val)
			}
			n.region = val
		default:
			return nil, fmt.Errorf("aws: cloudSettings: unknown key %q (known: %s, %s)", k, SettingSTSEndpoint, SettingRegion)
		}
	}
	if n.stsEndpoint != "" && n.region != "" {
		if err := CheckEndpointRegion(n.stsEndpoint, n.region); err != nil {
			return nil, fmt.Errorf("aws: cloudSettings: %w", err)
		}
	}
	if cfg.MetadataURL != "" {
		if _, err := linklocal.ParseURL(cfg.MetadataURL, linklocal.AllowHTTPS()); err != nil {
			return nil, fmt.Errorf("aws: %w", err)
		}
	}
	// IMDSv2 only: no fallback to unauthenticated IMDSv1 requests. The
	// HTTP client is linklocal's, as every cloud's: no proxy (the SDK's
	// own takes the environment's) and no redirect (the SDK's follows 307
	// and 308, with the session token).
	n.imds = imds.New(imds.Options{Endpoint: cfg.MetadataURL, EnableFallback: aws.FalseTernary,
		HTTPClient: linklocal.NewHTTPClient(0, 0)}, o.imdsOpts...)
	n.creds = ec2rolecreds.New(func(o *ec2rolecreds.Options) { o.Client = n.imds })
	return n, nil
}

// Instance reads the instance's id, zone, address, private DNS name and
// tags from instance metadata. Name is the Name tag when metadata serves
// tags, else the id.
func (n *NodeIdentity) Instance(ctx context.Context) (nodeid.Instance, error) {
	id, err := n.metadata(ctx, "instance-id", true)
	if err != nil {
		return nodeid.Instance{}, err
	}
	zone, err := n.metadata(ctx, "placement/availability-zone", true)
	if err != nil {
		return nodeid.Instance{}, err
	}
	ip, err := n.metadata(ctx, "local-ipv4", false)
	if err != nil {
		return nodeid.Instance{}, err
	}
	hostname, err := n.metadata(ctx, "local-hostname", false)
	if err != nil {
		return nodeid.Instance{}, err
	}
	if f := strings.Fields(hostname); len(f) > 0 {
		hostname = f[0] // with several DHCP domains, the first name
	}
	tags := map[string]string{}
	keys := []string{"Name"}
	if k, ok := n.policy.TagKey(); ok && k != "Name" {
		keys = append(keys, k)
	}
	for _, k := range keys {
		v, err := n.metadata(ctx, "tags/instance/"+k, false)
		if err != nil {
			return nodeid.Instance{}, err
		}
		if v != "" {
			tags[k] = v
		}
	}
	out := nodeid.Instance{
		ID:         id,
		Name:       id,
		NodeName:   n.policy.NodeName(id, hostname, tags),
		ProviderID: ProviderID(zone, id),
		InternalIP: ip,
	}
	if name := tags["Name"]; name != "" {
		out.Name = name
	}
	if out.NodeName == "" {
		if k, ok := n.policy.TagKey(); ok {
			return out, fmt.Errorf("aws: instance %s has no node name under policy %s: instance metadata serves no tag %q (is access to tags in instance metadata enabled?)", id, n.policy, k)
		}
		return out, fmt.Errorf("aws: instance %s has no node name under policy %s: instance metadata serves no local-hostname", id, n.policy)
	}
	return out, nil
}

// Evidence signs an sts:GetCallerIdentity request carrying the binding
// with the instance profile's current credentials.
func (n *NodeIdentity) Evidence(ctx context.Context, binding string) (evidence.Block, error) {
	if binding == "" || len(binding) > maxBinding || !printable(binding, false) {
		return evidence.Block{}, fmt.Errorf("aws: binding %.60q: want 1-%d printable characters", binding, maxBinding)
	}
	region := n.region
	if region == "" {
		var err error
		if region, err = n.metadata(ctx, "placement/region", true); err != nil {
			return evidence.Block{}, err
		}
	}
	endpoint := n.stsEndpoint
	if endpoint == "" {
		endpoint = DefaultSTSEndpoint(region) // shared with the approver's default
	}
	if err := CheckEndpointRegion(endpoint, region); err != nil {
		return evidence.Block{}, fmt.Errorf("aws: %w", err)
	}
	creds, err := n.creds.Retrieve(ctx)
	if err != nil {
		return evidence.Block{}, fmt.Errorf("aws: the instance profile's credentials from instance metadata: %w", err)
	}
	r, err := SignCallerIdentity(ctx, n.signer, creds, endpoint, region, binding, n.now())
	if err != nil {
		return evidence.Block{}, err
	}
	data, err := r.Encode()
	if err != nil {
		return evidence.Block{}, fmt.Errorf("aws: the signed request: %w", err)
	}
	klog.V(2).InfoS("Signed an STS GetCallerIdentity request as evidence", "region", region, "endpoint", endpoint, "date", r.Date)
	return evidence.Block{Type: EvidenceType, Data: data}, nil
}

// bodyHash is the SigV4 payload hash of the GetCallerIdentity body.
var bodyHash = func() string {
	sum := sha256.Sum256([]byte(STSBody))
	return hex.EncodeToString(sum[:])
}()

// SignCallerIdentity signs POST <endpoint>/ with the GetCallerIdentity body
// and the binding header, and returns the signed header values.
func SignCallerIdentity(ctx context.Context, signer *v4.Signer, creds aws.Credentials, endpoint, region, binding string, at time.Time) (STSRequest, error) {
	u, _, err := ParseEndpoint(endpoint)
	if err != nil {
		return STSRequest{}, fmt.Errorf("aws: STS endpoint: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, STSMethod, u.String(), strings.NewReader(STSBody))
	if err != nil {
		return STSRequest{}, err
	}
	req.Header.Set("Content-Type", STSContentType)
	req.Header.Set(BindingHeader, binding)
	if err := signer.SignHTTP(ctx, creds, req, bodyHash, STSService, region, at); err != nil {
		return STSRequest{}, fmt.Errorf("aws: sign GetCallerIdentity: %w", err)
	}
	return STSRequest{
		Authorization: req.Header.Get("Authorization"),
		Date:          req.Header.Get("X-Amz-Date"),
		SecurityToken: req.Header.Get("X-Amz-Security-Token"),
		Binding:       binding,
	}, nil
}

// metadata reads one instance metadata value. A value the service does not
// have (HTTP 404) is an error if required, else "".
func (n *NodeIdentity) metadata(ctx context.Context, path string, required bool) (string, error) {
	out, err := n.imds.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		var re *smithyhttp.ResponseError
		if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound && !required {
			return "", nil
		}
		return "", fmt.Errorf("aws: instance metadata %s: %w", path, err)
	}
	defer func() { _ = out.Content.Close() }()
	b, err := io.ReadAll(io.LimitReader(out.Content, maxMetadataValue+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("aws: instance metadata %s: %w", path, err)
	case len(b) > maxMetadataValue:
		return "", fmt.Errorf("aws: instance metadata %s: over %d bytes", path, maxMetadataValue)
	}
	v := strings.TrimSpace(string(b))
	if v == "" && required {
		return "", fmt.Errorf("aws: instance metadata %s is empty", path)
	}
	if strings.ContainsFunc(v, unicode.IsControl) {
		return "", fmt.Errorf("aws: instance metadata %s holds control characters", path)
	}
	return v, nil
}
