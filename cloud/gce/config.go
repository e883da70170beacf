package gce

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"time"

	"github.com/mooring-dev/mooring/cloud/gce/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Config is the GCE backend's cloud config file (the CCM's and the CSR
// approver's --cloud-config), YAML or JSON, read strictly. It holds no
// secrets: Compute API calls take their credentials from Google's
// Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, or the
// service account of the instance the binary runs on).
type Config struct {
	// Projects are the IDs of the projects whose instances may join the
	// cluster (at least one): the instance view lists each of them, and
	// identity tokens are accepted only for instances of one of them.
	Projects []string `json:"projects"`
	// ClusterID names the cluster: its instances carry the label
	// <ClusterLabel>=<ClusterID>. Required; a GCE label value.
	ClusterID string `json:"clusterID"`
	// ClusterLabel is the label key that names an instance's cluster.
	// Default mooring-cluster.
	ClusterLabel string `json:"clusterLabel,omitempty"`
	// NodeNamePolicy maps instances to Node names: only InstanceName (the
	// default: the Node is named as the instance is, as on GKE and with
	// the upstream GCE CCM).
	NodeNamePolicy string `json:"nodeNamePolicy,omitempty"`
	// ComputeEndpoint overrides the Compute API's base URL (default
	// https://compute.googleapis.com/compute/v1/).
	ComputeEndpoint string `json:"computeEndpoint,omitempty"`
	// WithoutAuthentication makes Compute API calls without credentials;
	// allowed only with a loopback computeEndpoint (tests).
	WithoutAuthentication bool `json:"withoutAuthentication,omitempty"`
	// TokenIssuer is the iss identity tokens must carry. Default
	// https://accounts.google.com.
	TokenIssuer string `json:"tokenIssuer,omitempty"`
	// CertsURL is where Google publishes the keys that sign identity
	// tokens, as a JWK set (https://www.googleapis.com/oauth2/v3/certs, the
	// default) or as a map of key ids to PEM certificates
	// (https://www.googleapis.com/oauth2/v1/certs).
	CertsURL string `json:"certsURL,omitempty"`
	// MaxClockSkew is the skew tolerated on a token's iat and exp.
	// Default 1m, at most 5m.
	MaxClockSkew metav1.Duration `json:"maxClockSkew,omitempty"`
	// ViewConfig: instanceMaxAge, minRefreshInterval, and requestTimeout
	// (one Compute API call or key fetch).
	kit.ViewConfig
	// LoadBalancers says who manages the load balancers of LoadBalancer
	// Services and the cloud routes: "none" (the default: nobody here) or
	// "upstream", the upstream GCE cloud provider (upstream.go), configured
	// by Upstream.
	LoadBalancers string `json:"loadBalancers,omitempty"`
	// Upstream configures the upstream GCE provider; required with
	// loadBalancers: upstream and allowed only then.
	Upstream *UpstreamConfig `json:"upstream,omitempty"`
	// TPM configures joins proven by the instances' vTPMs (tpm.go): the
	// CA of attestation key certificates. The approver's --tpm flag says
	// whether TPM evidence is used.
	TPM TPMConfig `json:"tpm,omitempty"`
}

// Defaults.
const (
	DefaultClusterLabel    = "mooring-cluster"
	DefaultComputeEndpoint = "https://compute.googleapis.com/compute/v1/"
	DefaultTokenIssuer     = "https://accounts.google.com"
	DefaultCertsURL        = "https://www.googleapis.com/oauth2/v3/certs"
	DefaultMaxClockSkew    = time.Minute
	MaxMaxClockSkew        = 5 * time.Minute
	DefaultRequestTimeout  = kit.DefaultRequestTimeout
)

var (
	// labelKeyPattern and labelValuePattern: GCE label keys and values
	// (lower-case letters, digits, '_' and '-'; keys start with a letter;
	// at most 63 characters; values here not empty).
	labelKeyPattern   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	labelValuePattern = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)
)

// ParseConfig reads a cloud config strictly: unknown fields are errors, and
// every problem of the config is reported at once.
func ParseConfig(r io.Reader) (Config, error) {
	return kit.ParseConfig(ProviderName, r, (*Config).defaults, (*Config).validate)
}

func (c *Config) durations() []kit.Duration {
	return append(c.ViewConfig.Durations(), kit.Duration{Name: "maxClockSkew", Value: &c.MaxClockSkew, Default: DefaultMaxClockSkew})
}

func (c *Config) defaults() {
	if c.ClusterLabel == "" {
		c.ClusterLabel = DefaultClusterLabel
	}
	if c.NodeNamePolicy == "" {
		c.NodeNamePolicy = agentid.PolicyInstanceName
	}
	if c.ComputeEndpoint == "" {
		c.ComputeEndpoint = DefaultComputeEndpoint
	}
	if c.TokenIssuer == "" {
		c.TokenIssuer = DefaultTokenIssuer
	}
	if c.CertsURL == "" {
		c.CertsURL = DefaultCertsURL
	}
	kit.DefaultDurations(c.durations())
	c.defaultsUpstream()
}

func (c *Config) validate() error {
	var errs []error
	errs = append(errs, kit.CheckScopes("projects", c.Projects, agentid.ValidProjectID,
		"a project ID (6-30 lower-case letters, digits and hyphens)")...)
	switch {
	case c.ClusterID == "":
		errs = append(errs, fmt.Errorf("clusterID is required: only instances labelled %s=<clusterID> are the cluster's", c.ClusterLabel))
	case !labelValuePattern.MatchString(c.ClusterID):
		errs = append(errs, fmt.Errorf("clusterID %q: want a GCE label value (1-63 lower-case letters, digits, _ or -)", c.ClusterID))
	}
	if !labelKeyPattern.MatchString(c.ClusterLabel) {
		errs = append(errs, fmt.Errorf("clusterLabel %q: want a GCE label key (a lower-case letter, then up to 62 lower-case letters, digits, _ or -)", c.ClusterLabel))
	}
	errs = append(errs, kit.CheckOnlyPolicy(c.NodeNamePolicy, agentid.PolicyInstanceName))
	if err := kit.CheckEndpoint(c.ComputeEndpoint, true); err != nil {
		errs = append(errs, fmt.Errorf("computeEndpoint: %w", err))
	} else if c.WithoutAuthentication && !loopbackURL(c.ComputeEndpoint) {
		errs = append(errs, errors.New("withoutAuthentication is allowed only with a loopback computeEndpoint"))
	}
	errs = append(errs, kit.CheckEndpointField("certsURL", c.CertsURL, true))
	if u, err := url.Parse(c.TokenIssuer); err != nil || u.Scheme != "https" && !(u.Scheme == "http" && kit.IsLoopback(u.Hostname())) || u.Host == "" {
		errs = append(errs, fmt.Errorf("tokenIssuer %q: want an https URL (http only on loopback)", c.TokenIssuer))
	}
	if c.MaxClockSkew.Duration < 0 || c.MaxClockSkew.Duration > MaxMaxClockSkew {
		errs = append(errs, fmt.Errorf("maxClockSkew %s: want 0-%s", c.MaxClockSkew.Duration, MaxMaxClockSkew))
	}
	errs = append(errs, kit.CheckDurations(c.ViewConfig.Durations())...)
	errs = append(errs, c.validateUpstream()...)
	if _, err := c.TPM.load(); err != nil {
		errs = append(errs, err)
	}
	return kit.ConfigError("gce", errs)
}

// ClusterFilter is the Compute API filter that selects the cluster's
// instances (AIP-160: labels.<key> = "<value>").
func (c *Config) ClusterFilter() string {
	return fmt.Sprintf("labels.%s = %q", c.ClusterLabel, c.ClusterID)
}

func loopbackURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && kit.IsLoopback(u.Hostname())
}
