package provider

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/local/agentid"
	"github.com/mooring-dev/mooring/cloud/local/api"
)

// Config is the provider's cloud config file (--cloud-config), YAML or JSON.
// docs/ccm.md documents every field.
type Config struct {
	// Endpoint is the local cloud's API URL, such as http://127.0.0.1:8780.
	Endpoint string `json:"endpoint"`
	// TokenFile holds the API bearer token.
	TokenFile string `json:"tokenFile"`
	// Cluster is the cluster tag: only instances, load balancers and routes
	// carrying it are this cluster's.
	Cluster string `json:"cluster"`
	// NodeNamePolicy maps instances to Node names (InstanceName, InstanceID).
	NodeNamePolicy agentid.NamePolicy `json:"nodeNamePolicy,omitempty"`
	// ViewConfig: instanceMaxAge, minRefreshInterval, requestTimeout.
	kit.ViewConfig
	// IdentityIssuer is the iss of the cloud's identity tokens (the
	// daemon's --issuer). Default mooring-localcloud.
	IdentityIssuer string `json:"identityIssuer,omitempty"`
	// InstanceLookup is how InstancesV2 finds a Node's instance: "view"
	// (default) through the shared instance view, or "direct", one cloud
	// call per lookup as stock providers do, for comparisons.
	InstanceLookup string `json:"instanceLookup,omitempty"`
	// APIRateLimit bounds the provider's own API calls, in calls per
	// second; 0 (default) is unlimited.
	APIRateLimit float64 `json:"apiRateLimit,omitempty"`
	// APIRateBurst is how many calls may go at once under APIRateLimit.
	// Default: APIRateLimit rounded down, at least 1.
	APIRateBurst int `json:"apiRateBurst,omitempty"`
}

// Defaults.
const (
	DefaultInstanceMaxAge = kit.DefaultInstanceMaxAge
	DefaultIdentityIssuer = "mooring-localcloud"
)

// Instance lookup modes (Config.InstanceLookup).
const (
	// InstanceLookupView answers InstancesV2 from the shared instance view.
	InstanceLookupView = "view"
	// InstanceLookupDirect makes one cloud call per InstancesV2 lookup.
	InstanceLookupDirect = "direct"
)

// ParseConfig reads a cloud config strictly: unknown fields are errors.
func ParseConfig(r io.Reader) (Config, error) {
	return kit.ParseConfig("local", r, (*Config).defaults, (*Config).validate)
}

func (c *Config) defaults() {
	if c.NodeNamePolicy == "" {
		c.NodeNamePolicy = agentid.NameFromInstanceName
	}
	kit.DefaultDurations(c.ViewConfig.Durations())
	if c.IdentityIssuer == "" {
		c.IdentityIssuer = DefaultIdentityIssuer
	}
	if c.InstanceLookup == "" {
		c.InstanceLookup = InstanceLookupView
	}
	c.APIRateBurst = api.RateLimit{Limit: c.APIRateLimit, Burst: c.APIRateBurst}.EffectiveBurst()
}

func (c *Config) validate() error {
	var errs []error
	if c.Endpoint == "" {
		errs = append(errs, errors.New("endpoint is required"))
	}
	if c.TokenFile == "" {
		errs = append(errs, errors.New("tokenFile is required"))
	}
	if c.Cluster == "" {
		errs = append(errs, errors.New("cluster is required: without a cluster tag every instance of the cloud would be this cluster's"))
	}
	if _, err := agentid.ParseNamePolicy(string(c.NodeNamePolicy)); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, kit.CheckDurations(c.ViewConfig.Durations())...)
	switch c.InstanceLookup {
	case InstanceLookupView, InstanceLookupDirect:
	default:
		errs = append(errs, fmt.Errorf("instanceLookup %q: want %s or %s", c.InstanceLookup, InstanceLookupView, InstanceLookupDirect))
	}
	if c.APIRateLimit < 0 || math.IsNaN(c.APIRateLimit) || math.IsInf(c.APIRateLimit, 0) {
		errs = append(errs, fmt.Errorf("apiRateLimit %v: want a non-negative number of calls per second (0: unlimited)", c.APIRateLimit))
	}
	if c.APIRateBurst < 0 {
		errs = append(errs, fmt.Errorf("apiRateBurst %d must not be negative", c.APIRateBurst))
	}
	return kit.ConfigError("local", errs)
}

// token reads the API token from TokenFile.
func (c *Config) token() (string, error) {
	return kit.Secret{File: c.TokenFile, What: "local cloud token"}.Read()
}
