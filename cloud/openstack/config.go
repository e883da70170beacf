package openstack

import (
	"crypto/x509"
	"fmt"
	"io"
	"strings"

	"github.com/google/uuid"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/openstack/agentid"
)

// Config is the OpenStack backend's cloud config file (the CCM's and the
// CSR approver's --cloud-config), YAML or JSON, read strictly. It names
// where the application credential's secret is, never the secret itself.
type Config struct {
	// AuthURL is Keystone's v3 endpoint (https://keystone.example:5000/v3);
	// plain http only to a loopback host (tests). Required.
	AuthURL string `json:"authURL"`
	// ApplicationCredentialID is the application credential's id. Set it,
	// or ApplicationCredentialName with UserID.
	ApplicationCredentialID string `json:"applicationCredentialID,omitempty"`
	// ApplicationCredentialName and UserID name the credential by its name
	// and owner instead.
	ApplicationCredentialName string `json:"applicationCredentialName,omitempty"`
	UserID                    string `json:"userID,omitempty"`
	// SecretFile is a file holding the credential's secret (read once at
	// start, surrounding white space ignored). Set it or SecretEnv, not
	// both.
	SecretFile string `json:"secretFile,omitempty"`
	// SecretEnv names the environment variable holding the secret. Default
	// OS_APPLICATION_CREDENTIAL_SECRET (the OpenStack clients') when
	// SecretFile is empty.
	SecretEnv string `json:"secretEnv,omitempty"`
	// CAFile is a PEM bundle of the CAs that Keystone's and Nova's
	// certificates chain to, for clouds with a private CA; "" uses the
	// system's.
	CAFile string `json:"caFile,omitempty"`
	// Region selects the catalog's endpoints, and is the Nodes'
	// topology.kubernetes.io/region. Required.
	Region string `json:"region"`
	// Interface selects the catalog endpoint: public (the default),
	// internal or admin.
	Interface string `json:"interface,omitempty"`
	// ClusterID names the cluster: its servers carry the tag ClusterTag
	// (or the metadata item ClusterMetadataKey=ClusterID). Required.
	ClusterID string `json:"clusterID"`
	// ClusterTag is the Nova server tag that marks the cluster's servers.
	// Default mooring-cluster=<clusterID>.
	ClusterTag string `json:"clusterTag,omitempty"`
	// ClusterMetadataKey, when set, marks the cluster's servers by a
	// metadata item <key>=<clusterID> instead of a tag. Nova cannot filter
	// a listing by metadata, so every server of the project is listed.
	ClusterMetadataKey string `json:"clusterMetadataKey,omitempty"`
	// RegionalProviderID makes providerIDs openstack://<region>/<id> (the
	// upstream CCM's OS_CCM_REGIONAL=true) instead of openstack:///<id>.
	RegionalProviderID bool `json:"regionalProviderID,omitempty"`
	// InternalNetworkNames restricts the InternalIP addresses to the
	// fixed addresses on these networks (by name); empty: every network
	// not in PublicNetworkNames (the upstream CCM's internal-network-name).
	InternalNetworkNames []string `json:"internalNetworkNames,omitempty"`
	// PublicNetworkNames lists networks whose fixed addresses are
	// ExternalIP (the upstream CCM's public-network-name).
	PublicNetworkNames []string `json:"publicNetworkNames,omitempty"`
	// NodeNamePolicy maps servers to Node names: only ServerName (the
	// default: the Node is named as the server is, lower-cased).
	NodeNamePolicy string `json:"nodeNamePolicy,omitempty"`
	// TrustedAddressSources names the sources of Node addresses, among
	// those a project member sets on a server (accessIPv4, accessIPv6,
	// metadata.hostname), whose addresses may back a kubelet serving
	// certificate's SANs. By default none does: only Nova's addresses
	// (Neutron's fixed and floating IPs) and the Node's name do. Naming a
	// source trusts every member of the project with it; the approver
	// still denies a SAN that another server or Node lists too
	// (AddressClaimedTwice). docs/openstack.md#serving-certificates.
	TrustedAddressSources []string `json:"trustedAddressSources,omitempty"`
	// RouterID is the id of the cluster's Neutron router (the upstream
	// CCM's [Route] router-id). When set, the route controller's pod CIDR
	// routes are the router's extra routes, each via its Node's InternalIP
	// (docs/openstack.md, Routes); "" leaves routes alone.
	RouterID string `json:"routerID,omitempty"`
	// LoadBalancer configures the Octavia load balancers of Services
	// (loadbalancers_config.go; docs/openstack.md, Load balancers).
	LoadBalancer LoadBalancerConfig `json:"loadBalancer,omitempty"`
	// ListConfig: instanceMaxAge, minRefreshInterval, requestTimeout (one API
	// call, a re-authentication included), maxFailureBackoff.
	kit.ListConfig
}

// Defaults.
const (
	DefaultSecretEnv        = "OS_APPLICATION_CREDENTIAL_SECRET"
	DefaultClusterTagPrefix = "mooring-cluster="
	DefaultInterface        = "public"
	DefaultRequestTimeout   = kit.DefaultRequestTimeout
)

// maxTagLength is Nova's limit on a tag, maxMetadataLength on a metadata
// key or value.
const (
	maxTagLength      = 60
	maxMetadataLength = 255
)

// ParseConfig reads a cloud config strictly: unknown fields are errors, and
// every problem of the config is reported at once. It reads no secret and
// no CA file (Config.Secret and New do).
func ParseConfig(r io.Reader) (Config, error) {
	return kit.ParseConfig(ProviderName, r, (*Config).defaults, (*Config).validate)
}

// secret is where the application credential's secret is.
func (c *Config) secret() kit.Secret {
	return kit.Secret{File: c.SecretFile, FileField: "secretFile", Env: c.SecretEnv, EnvField: "secretEnv",
		What: "openstack: application credential secret"}
}

func (c *Config) defaults() {
	kit.DefaultSecretEnv(c.SecretFile, &c.SecretEnv, DefaultSecretEnv)
	if c.Interface == "" {
		c.Interface = DefaultInterface
	}
	if c.ClusterTag == "" && c.ClusterMetadataKey == "" && c.ClusterID != "" {
		c.ClusterTag = DefaultClusterTagPrefix + c.ClusterID
	}
	if c.NodeNamePolicy == "" {
		c.NodeNamePolicy = agentid.PolicyServerName
	}
	kit.DefaultDurations(c.ListConfig.Durations())
	c.LoadBalancer.defaults()
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := kit.RequiredEndpointField("authURL", c.AuthURL, true, "Keystone's v3 endpoint, https://.../v3"); err != nil {
		errs = append(errs, err)
	} else if !strings.HasSuffix(strings.TrimSuffix(c.AuthURL, "/"), "/v3") {
		bad("authURL %q: want Keystone's v3 endpoint, ending in /v3", c.AuthURL)
	}
	switch {
	case c.ApplicationCredentialID != "" && (c.ApplicationCredentialName != "" || c.UserID != ""):
		bad("applicationCredentialID, and applicationCredentialName with userID: set one, not both")
	case c.ApplicationCredentialID != "":
	case c.ApplicationCredentialName != "" && c.UserID != "":
	case c.ApplicationCredentialName != "" || c.UserID != "":
		bad("applicationCredentialName and userID: set both (or applicationCredentialID)")
	default:
		bad("applicationCredentialID (or applicationCredentialName with userID) is required")
	}
	errs = append(errs, c.secret().Check()...)
	if c.Region == "" {
		bad("region is required (the catalog region, e.g. RegionOne)")
	} else if strings.ContainsAny(c.Region, "/ \t\n") {
		bad("region %q: a region name has no '/' or white space", c.Region)
	}
	switch c.Interface {
	case "public", "internal", "admin":
	default:
		bad("interface %q: want public, internal or admin", c.Interface)
	}
	if c.ClusterID == "" {
		bad("clusterID is required: only servers tagged (or with metadata) for it are the cluster's")
	} else if strings.ContainsAny(c.ClusterID, "/,") || strings.ContainsFunc(c.ClusterID, isSpaceOrControl) || len(c.ClusterID) > maxMetadataLength {
		bad("clusterID %q: want at most %d characters, without '/', ',' or white space", c.ClusterID, maxMetadataLength)
	}
	switch {
	case c.ClusterMetadataKey != "" && c.ClusterTag != "":
		bad("clusterTag and clusterMetadataKey: set one, not both")
	case c.ClusterMetadataKey != "":
		if len(c.ClusterMetadataKey) > maxMetadataLength || strings.ContainsFunc(c.ClusterMetadataKey, isSpaceOrControl) {
			bad("clusterMetadataKey %q: want at most %d characters without white space", c.ClusterMetadataKey, maxMetadataLength)
		}
	case c.ClusterTag != "":
		if len(c.ClusterTag) > maxTagLength || strings.ContainsAny(c.ClusterTag, "/,") || strings.ContainsFunc(c.ClusterTag, isSpaceOrControl) {
			bad("clusterTag %q: a Nova tag has at most %d characters, and no '/', ',' or white space (shorten clusterID or set clusterTag)", c.ClusterTag, maxTagLength)
		}
	}
	for _, n := range append(append([]string(nil), c.InternalNetworkNames...), c.PublicNetworkNames...) {
		if n == "" {
			bad("internalNetworkNames and publicNetworkNames: an empty network name")
		}
	}
	for _, n := range c.InternalNetworkNames {
		for _, p := range c.PublicNetworkNames {
			if n == p {
				bad("network %q is in both internalNetworkNames and publicNetworkNames", n)
			}
		}
	}
	if c.RouterID != "" {
		if _, err := uuid.Parse(c.RouterID); err != nil || len(c.RouterID) != 36 {
			bad("routerID %q: want a Neutron router's id, a UUID such as 5f2d6b3e-1c4a-4f0e-9b7d-2a8c6e4f1b30", c.RouterID)
		}
	}
	errs = append(errs, c.LoadBalancer.validate()...)
	errs = append(errs, kit.CheckOnlyPolicy(c.NodeNamePolicy, agentid.PolicyServerName))
	if _, err := c.addressSources(); err != nil {
		bad("%v", err)
	}
	errs = append(errs, kit.CheckDurations(c.ListConfig.Durations())...)
	return kit.ConfigError("openstack", errs)
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// Secret reads the application credential's secret from SecretFile or
// SecretEnv. Its errors name where the secret was looked for, never what
// was found there.
func (c *Config) Secret() (string, error) { return c.secret().Read() }

// certPool reads CAFile; nil when it is unset.
func (c *Config) certPool() (*x509.CertPool, error) { return kit.CAFilePool("openstack", c.CAFile) }

// Asserted address sources: what a member of the server's project sets.
const (
	SourceAccessIPv4       = "accessIPv4"
	SourceAccessIPv6       = "accessIPv6"
	SourceHostnameMetadata = "metadata.hostname"
)

// addressSources are the server's asserted address sources and which the
// config trusts.
func (c *Config) addressSources() (kit.AddressSources, error) {
	member := "any member of the server's project"
	return kit.NewAddressSources(map[string]string{
		SourceAccessIPv4: member, SourceAccessIPv6: member, SourceHostnameMetadata: member,
	}, c.TrustedAddressSources)
}
