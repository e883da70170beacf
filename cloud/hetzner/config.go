package hetzner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/hetzner/agentid"
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
	// Network is the ID of the private network whose address is a
	// server's InternalIP, as the upstream CCM's HCLOUD_NETWORK. 0 (the
	// default): the addresses of every private network the server is
	// attached to.
	Network int64 `json:"network,omitempty"`
	// AddressFamily selects the public addresses listed as ExternalIP:
	// ipv4, ipv6 or dualstack (the default), as the upstream CCM's
	// HCLOUD_INSTANCES_ADDRESS_FAMILY (whose default is ipv4).
	AddressFamily string `json:"addressFamily,omitempty"`
	// NodeNamePolicy maps servers to Node names: only ServerName (the
	// default: the Node is named as the server is, lower-cased).
	NodeNamePolicy string `json:"nodeNamePolicy,omitempty"`
	// InstanceMaxAge is how old a server answer may be for node
	// initialization, the address sweep and lifecycle checks. Default 30s.
	InstanceMaxAge metav1.Duration `json:"instanceMaxAge,omitempty"`
	// MinRefreshInterval bounds how often lookups of unknown servers list
	// the API again. Default 2s.
	MinRefreshInterval metav1.Duration `json:"minRefreshInterval,omitempty"`
	// MaxFailureBackoff caps the pause between Lists while the API fails.
	// Default 16s.
	MaxFailureBackoff metav1.Duration `json:"maxFailureBackoff,omitempty"`
	// RequestTimeout bounds one API call, the library's retries included.
	// Default 30s.
	RequestTimeout metav1.Duration `json:"requestTimeout,omitempty"`
}

// Defaults.
const (
	DefaultEndpoint           = "https://api.hetzner.cloud/v1"
	DefaultTokenEnv           = "HCLOUD_TOKEN"
	DefaultClusterLabel       = "mooring.dev/cluster"
	DefaultInstanceMaxAge     = 30 * time.Second
	DefaultMinRefreshInterval = 2 * time.Second
	DefaultMaxFailureBackoff  = 16 * time.Second
	DefaultRequestTimeout     = 30 * time.Second
)

// Address families.
const (
	AddressFamilyIPv4      = "ipv4"
	AddressFamilyIPv6      = "ipv6"
	AddressFamilyDualStack = "dualstack"
)

// maxTokenFileSize bounds the token file (a Hetzner token is 64
// characters).
const maxTokenFileSize = 4096

// reservedLabelPrefix is Hetzner's own label namespace.
const reservedLabelPrefix = "hetzner.cloud/"

// envNamePattern: a POSIX environment variable name.
var envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseConfig reads a cloud config strictly: unknown fields are errors, and
// every problem of the config is reported at once. It does not read the
// token (Config.Token does).
func ParseConfig(r io.Reader) (Config, error) {
	var c Config
	if err := cloud.ReadConfig(ProviderName, r, &c); err != nil {
		return c, err
	}
	c.defaults()
	return c, c.validate()
}

func (c *Config) defaults() {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.TokenFile == "" && c.TokenEnv == "" {
		c.TokenEnv = DefaultTokenEnv
	}
	if c.ClusterLabel == "" {
		c.ClusterLabel = DefaultClusterLabel
	}
	if c.AddressFamily == "" {
		c.AddressFamily = AddressFamilyDualStack
	}
	if c.NodeNamePolicy == "" {
		c.NodeNamePolicy = agentid.PolicyServerName
	}
	for _, d := range []struct {
		v   *metav1.Duration
		def time.Duration
	}{
		{&c.InstanceMaxAge, DefaultInstanceMaxAge}, {&c.MinRefreshInterval, DefaultMinRefreshInterval},
		{&c.MaxFailureBackoff, DefaultMaxFailureBackoff}, {&c.RequestTimeout, DefaultRequestTimeout},
	} {
		if d.v.Duration == 0 {
			d.v.Duration = d.def
		}
	}
}

func (c *Config) validate() error {
	var errs []error
	if err := cloud.CheckEndpoint(c.Endpoint, true); err != nil {
		errs = append(errs, fmt.Errorf("endpoint: %w", err))
	}
	switch {
	case c.TokenFile != "" && c.TokenEnv != "":
		errs = append(errs, errors.New("tokenFile and tokenEnv: set one, not both"))
	case c.TokenEnv != "" && !envNamePattern.MatchString(c.TokenEnv):
		errs = append(errs, fmt.Errorf("tokenEnv %q is not an environment variable name", c.TokenEnv))
	}
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
	if c.Network < 0 {
		errs = append(errs, fmt.Errorf("network %d: want a network ID (or 0 for every private network)", c.Network))
	}
	switch c.AddressFamily {
	case AddressFamilyIPv4, AddressFamilyIPv6, AddressFamilyDualStack:
	default:
		errs = append(errs, fmt.Errorf("addressFamily %q: want %s, %s or %s", c.AddressFamily, AddressFamilyIPv4, AddressFamilyIPv6, AddressFamilyDualStack))
	}
	if c.NodeNamePolicy != agentid.PolicyServerName {
		errs = append(errs, fmt.Errorf("nodeNamePolicy %q: the only policy is %s", c.NodeNamePolicy, agentid.PolicyServerName))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"instanceMaxAge", c.InstanceMaxAge.Duration}, {"minRefreshInterval", c.MinRefreshInterval.Duration},
		{"maxFailureBackoff", c.MaxFailureBackoff.Duration}, {"requestTimeout", c.RequestTimeout.Duration},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", d.name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("hetzner cloud config: %w", err)
	}
	return nil
}

// LabelSelector is the Cloud API label selector that selects the cluster's
// servers.
func (c *Config) LabelSelector() string {
	return c.ClusterLabel + "==" + c.ClusterID
}

// Token reads the API token from TokenFile or TokenEnv. Its errors name
// where the token was looked for, never what was found there.
func (c *Config) Token() (string, error) {
	var raw []byte
	from := ""
	if c.TokenFile != "" {
		from = "tokenFile " + c.TokenFile
		f, err := os.Open(c.TokenFile)
		if err != nil {
			return "", fmt.Errorf("hetzner: API token: %w", err)
		}
		defer f.Close()
		raw, err = io.ReadAll(io.LimitReader(f, maxTokenFileSize+1))
		if err != nil {
			return "", fmt.Errorf("hetzner: API token: %s: %w", from, err)
		}
		if len(raw) > maxTokenFileSize {
			return "", fmt.Errorf("hetzner: API token: %s is larger than %d bytes", from, maxTokenFileSize)
		}
	} else {
		from = "environment variable " + c.TokenEnv
		raw = []byte(os.Getenv(c.TokenEnv))
	}
	tok := string(bytes.TrimSpace(raw))
	switch {
	case tok == "":
		return "", fmt.Errorf("hetzner: API token: %s is empty or unset", from)
	case strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }):
		return "", fmt.Errorf("hetzner: API token: %s holds white space or characters that are not printable ASCII", from)
	}
	return tok, nil
}
