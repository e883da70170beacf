package digitalocean

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/digitalocean/agentid"
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
	// RequestTimeout bounds one API request. Default 30s.
	RequestTimeout metav1.Duration `json:"requestTimeout,omitempty"`
	// InstanceMaxAge is how old a droplet answer may be for node
	// initialization, the address sweep and lifecycle checks. Default 30s.
	InstanceMaxAge metav1.Duration `json:"instanceMaxAge,omitempty"`
	// MinRefreshInterval bounds how often lookups of unknown droplets list
	// the API again. Default 2s.
	MinRefreshInterval metav1.Duration `json:"minRefreshInterval,omitempty"`
	// MaxFailureBackoff caps the pause between lists while the API fails.
	// Default 16s.
	MaxFailureBackoff metav1.Duration `json:"maxFailureBackoff,omitempty"`
}

// Defaults.
const (
	DefaultAPIEndpoint        = "https://api.digitalocean.com/"
	DefaultTokenEnv           = "DO_ACCESS_TOKEN"
	DefaultClusterTagPrefix   = "k8s:"
	DefaultPageSize           = MaxPageSize
	DefaultRequestTimeout     = 30 * time.Second
	DefaultInstanceMaxAge     = 30 * time.Second
	DefaultMinRefreshInterval = 2 * time.Second
	DefaultMaxFailureBackoff  = 16 * time.Second
	// MaxPageSize is the API's largest per_page.
	MaxPageSize = 200
)

var (
	// tagPattern: DigitalOcean tag names are letters, digits, colons,
	// dashes and underscores, at most 255 characters. It also keeps the
	// tag safe in the list's query string, which the client library
	// builds without escaping it.
	tagPattern = regexp.MustCompile(`^[A-Za-z0-9:_-]{1,255}$`)
	// envPattern: a POSIX environment variable name.
	envPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// maxTokenSize bounds a token file.
const maxTokenSize = 4096

// ParseConfig reads a cloud config strictly: unknown fields are errors, and
// every problem of the config is reported at once. It does not read the
// token (New does).
func ParseConfig(r io.Reader) (Config, error) {
	var c Config
	if err := cloud.ReadConfig(ProviderName, r, &c); err != nil {
		return c, err
	}
	c.defaults()
	return c, c.validate()
}

func (c *Config) defaults() {
	if c.ClusterTag == "" && c.ClusterID != "" {
		c.ClusterTag = DefaultClusterTagPrefix + c.ClusterID
	}
	if c.APIEndpoint == "" {
		c.APIEndpoint = DefaultAPIEndpoint
	}
	if c.TokenFile == "" && c.TokenEnv == "" {
		c.TokenEnv = DefaultTokenEnv
	}
	if c.NodeNamePolicy == "" {
		c.NodeNamePolicy = agentid.PolicyDropletName
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	for _, d := range []struct {
		v   *metav1.Duration
		def time.Duration
	}{
		{&c.RequestTimeout, DefaultRequestTimeout}, {&c.InstanceMaxAge, DefaultInstanceMaxAge},
		{&c.MinRefreshInterval, DefaultMinRefreshInterval}, {&c.MaxFailureBackoff, DefaultMaxFailureBackoff},
	} {
		if d.v.Duration == 0 {
			d.v.Duration = d.def
		}
	}
}

func (c *Config) validate() error {
	var errs []error
	switch {
	case c.ClusterID == "":
		errs = append(errs, errors.New("clusterID is required: it names the cluster (the --cluster of its join tickets)"))
	case !tagPattern.MatchString(DefaultClusterTagPrefix + c.ClusterID):
		errs = append(errs, fmt.Errorf("clusterID %q: want letters, digits, ':', '-' or '_' (at most 251), as a droplet tag allows", c.ClusterID))
	}
	if c.ClusterTag != "" && !tagPattern.MatchString(c.ClusterTag) {
		errs = append(errs, fmt.Errorf("clusterTag %q: want a DigitalOcean tag name (1-255 letters, digits, ':', '-' or '_')", c.ClusterTag))
	}
	if err := cloud.CheckEndpoint(c.APIEndpoint, true); err != nil {
		errs = append(errs, fmt.Errorf("apiEndpoint: %w", err))
	}
	switch {
	case c.TokenFile != "" && c.TokenEnv != "":
		errs = append(errs, errors.New("tokenFile and tokenEnv are exclusive: name one place for the API token"))
	case c.TokenEnv != "" && !envPattern.MatchString(c.TokenEnv):
		errs = append(errs, fmt.Errorf("tokenEnv %q is not an environment variable name", c.TokenEnv))
	}
	if c.NodeNamePolicy != agentid.PolicyDropletName {
		errs = append(errs, fmt.Errorf("nodeNamePolicy %q: the only policy is %s", c.NodeNamePolicy, agentid.PolicyDropletName))
	}
	if c.PageSize < 1 || c.PageSize > MaxPageSize {
		errs = append(errs, fmt.Errorf("pageSize %d: want 1-%d", c.PageSize, MaxPageSize))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"requestTimeout", c.RequestTimeout.Duration}, {"instanceMaxAge", c.InstanceMaxAge.Duration},
		{"minRefreshInterval", c.MinRefreshInterval.Duration}, {"maxFailureBackoff", c.MaxFailureBackoff.Duration},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", d.name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s cloud config: %w", ProviderName, err)
	}
	return nil
}

// TokenSource says where the API token comes from, for logs (never the
// token).
func (c *Config) TokenSource() string {
	if c.TokenFile != "" {
		return "file " + c.TokenFile
	}
	return "environment variable " + c.TokenEnv
}

// token reads the API token from its file or environment variable. Its
// errors name the place, never the content.
func (c *Config) token() (string, error) {
	var raw string
	if c.TokenFile != "" {
		f, err := os.Open(c.TokenFile)
		if err != nil {
			return "", fmt.Errorf("%s API token: %w", ProviderName, err)
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, maxTokenSize+1))
		if err != nil {
			return "", fmt.Errorf("%s API token: %s: %w", ProviderName, c.TokenFile, err)
		}
		if len(data) > maxTokenSize {
			return "", fmt.Errorf("%s API token: %s is larger than %d bytes", ProviderName, c.TokenFile, maxTokenSize)
		}
		raw = string(data)
	} else {
		raw = os.Getenv(c.TokenEnv)
	}
	tok := strings.TrimSpace(raw)
	switch {
	case tok == "":
		return "", fmt.Errorf("%s API token: %s is empty or unset", ProviderName, c.TokenSource())
	case strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }):
		return "", fmt.Errorf("%s API token: %s holds characters a token has not (spaces, control or non-ASCII characters)", ProviderName, c.TokenSource())
	}
	return tok, nil
}
