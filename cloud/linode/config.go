package linode

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/linode/agentid"
)

// Config is the Linode backend's cloud config file (the CCM's and the CSR
// approver's --cloud-config), YAML or JSON, read strictly. It names where
// the API token is, never the token itself.
type Config struct {
	// ClusterID names the cluster: the approver's cluster tag (the
	// --cluster of join tickets) and, unless ClusterTag says otherwise,
	// the Linode tag k8s:<clusterID>. Required.
	ClusterID string `json:"clusterID"`
	// ClusterTag is the tag that makes a Linode the cluster's. Default
	// k8s:<clusterID>.
	ClusterTag string `json:"clusterTag,omitempty"`
	// APIEndpoint is the Linode API's base URL, without the version (v4 is
	// added). Default https://api.linode.com.
	APIEndpoint string `json:"apiEndpoint,omitempty"`
	// TokenFile holds the personal access token (a file mounted from a
	// Secret). It is read at start and again before every request, so a
	// rotated token is used without a restart.
	TokenFile string `json:"tokenFile,omitempty"`
	// TokenEnv names the environment variable that holds the token when
	// there is no TokenFile. Default LINODE_API_TOKEN (as Linode's CCM reads
	// it).
	TokenEnv string `json:"tokenEnv,omitempty"`
	// NodeNamePolicy maps Linodes to Node names: only Label (the default:
	// the Node is named as the Linode's label, lower-cased).
	NodeNamePolicy string `json:"nodeNamePolicy,omitempty"`
	// PageSize is the page_size of instance lists, 25-500. Default 500 (the
	// API's largest page: the fewest requests per refresh).
	PageSize int `json:"pageSize,omitempty"`
	// PrivateCIDRs are the IPv4 ranges whose addresses of a Linode are its
	// InternalIP; every other IPv4 address is an ExternalIP. Default
	// 192.168.128.0/17, Linode's private addresses.
	PrivateCIDRs []string `json:"privateCIDRs,omitempty"`
	// VPCNames are the labels of the VPCs the cluster's Linodes talk over
	// (Linode's CCM's --vpc-names); the first is the NodeBalancers'. Set,
	// every NodeBalancer reaches its nodes at their addresses in a subnet
	// of it (VPC backends), unless a Service's annotations name another.
	VPCNames []string `json:"vpcNames,omitempty"`
	// SubnetNames are the subnets' labels in the VPCs (Linode's CCM's
	// --subnet-names); the first is the NodeBalancers'. Default [default]
	// when VPCNames is set.
	SubnetNames []string `json:"subnetNames,omitempty"`
	// MaxRetries is how often linodego tries a request again that the API
	// answered 429 (after its Retry-After), 503 or 408. Default 2; 0 none.
	MaxRetries *int `json:"maxRetries,omitempty"`
	// RetryWait is the least pause before a retry (default 1s);
	// MaxRetryWait the most, a longer Retry-After included (default 10s).
	RetryWait    metav1.Duration `json:"retryWait,omitempty"`
	MaxRetryWait metav1.Duration `json:"maxRetryWait,omitempty"`
	// ListConfig: instanceMaxAge, minRefreshInterval, requestTimeout (one API
	// request, its retries included), maxFailureBackoff.
	kit.ListConfig
}

// Defaults.
const (
	DefaultAPIEndpoint      = "https://api.linode.com"
	DefaultTokenEnv         = "LINODE_API_TOKEN"
	DefaultClusterTagPrefix = "k8s:"
	DefaultPageSize         = MaxPageSize
	DefaultPrivateCIDR      = "192.168.128.0/17"
	DefaultSubnetName       = "default"
	DefaultMaxRetries       = 2
	DefaultRetryWait        = time.Second
	DefaultMaxRetryWait     = 10 * time.Second
	DefaultRequestTimeout   = kit.DefaultRequestTimeout
	DefaultInstanceMaxAge   = kit.DefaultInstanceMaxAge
	// MinPageSize and MaxPageSize bound the API's page_size.
	MinPageSize = 25
	MaxPageSize = 500
	// MaxRetries bounds maxRetries.
	MaxRetries = 10
	// apiVersion is the API version the backend speaks.
	apiVersion = "v4"
)

// ParseConfig reads a cloud config strictly: unknown fields are errors, and
// every problem of the config is reported at once. It does not read the
// token (New does).
func ParseConfig(r io.Reader) (Config, error) {
	return kit.ParseConfig(ProviderName, r, (*Config).defaults, (*Config).validate)
}

func (c *Config) durations() []kit.Duration {
	return append(c.ListConfig.Durations(),
		kit.Duration{Name: "retryWait", Value: &c.RetryWait, Default: DefaultRetryWait},
		kit.Duration{Name: "maxRetryWait", Value: &c.MaxRetryWait, Default: DefaultMaxRetryWait})
}

// secret is where the API token is.
func (c *Config) secret() kit.Secret {
	return kit.TokenSecret(c.TokenFile, c.TokenEnv, ProviderName+" API token")
}

func (c *Config) defaults() {
	if c.ClusterTag == "" && c.ClusterID != "" {
		c.ClusterTag = DefaultClusterTagPrefix + c.ClusterID
	}
	if c.APIEndpoint == "" {
		c.APIEndpoint = DefaultAPIEndpoint
	}
	kit.DefaultSecretEnv(c.TokenFile, &c.TokenEnv, DefaultTokenEnv)
	if c.NodeNamePolicy == "" {
		c.NodeNamePolicy = agentid.PolicyLabel
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.PrivateCIDRs == nil {
		c.PrivateCIDRs = []string{DefaultPrivateCIDR}
	}
	if len(c.VPCNames) > 0 && c.SubnetNames == nil {
		c.SubnetNames = []string{DefaultSubnetName}
	}
	if c.MaxRetries == nil {
		n := DefaultMaxRetries
		c.MaxRetries = &n
	}
	kit.DefaultDurations(c.durations())
}

// checkTag: a Linode tag is 3 to 50 characters; here printable ASCII
// without spaces, so that it travels as it is in the X-Filter header.
func checkTag(tag string) error {
	if len(tag) < 3 || len(tag) > 50 || strings.ContainsFunc(tag, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return fmt.Errorf("want 3-50 printable ASCII characters without spaces, as a Linode tag")
	}
	return nil
}

func (c *Config) validate() error {
	var errs []error
	switch {
	case c.ClusterID == "":
		errs = append(errs, kit.ErrClusterIDRequired)
	case c.ClusterTag == DefaultClusterTagPrefix+c.ClusterID && checkTag(c.ClusterTag) != nil:
		errs = append(errs, fmt.Errorf("clusterID %q: the tag %s%s: %v", c.ClusterID, DefaultClusterTagPrefix, c.ClusterID, checkTag(c.ClusterTag)))
	}
	if c.ClusterTag != "" && c.ClusterTag != DefaultClusterTagPrefix+c.ClusterID {
		if err := checkTag(c.ClusterTag); err != nil {
			errs = append(errs, fmt.Errorf("clusterTag %q: %v", c.ClusterTag, err))
		}
	}
	if err := kit.CheckEndpoint(c.APIEndpoint, true); err != nil {
		errs = append(errs, fmt.Errorf("apiEndpoint: %w", err))
	} else if strings.Contains(strings.TrimRight(c.APIEndpoint, "/"), "/"+apiVersion) {
		errs = append(errs, fmt.Errorf("apiEndpoint %q: leave out the version (%s is added)", c.APIEndpoint, apiVersion))
	}
	errs = append(errs, c.secret().Check()...)
	errs = append(errs, kit.CheckOnlyPolicy(c.NodeNamePolicy, agentid.PolicyLabel))
	if c.PageSize < MinPageSize || c.PageSize > MaxPageSize {
		errs = append(errs, fmt.Errorf("pageSize %d: want %d-%d", c.PageSize, MinPageSize, MaxPageSize))
	}
	if len(c.PrivateCIDRs) == 0 {
		errs = append(errs, errors.New("privateCIDRs: want at least one range (default "+DefaultPrivateCIDR+")"))
	}
	for _, s := range c.PrivateCIDRs {
		if p, err := netip.ParsePrefix(s); err != nil || !p.Addr().Is4() {
			errs = append(errs, fmt.Errorf("privateCIDRs: %q is not an IPv4 CIDR", s))
		}
	}
	switch {
	case len(c.SubnetNames) > 0 && len(c.VPCNames) == 0:
		errs = append(errs, errors.New("subnetNames: want vpcNames too (the VPCs the subnets are in)"))
	case len(c.VPCNames) > 0 && len(c.SubnetNames) == 0:
		errs = append(errs, errors.New("subnetNames: want at least one subnet of vpcNames (default "+DefaultSubnetName+")"))
	}
	for _, n := range slices.Concat(c.VPCNames, c.SubnetNames) {
		if strings.TrimSpace(n) == "" {
			errs = append(errs, errors.New("vpcNames, subnetNames: an empty label"))
			break
		}
	}
	if c.MaxRetries != nil && (*c.MaxRetries < 0 || *c.MaxRetries > MaxRetries) {
		errs = append(errs, fmt.Errorf("maxRetries %d: want 0-%d", *c.MaxRetries, MaxRetries))
	}
	errs = append(errs, kit.CheckDurations(c.durations())...)
	if c.RetryWait.Duration > c.MaxRetryWait.Duration {
		errs = append(errs, fmt.Errorf("retryWait %v is longer than maxRetryWait %v", c.RetryWait.Duration, c.MaxRetryWait.Duration))
	}
	return kit.ConfigError(ProviderName, errs)
}

// privateRanges are PrivateCIDRs parsed (validate checked them).
func (c *Config) privateRanges() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(c.PrivateCIDRs))
	for _, s := range c.PrivateCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// TokenSource says where the API token comes from, for logs (never the
// token).
func (c *Config) TokenSource() string { return c.secret().Source() }

// token reads the API token from its file or environment variable. Its
// errors name the place, never the content.
func (c *Config) token() (string, error) { return c.secret().Read() }
