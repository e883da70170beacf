package digitalocean

import (
	"fmt"
	"io"
	"regexp"

	"github.com/mooring-dev/mooring/cloud/digitalocean/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
)

// Config is the DigitalOcean backend's cloud config file (the CCM's and the
// CSR approver's --cloud-config), YAML or JSON, read strictly. It names
// where the API token is, never the token itself.
type Config struct {
	// ClusterID names the cluster: the approver's cluster tag (the
	// --cluster of join tickets) and, unless ClusterTag says otherwise,
	// the droplet tag k8s:<clusterID>. Required.
	ClusterID string `json:"clusterID"`
	// ClusterTag is the droplet tag that makes a droplet the cluster's.
	// Default k8s:<clusterID>, the form DigitalOcean's own CCM tags a
	// cluster's resources with (DO_CLUSTER_ID).
	ClusterTag string `json:"clusterTag,omitempty"`
	// APIEndpoint is the DigitalOcean API's base URL. Default
	// https://api.digitalocean.com/.
	APIEndpoint string `json:"apiEndpoint,omitempty"`
	// TokenFile holds the API token (a file mounted from a Secret). It is
	// read at start and again before every request, so a rotated token is
	// used without a restart.
	TokenFile string `json:"tokenFile,omitempty"`
	// TokenEnv names the environment variable that holds the API token
	// when there is no TokenFile. Default DO_ACCESS_TOKEN (as DigitalOcean's
	// CCM reads it).
	TokenEnv string `json:"tokenEnv,omitempty"`
	// NodeNamePolicy maps droplets to Node names: only DropletName (the
	// default: the Node is named as the droplet is, lower-cased).
	NodeNamePolicy string `json:"nodeNamePolicy,omitempty"`
	// PageSize is the per_page of droplet lists, 1-200. Default 200 (the
	// API's largest page: the fewest requests per refresh).
	PageSize int `json:"pageSize,omitempty"`
	// ListConfig: instanceMaxAge, minRefreshInterval, requestTimeout (one API
	// request), maxFailureBackoff.
	kit.ListConfig
}

// Defaults.
const (
	DefaultAPIEndpoint      = "https://api.digitalocean.com/"
	DefaultTokenEnv         = "DO_ACCESS_TOKEN"
	DefaultClusterTagPrefix = "k8s:"
	DefaultPageSize         = MaxPageSize
	DefaultRequestTimeout   = kit.DefaultRequestTimeout
	DefaultInstanceMaxAge   = kit.DefaultInstanceMaxAge
	// MaxPageSize is the API's largest per_page.
	MaxPageSize = 200
)

// tagPattern: DigitalOcean tag names are letters, digits, colons, dashes
// and underscores, at most 255 characters. It also keeps the tag safe in
// the list's query string, which the client library builds without
// escaping it.
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9:_-]{1,255}$`)

// ParseConfig reads a cloud config strictly: unknown fields are errors, and
// every problem of the config is reported at once. It does not read the
// token (New does).
func ParseConfig(r io.Reader) (Config, error) {
	return kit.ParseConfig(ProviderName, r, (*Config).defaults, (*Config).validate)
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
		c.NodeNamePolicy = agentid.PolicyDropletName
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	kit.DefaultDurations(c.ListConfig.Durations())
}

func (c *Config) validate() error {
	var errs []error
	switch {
	case c.ClusterID == "":
		errs = append(errs, kit.ErrClusterIDRequired)
	case !tagPattern.MatchString(DefaultClusterTagPrefix + c.ClusterID):
		errs = append(errs, fmt.Errorf("clusterID %q: want letters, digits, ':', '-' or '_' (at most 251), as a droplet tag allows", c.ClusterID))
	}
	if c.ClusterTag != "" && !tagPattern.MatchString(c.ClusterTag) {
		errs = append(errs, fmt.Errorf("clusterTag %q: want a DigitalOcean tag name (1-255 letters, digits, ':', '-' or '_')", c.ClusterTag))
	}
	errs = append(errs, kit.CheckEndpointField("apiEndpoint", c.APIEndpoint, true))
	errs = append(errs, c.secret().Check()...)
	errs = append(errs, kit.CheckOnlyPolicy(c.NodeNamePolicy, agentid.PolicyDropletName))
	if c.PageSize < 1 || c.PageSize > MaxPageSize {
		errs = append(errs, fmt.Errorf("pageSize %d: want 1-%d", c.PageSize, MaxPageSize))
	}
	errs = append(errs, kit.CheckDurations(c.ListConfig.Durations())...)
	return kit.ConfigError(ProviderName, errs)
}

// TokenSource says where the API token comes from, for logs (never the
// token).
func (c *Config) TokenSource() string { return c.secret().Source() }

// token reads the API token from its file or environment variable. Its
// errors name the place, never the content.
func (c *Config) token() (string, error) { return c.secret().Read() }
