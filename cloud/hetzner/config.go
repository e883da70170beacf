package hetzner

import (
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mooring-dev/mooring/cloud/hetzner/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
)

// Config is the Hetzner backend's cloud config file (the CCM's and the CSR
// approver's --cloud-config), YAML or JSON, read strictly. It names where
// the API token is, never the token itself.
type Config struct {
	// Endpoint is the Cloud API's base URL. Default
	// https://api.hetzner.cloud/v1; plain http only to a loopback host
	// (tests).
	Endpoint string `json:"endpoint,omitempty"`
	// TokenFile is a file holding the API token (read once at start,
	// surrounding white space ignored). Set it or TokenEnv, not both.
	TokenFile string `json:"tokenFile,omitempty"`
	// TokenEnv names the environment variable holding the API token.
	// Default HCLOUD_TOKEN (the upstream CCM's) when TokenFile is empty.
	TokenEnv string `json:"tokenEnv,omitempty"`
	// ClusterID names the cluster: its servers carry the label
	// <ClusterLabel>=<ClusterID>. Required; a label value.
	ClusterID string `json:"clusterID"`
	// ClusterLabel is the label key that names a server's cluster.
	// Default mooring.dev/cluster.
	ClusterLabel string `json:"clusterLabel,omitempty"`
	// Network is the private network (its ID, or its name) whose address
	// is a server's InternalIP and in which mooring-ccm's route
	// controller routes pod CIDRs to their Nodes, as the upstream CCM's
	// HCLOUD_NETWORK. Unset (the default): the addresses of every private
	// network the server is attached to, and no routes (Routes() answers
	// false).
	Network NetworkRef `json:"network,omitzero"`
	// AddressFamily selects the public addresses listed as ExternalIP:
	// ipv4, ipv6 or dualstack (the default), as the upstream CCM's
	// HCLOUD_INSTANCES_ADDRESS_FAMILY (whose default is ipv4).
	AddressFamily string `json:"addressFamily,omitempty"`
	// NodeNamePolicy maps servers to Node names: only ServerName (the
	// default: the Node is named as the server is, lower-cased).
	NodeNamePolicy string `json:"nodeNamePolicy,omitempty"`
	// ListConfig: instanceMaxAge, minRefreshInterval, requestTimeout (one API
	// call, the library's retries included), maxFailureBackoff.
	kit.ListConfig
}

// Defaults.
const (
	DefaultEndpoint       = "https://api.hetzner.cloud/v1"
	DefaultTokenEnv       = "HCLOUD_TOKEN"
	DefaultClusterLabel   = "mooring.dev/cluster"
	DefaultRequestTimeout = kit.DefaultRequestTimeout
)

// Address families.
const (
	AddressFamilyIPv4      = "ipv4"
	AddressFamilyIPv6      = "ipv6"
	AddressFamilyDualStack = "dualstack"
)

// reservedLabelPrefix is Hetzner's own label namespace.
const reservedLabelPrefix = "hetzner.cloud/"

// ParseConfig reads a cloud config strictly: unknown fields are errors, and
// every problem of the config is reported at once. It does not read the
// token (Config.Token does).
func ParseConfig(r io.Reader) (Config, error) {
	return kit.ParseConfig(ProviderName, r, (*Config).defaults, (*Config).validate)
}

// secret is where the API token is.
func (c *Config) secret() kit.Secret {
	return kit.TokenSecret(c.TokenFile, c.TokenEnv, "hetzner: API token")
}

func (c *Config) defaults() {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	kit.DefaultSecretEnv(c.TokenFile, &c.TokenEnv, DefaultTokenEnv)
	if c.ClusterLabel == "" {
		c.ClusterLabel = DefaultClusterLabel
	}
	if c.AddressFamily == "" {
		c.AddressFamily = AddressFamilyDualStack
	}
	if c.NodeNamePolicy == "" {
		c.NodeNamePolicy = agentid.PolicyServerName
	}
	kit.DefaultDurations(c.ListConfig.Durations())
}

func (c *Config) validate() error {
	var errs []error
	errs = append(errs, kit.CheckEndpointField("endpoint", c.Endpoint, true))
	errs = append(errs, c.secret().Check()...)
	for _, msg := range validation.IsQualifiedName(c.ClusterLabel) {
		errs = append(errs, fmt.Errorf("clusterLabel %q: %s", c.ClusterLabel, msg))
	}
	if strings.HasPrefix(c.ClusterLabel, reservedLabelPrefix) {
		errs = append(errs, fmt.Errorf("clusterLabel %q: the prefix %s is Hetzner's own", c.ClusterLabel, reservedLabelPrefix))
	}
	switch {
	case c.ClusterID == "":
		errs = append(errs, fmt.Errorf("clusterID is required: only servers labelled %s=<clusterID> are the cluster's", c.ClusterLabel))
	default:
		for _, msg := range validation.IsValidLabelValue(c.ClusterID) {
			errs = append(errs, fmt.Errorf("clusterID %q: %s", c.ClusterID, msg))
		}
	}
	errs = append(errs, c.Network.check())
	switch c.AddressFamily {
	case AddressFamilyIPv4, AddressFamilyIPv6, AddressFamilyDualStack:
	default:
		errs = append(errs, fmt.Errorf("addressFamily %q: want %s, %s or %s", c.AddressFamily, AddressFamilyIPv4, AddressFamilyIPv6, AddressFamilyDualStack))
	}
	errs = append(errs, kit.CheckOnlyPolicy(c.NodeNamePolicy, agentid.PolicyServerName))
	errs = append(errs, kit.CheckDurations(c.ListConfig.Durations())...)
	return kit.ConfigError("hetzner", errs)
}

// LabelSelector is the Cloud API label selector that selects the cluster's
// servers.
func (c *Config) LabelSelector() string {
	return c.ClusterLabel + "==" + c.ClusterID
}

// Token reads the API token from TokenFile or TokenEnv. Its errors name
// where the token was looked for, never what was found there.
func (c *Config) Token() (string, error) { return c.secret().Read() }
