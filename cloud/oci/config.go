package oci

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/oci/agentid"
)

// Config is the OCI backend's cloud config file (the CCM's and the CSR
// approver's --cloud-config), YAML or JSON, read strictly. It holds no
// secrets: API calls are signed with an API key that an OCI config file
// names (auth: APIKey) or as the instance principal of the machine the
// binary runs on (auth: InstancePrincipal).
type Config struct {
	// Tenancy is the OCID of the tenancy whose instances may join: the
	// opc-tenant of their certificates, compared exactly (a tenancy of the
	// old form, ocidv1:tenancy:..., is named so in its certificates too).
	// Required.
	Tenancy string `json:"tenancy"`
	// Compartments are the OCIDs of the compartments whose instances may
	// join (at least one; the tenancy's OCID is its root compartment): the
	// instance view lists each of them (not their subcompartments), and an
	// instance certificate's opc-compartment must be one of them.
	Compartments []string `json:"compartments"`
	// Region is the region's identifier (us-ashburn-1), whose API
	// endpoints are called. Required.
	Region string `json:"region"`
	// ClusterID names the cluster: its instances carry the tag
	// <ClusterTag>=<ClusterID>. Required.
	ClusterID string `json:"clusterID"`
	// ClusterTag is the tag key that names an instance's cluster; default
	// mooring-cluster.
	ClusterTag string `json:"clusterTag,omitempty"`
	// ClusterTagNamespace makes ClusterTag a defined tag of that
	// namespace; "" (the default): a freeform tag.
	ClusterTagNamespace string `json:"clusterTagNamespace,omitempty"`
	// NodeNamePolicy maps instances to Node names: only DisplayName (the
	// default: the display name, lower-cased, as the upstream OCI CCM).
	NodeNamePolicy string `json:"nodeNamePolicy,omitempty"`
	// Auth is how API calls are signed: APIKey (the default; the key and
	// the user the OCI config file ConfigFile names, under Profile) or
	// InstancePrincipal (the machine's own identity; a dynamic group
	// holds it).
	Auth string `json:"auth,omitempty"`
	// ConfigFile is the OCI SDK/CLI config file of auth: APIKey (user,
	// fingerprint, key_file, tenancy, region). Required with APIKey.
	ConfigFile string `json:"configFile,omitempty"`
	// Profile is the config file's profile; default DEFAULT.
	Profile string `json:"profile,omitempty"`
	// ComputeEndpoint and NetworkEndpoint override the Core Services
	// API's endpoints (default https://iaas.<region>.oraclecloud.com, as
	// the SDK builds it): https, or http to loopback (tests).
	ComputeEndpoint string `json:"computeEndpoint,omitempty"`
	NetworkEndpoint string `json:"networkEndpoint,omitempty"`
	// AuthEndpoint overrides the auth service's endpoint, whose GET
	// /v1/instancePrincipalRootCACertificates answers the region's
	// instance identity roots (default https://auth.<region>.oraclecloud.com,
	// as the SDK names it): https, or http to loopback (tests).
	AuthEndpoint string `json:"authEndpoint,omitempty"`
	// RootCAFile, when set, holds (PEM) the only trust anchors of
	// evidence, in place of the roots the auth service answers: nothing is
	// fetched then. "" (the default): the region's roots, fetched from the
	// auth service with the credentials of Auth, kept and refreshed.
	RootCAFile string `json:"rootCAFile,omitempty"`
	// MaxClockSkew is tolerated on signing times and certificate
	// validity. Default 1m, at most 5m.
	MaxClockSkew metav1.Duration `json:"maxClockSkew,omitempty"`
	// MaxEvidenceAge is how long after its signing evidence is accepted.
	// Default 5m, at most 15m.
	MaxEvidenceAge metav1.Duration `json:"maxEvidenceAge,omitempty"`
	// MaxCertificateAge is the oldest instance certificate accepted (from
	// its notBefore): OCI rotates them several times a day, so an older
	// one has been superseded, and is taken as revoked. Default 24h, at
	// most 7 days.
	MaxCertificateAge metav1.Duration `json:"maxCertificateAge,omitempty"`
	// LoadBalancerEndpoint and NetworkLoadBalancerEndpoint override the
	// Load Balancer and Network Load Balancer APIs' endpoints (default:
	// networkEndpoint when set, else https://iaas.<region>.oraclecloud.com;
	// https://network-load-balancer-api.<region>.oci.oraclecloud.com):
	// https, or http to loopback (tests).
	LoadBalancerEndpoint        string `json:"loadBalancerEndpoint,omitempty"`
	NetworkLoadBalancerEndpoint string `json:"networkLoadBalancerEndpoint,omitempty"`
	// LoadBalancer configures Services' load balancers (docs/oci.md).
	LoadBalancer LoadBalancerConfig `json:"loadBalancer,omitempty"`
	// ViewConfig: instanceMaxAge, minRefreshInterval, and requestTimeout
	// (one API call).
	kit.ViewConfig
}

// LoadBalancerConfig configures the load balancers of Services of type
// LoadBalancer, as the loadBalancer block of OCI's CCM's config does.
type LoadBalancerConfig struct {
	// Compartment is where load balancers are made (a Service's
	// oci.oraclecloud.com/compartment-id overrides it); default the first
	// of compartments. It must be one of compartments: those are listed.
	Compartment string `json:"compartment,omitempty"`
	// Subnet1 and Subnet2 are the default subnets of load balancers (OCI's
	// CCM's subnet1, subnet2): an LB takes Subnet1 (and Subnet2, when
	// public and both are AD-specific), an NLB Subnet1. Services'
	// subnet annotations override them; without either, a Service must
	// name its subnet.
	Subnet1 string `json:"subnet1,omitempty"`
	Subnet2 string `json:"subnet2,omitempty"`
	// NodeSubnets are the nodes' subnets, whose security lists the rule
	// mode All opens to the load balancers (OCI's CCM finds them from the
	// nodes' VNICs).
	NodeSubnets []string `json:"nodeSubnets,omitempty"`
	// NamePrefix is prefixed, with a hyphen, to an LB's display name (the
	// Service's UID), as OCI's CCM's LOAD_BALANCER_PREFIX; NLBs are named
	// <namespace>/<name>/<UID> without it.
	NamePrefix string `json:"namePrefix,omitempty"`
	// WorkRequestWait is how long a change waits for each work request
	// before the Service is asked about again (its load balancer is then
	// reported still being built); default 2m.
	WorkRequestWait metav1.Duration `json:"workRequestWait,omitempty"`
}

// DefaultWorkRequestWait is LoadBalancerConfig.WorkRequestWait's default.
const DefaultWorkRequestWait = 2 * time.Minute

// Auth methods.
const (
	AuthAPIKey            = "APIKey"
	AuthInstancePrincipal = "InstancePrincipal"
)

// Defaults and limits.
const (
	DefaultClusterTag    = "mooring-cluster"
	DefaultProfile       = "DEFAULT"
	DefaultMaxClockSkew  = time.Minute
	MaxMaxClockSkew      = 5 * time.Minute
	MaxMaxEvidenceAge    = 15 * time.Minute
	MaxMaxCertificateAge = 7 * 24 * time.Hour
	maxRootCAFileSize    = 1 << 20
	maxTagLen            = 100
	maxTagValueLen       = 256
)

var (
	// regionPattern: OCI region identifiers (us-ashburn-1,
	// eu-frankfurt-1, us-gov-phoenix-1).
	regionPattern = regexp.MustCompile(`^[a-z]+(-[a-z]+)+-[0-9]+$`)
	// tagKeyPattern: tag keys and namespaces, 1-100 characters, no
	// spaces and no dot (OCI refuses both in keys).
	tagKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}$`)
)

// ParseConfig reads a cloud config strictly: unknown fields are errors, and
// every problem of the config is reported at once.
func ParseConfig(r io.Reader) (Config, error) {
	return kit.ParseConfig(ProviderName, r, (*Config).defaults, (*Config).validate)
}

func (c *Config) durations() []kit.Duration {
	return append(c.ViewConfig.Durations(),
		kit.Duration{Name: "maxClockSkew", Value: &c.MaxClockSkew, Default: DefaultMaxClockSkew},
		kit.Duration{Name: "maxEvidenceAge", Value: &c.MaxEvidenceAge, Default: DefaultMaxEvidenceAge},
		kit.Duration{Name: "maxCertificateAge", Value: &c.MaxCertificateAge, Default: DefaultMaxCertificateAge},
		kit.Duration{Name: "loadBalancer.workRequestWait", Value: &c.LoadBalancer.WorkRequestWait, Default: DefaultWorkRequestWait})
}

func (c *Config) defaults() {
	if c.ClusterTag == "" {
		c.ClusterTag = DefaultClusterTag
	}
	if c.NodeNamePolicy == "" {
		c.NodeNamePolicy = agentid.PolicyDisplayName
	}
	if c.Auth == "" {
		c.Auth = AuthAPIKey
	}
	if c.Profile == "" && c.Auth == AuthAPIKey {
		c.Profile = DefaultProfile
	}
	if c.LoadBalancer.Compartment == "" && len(c.Compartments) > 0 {
		c.LoadBalancer.Compartment = c.Compartments[0]
	}
	kit.DefaultDurations(c.durations())
}

func (c *Config) validate() error {
	var errs []error
	if !agentid.ValidTenancy(c.Tenancy) {
		errs = append(errs, fmt.Errorf("tenancy %q: want the tenancy's OCID (ocid1.tenancy.oc1.. or, for a tenancy of the old form, ocidv1:tenancy:...)", c.Tenancy))
	}
	errs = append(errs, kit.CheckScopes("compartments", c.Compartments, agentid.ValidCompartment, "a compartment's OCID")...)
	if !regionPattern.MatchString(c.Region) {
		errs = append(errs, fmt.Errorf("region %q: want a region identifier such as us-ashburn-1", c.Region))
	}
	switch {
	case c.ClusterID == "":
		errs = append(errs, fmt.Errorf("clusterID is required: only instances tagged %s=<clusterID> are the cluster's", c.ClusterTag))
	case len(c.ClusterID) > maxTagValueLen:
		errs = append(errs, fmt.Errorf("clusterID: longer than %d characters (a tag value)", maxTagValueLen))
	}
	if !tagKeyPattern.MatchString(c.ClusterTag) || len(c.ClusterTag) > maxTagLen {
		errs = append(errs, fmt.Errorf("clusterTag %q: want a tag key (1-100 letters, digits, _, - or .)", c.ClusterTag))
	}
	if c.ClusterTagNamespace != "" && !tagKeyPattern.MatchString(c.ClusterTagNamespace) {
		errs = append(errs, fmt.Errorf("clusterTagNamespace %q: want a tag namespace (1-100 letters, digits, _, - or .)", c.ClusterTagNamespace))
	}
	errs = append(errs, kit.CheckOnlyPolicy(c.NodeNamePolicy, agentid.PolicyDisplayName))
	switch c.Auth {
	case AuthAPIKey:
		if c.ConfigFile == "" {
			errs = append(errs, errors.New("configFile is required with auth APIKey: the OCI config file naming the API key"))
		}
	case AuthInstancePrincipal:
		if c.ConfigFile != "" || c.Profile != "" {
			errs = append(errs, errors.New("configFile and profile are for auth APIKey, not InstancePrincipal"))
		}
	default:
		errs = append(errs, fmt.Errorf("auth %q: want %s or %s", c.Auth, AuthAPIKey, AuthInstancePrincipal))
	}
	for _, ep := range []struct{ name, url string }{{"computeEndpoint", c.ComputeEndpoint}, {"networkEndpoint", c.NetworkEndpoint},
		{"authEndpoint", c.AuthEndpoint}, {"loadBalancerEndpoint", c.LoadBalancerEndpoint},
		{"networkLoadBalancerEndpoint", c.NetworkLoadBalancerEndpoint}} {
		if ep.url == "" {
			continue
		}
		if err := kit.CheckEndpoint(ep.url, false); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep.name, err))
		}
	}
	if c.MaxClockSkew.Duration > MaxMaxClockSkew {
		errs = append(errs, fmt.Errorf("maxClockSkew %s: at most %s", c.MaxClockSkew.Duration, MaxMaxClockSkew))
	}
	if c.MaxEvidenceAge.Duration > MaxMaxEvidenceAge {
		errs = append(errs, fmt.Errorf("maxEvidenceAge %s: at most %s", c.MaxEvidenceAge.Duration, MaxMaxEvidenceAge))
	}
	if c.MaxCertificateAge.Duration > MaxMaxCertificateAge {
		errs = append(errs, fmt.Errorf("maxCertificateAge %s: at most %s", c.MaxCertificateAge.Duration, MaxMaxCertificateAge))
	}
	errs = append(errs, c.LoadBalancer.validate(c.Compartments)...)
	errs = append(errs, kit.CheckDurations(c.durations())...)
	return kit.ConfigError("oci", errs)
}

func (l *LoadBalancerConfig) validate(compartments []string) []error {
	var errs []error
	if l.Compartment != "" && !slices.Contains(compartments, l.Compartment) {
		errs = append(errs, fmt.Errorf("loadBalancer.compartment %q: not one of compartments (those are listed)", l.Compartment))
	}
	for _, s := range append([]string{l.Subnet1, l.Subnet2}, l.NodeSubnets...) {
		if s != "" && !agentid.ValidOCID(s, "subnet") {
			errs = append(errs, fmt.Errorf("loadBalancer: subnet %q: want a subnet's OCID", s))
		}
	}
	if l.Subnet2 != "" && l.Subnet1 == "" {
		errs = append(errs, errors.New("loadBalancer.subnet2 without subnet1"))
	}
	if len(l.NamePrefix) > 100 || strings.ContainsAny(l.NamePrefix, " /") {
		errs = append(errs, fmt.Errorf("loadBalancer.namePrefix %q: at most 100 characters, no space or slash", l.NamePrefix))
	}
	return errs
}

// ReadRoots reads the certificates of a roots file (PEM): at least one,
// at most 64, each a CA certificate, nothing but CERTIFICATE blocks.
func ReadRoots(path string) (*x509.CertPool, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("rootCAFile: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRootCAFileSize+1))
	if err != nil {
		return nil, 0, fmt.Errorf("rootCAFile %s: %w", path, err)
	}
	if len(data) > maxRootCAFileSize {
		return nil, 0, fmt.Errorf("rootCAFile %s: larger than %d bytes", path, maxRootCAFileSize)
	}
	ders, err := pemCertificates(data)
	if err != nil {
		return nil, 0, fmt.Errorf("rootCAFile %s: %w", path, err)
	}
	certs, err := parseCAs(ders, "rootCAFile "+path)
	if err != nil {
		return nil, 0, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, len(certs), nil
}
