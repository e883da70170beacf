package aws

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
)

// Config is the AWS backend's cloud config file (the CCM's and the CSR
// approver's --cloud-config), YAML or JSON, read strictly. It holds no
// secrets: the EC2 and STS calls take their credentials from the AWS SDK's
// default chain (environment, shared files, the instance profile).
type Config struct {
	// Region is the AWS region of the cluster's instances, such as
	// us-east-1. Required.
	Region string `json:"region"`
	// ClusterID names the cluster: its instances carry the tag
	// kubernetes.io/cluster/<ClusterID> with the value "owned" or "shared".
	// Required.
	ClusterID string `json:"clusterID"`
	// NodeNamePolicy maps instances to Node names: PrivateDNSName (the
	// default), InstanceID or Tag:<key> (see agentid.ParseNamePolicy). The node
	// agent must use the same policy.
	NodeNamePolicy string `json:"nodeNamePolicy,omitempty"`
	// EC2Endpoint overrides the EC2 API's URL; "" is the SDK's regional
	// endpoint.
	EC2Endpoint string `json:"ec2Endpoint,omitempty"`
	// STSEndpoint is where the approver sends the GetCallerIdentity
	// requests that nodes signed; "" is https://sts.<region>.amazonaws.com
	// (agentid.DefaultSTSEndpoint). An endpoint of AWS's must accept
	// signatures for Region: the global https://sts.amazonaws.com only with
	// region us-east-1 (agentid.CheckEndpointRegion).
	STSEndpoint string `json:"stsEndpoint,omitempty"`
	// Account is the 12-digit AWS account the cluster's instances, and the
	// roles of their instance profiles, belong to. Required.
	Account string `json:"account"`
	// NodeRoles are the names (not ARNs) of the instance-profile roles
	// whose sessions may join the cluster. Required, at least one.
	NodeRoles []string `json:"nodeRoles"`
	// NodeInstanceProfiles are the names (not ARNs) of the node roles'
	// instance profiles: the approver lets an instance join only while EC2
	// shows it associated with one of them. Default: the NodeRoles' names
	// (the IAM console names a role's profile after it; other tools may
	// not, and joins are then denied InstanceIdentityNotAllowed until this
	// is set).
	NodeInstanceProfiles []string `json:"nodeInstanceProfiles,omitempty"`
	// NodeRoleIDs pins node roles to their unique ids (AROA..., from
	// `aws iam get-role`): a session of a role of that name with another
	// id, that of a role deleted and created again under the name, is
	// denied. Optional, per role; a role without an id is trusted by name.
	NodeRoleIDs map[string]string `json:"nodeRoleIDs,omitempty"`
	// ViewConfig: instanceMaxAge, minRefreshInterval, requestTimeout (one
	// EC2 or STS call).
	kit.ViewConfig
	// LoadBalancers says who manages the load balancers of LoadBalancer
	// Services and the cloud routes: "none" (the default: nobody here) or
	// "upstream", the upstream AWS cloud provider (see upstream.go).
	LoadBalancers string `json:"loadBalancers,omitempty"`
	// UpstreamConfig is the path of the upstream AWS provider's own cloud
	// config file (gcfg), required with loadBalancers: upstream and read
	// only then. Its Global.Region and Global.KubernetesClusterID, if set,
	// must be this config's region and clusterID; unset, they are.
	UpstreamConfig string `json:"upstreamConfig,omitempty"`
}

// Load balancer modes (Config.LoadBalancers).
const (
	// LoadBalancersNone: the backend has no load balancers and no routes;
	// the CCM's service and route controllers do not run.
	LoadBalancersNone = "none"
	// LoadBalancersUpstream: load balancers and routes of the upstream AWS
	// cloud provider (see upstream.go).
	LoadBalancersUpstream = "upstream"
)

// ClusterTagPrefix starts the key of the tag that makes an instance a
// cluster's: kubernetes.io/cluster/<cluster id>.
const ClusterTagPrefix = "kubernetes.io/cluster/"

// Values of the cluster tag that make an instance the cluster's.
const (
	ClusterTagOwned  = "owned"
	ClusterTagShared = "shared"
)

var (
	// regionPattern: us-east-1, us-gov-west-1, cn-north-1, ap-southeast-2.
	regionPattern = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	// clusterIDPattern: characters EC2 tag keys allow, without '/' and
	// spaces so that the tag key names exactly one cluster; at most
	// 128-len(ClusterTagPrefix) of them (EC2 tag keys are 1-128 characters).
	clusterIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:=+@-]{1,106}$`)
	accountPattern   = regexp.MustCompile(`^[0-9]{12}$`)
)

// ParseConfig reads a cloud config strictly: unknown fields are errors, and
// every problem of the config is reported at once.
func ParseConfig(r io.Reader) (Config, error) {
	return kit.ParseConfig(ProviderName, r, (*Config).defaults, (*Config).validate)
}

// ClusterTagKey is the tag key the cluster's instances carry.
func (c *Config) ClusterTagKey() string { return ClusterTagPrefix + c.ClusterID }

// EffectiveSTSEndpoint is STSEndpoint, or the region's default.
func (c *Config) EffectiveSTSEndpoint() string {
	if c.STSEndpoint != "" {
		return c.STSEndpoint
	}
	return agentid.DefaultSTSEndpoint(c.Region)
}

func (c *Config) defaults() {
	kit.DefaultDurations(c.ViewConfig.Durations())
	if c.LoadBalancers == "" {
		c.LoadBalancers = LoadBalancersNone
	}
}

func (c *Config) validate() error {
	var errs []error
	switch {
	case c.Region == "":
		errs = append(errs, errors.New("region is required"))
	case !regionPattern.MatchString(c.Region):
		errs = append(errs, fmt.Errorf("region %q is not an AWS region name such as us-east-1", c.Region))
	}
	switch {
	case c.ClusterID == "":
		errs = append(errs, fmt.Errorf("clusterID is required: only instances tagged %s<clusterID> are the cluster's", ClusterTagPrefix))
	case !clusterIDPattern.MatchString(c.ClusterID):
		errs = append(errs, fmt.Errorf("clusterID %q: want 1-106 letters, digits or ._:=+@- (it ends the tag key %s<clusterID>)", c.ClusterID, ClusterTagPrefix))
	}
	if _, err := agentid.ParseNamePolicy(c.NodeNamePolicy); err != nil {
		errs = append(errs, fmt.Errorf("nodeNamePolicy: %w", err))
	}
	if err := kit.CheckEndpoint(c.EC2Endpoint, true); c.EC2Endpoint != "" && err != nil {
		errs = append(errs, fmt.Errorf("ec2Endpoint: %w", err))
	}
	if err := kit.CheckEndpoint(c.STSEndpoint, false); c.STSEndpoint != "" && err != nil {
		errs = append(errs, fmt.Errorf("stsEndpoint: %w", err))
	} else if c.STSEndpoint != "" && regionPattern.MatchString(c.Region) {
		if err := agentid.CheckEndpointRegion(c.STSEndpoint, c.Region); err != nil {
			errs = append(errs, fmt.Errorf("stsEndpoint: %w", err))
		}
	}
	switch {
	case c.Account == "":
		errs = append(errs, errors.New("account is required: joining sessions must belong to the cluster's AWS account"))
	case !accountPattern.MatchString(c.Account):
		errs = append(errs, fmt.Errorf("account %q: want the 12-digit AWS account id", c.Account))
	}
	if len(c.NodeRoles) == 0 {
		errs = append(errs, errors.New("nodeRoles is required: name the instance-profile roles whose sessions may join"))
	}
	errs = append(errs, checkNames("nodeRoles", "role", c.NodeRoles, roleNameRE, 64)...)
	errs = append(errs, checkNames("nodeInstanceProfiles", "instance profile", c.NodeInstanceProfiles, profileNameRE, 128)...)
	for _, role := range slices.Sorted(maps.Keys(c.NodeRoleIDs)) {
		if err := validRoleID(role, c.NodeRoleIDs[role], c.NodeRoles); err != nil {
			errs = append(errs, fmt.Errorf("nodeRoleIDs: %w", err))
		}
	}
	errs = append(errs, kit.CheckDurations(c.ViewConfig.Durations())...)
	switch c.LoadBalancers {
	case LoadBalancersNone:
		if c.UpstreamConfig != "" {
			errs = append(errs, fmt.Errorf("upstreamConfig is set but loadBalancers is %q; it is read only with loadBalancers: %s", c.LoadBalancers, LoadBalancersUpstream))
		}
	case LoadBalancersUpstream:
		if c.UpstreamConfig == "" {
			errs = append(errs, errNoUpstreamConfig)
		}
	default:
		errs = append(errs, fmt.Errorf("loadBalancers %q: want %s or %s", c.LoadBalancers, LoadBalancersNone, LoadBalancersUpstream))
	}
	return kit.ConfigError("aws", errs)
}

// checkNames reports the names of a list field that are ARNs, or not IAM
// names of that kind (pattern, at most maxLen characters).
func checkNames(field, kind string, names []string, pattern *regexp.Regexp, maxLen int) []error {
	var errs []error
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, "arn:"):
			errs = append(errs, fmt.Errorf("%s: %q is an ARN; want the %s's name", field, n, kind))
		case !pattern.MatchString(n):
			errs = append(errs, fmt.Errorf("%s: %q is not an IAM %s name (1-%d letters, digits or +=,.@_-)", field, n, kind, maxLen))
		}
	}
	return errs
}
