package vsphere

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/vsphere/agentid"
)

// Config is the vSphere backend's cloud config file (the CCM's and the CSR
// approver's --cloud-config), YAML or JSON, read strictly. It names where
// the password is, never the password itself.
type Config struct {
	// Server is vCenter's SDK URL, https://<vcenter>/sdk (a bare host
	// name means that URL). Plain http only to a loopback host (tests).
	// Required.
	Server string `json:"server"`
	// CAFile is a PEM bundle of the CAs that vCenter's certificate is
	// checked against. Default: the system's roots. There is no way to
	// skip the check.
	CAFile string `json:"caFile,omitempty"`
	// Username is the vCenter user (user@domain) mooring logs in as.
	// Required.
	Username string `json:"username"`
	// PasswordFile holds the user's password (read at start and at each
	// new login; surrounding white space ignored). Set it or PasswordEnv,
	// not both.
	PasswordFile string `json:"passwordFile,omitempty"`
	// PasswordEnv names the environment variable holding the password.
	// Default VSPHERE_PASSWORD when PasswordFile is empty.
	PasswordEnv string `json:"passwordEnv,omitempty"`
	// ClusterID names the cluster: the approver's cluster tag (the
	// --cluster of join tickets) and, with ClusterTagCategory, the name of
	// the tag the cluster's VMs carry. Required.
	ClusterID string `json:"clusterID"`
	// Folder is the inventory path of the VM folder that holds the
	// cluster's VMs, /<datacenter>/vm/<folder>...: every VM in it or below
	// it is the cluster's (templates aside). Required.
	Folder string `json:"folder"`
	// ClusterTagCategory, when set, narrows the cluster to the VMs in
	// Folder that carry the tag named ClusterID of this tag category.
	ClusterTagCategory string `json:"clusterTagCategory,omitempty"`
	// Labels names the tag categories of the topology labels, as the
	// upstream vSphere CCM's labels.zone and labels.region: a VM's zone is
	// the name of the tag of category Labels.Zone on its host or the
	// host's ancestors (cluster, folders, datacenter), nearest first, else
	// on the VM or its folders; the region likewise. Empty: no zone or
	// region.
	Labels Labels `json:"labels,omitempty"`
	// Nodes selects the addresses among those VMware Tools reports.
	Nodes Nodes `json:"nodes,omitempty"`
	// TrustedAddressSources names the sources of Node addresses whose
	// addresses may back a kubelet serving certificate's SANs:
	// guest.hostName and guest.net. Every address of a vSphere VM comes
	// from VMware Tools in the guest, which root in the VM controls, so by
	// default none does (the Node's name, the VM's name in vCenter, still
	// does). Naming a source trusts every VM's guest with it; the approver
	// still denies a SAN that another VM or Node lists too
	// (AddressClaimedTwice). docs/vsphere.md#serving-certificates.
	TrustedAddressSources []string `json:"trustedAddressSources,omitempty"`
	// NodeNamePolicy maps VMs to Node names: only VMName (the default: the
	// Node is named as the VM is, lower-cased).
	NodeNamePolicy string `json:"nodeNamePolicy,omitempty"`
	// ListConfig: instanceMaxAge, minRefreshInterval, requestTimeout (one
	// listing, its few calls, or one lookup), maxFailureBackoff.
	kit.ListConfig
	// TagCacheTTL is how long tag and category names are kept before they
	// are read again (a tag renamed in vCenter shows after at most this
	// long). Default 10m.
	TagCacheTTL metav1.Duration `json:"tagCacheTTL,omitempty"`
}

// Labels are the tag categories of the topology labels.
type Labels struct {
	Zone   string `json:"zone,omitempty"`
	Region string `json:"region,omitempty"`
}

// Nodes selects a VM's InternalIP and ExternalIP among the addresses of its
// network cards that VMware Tools reports (guest.net), as the upstream
// vSphere CCM's nodes section does: by subnet first, then by the name of
// the vSphere network, else the first address of the family as both.
type Nodes struct {
	// InternalNetworkSubnetCIDR and ExternalNetworkSubnetCIDR are
	// comma-separated CIDRs.
	InternalNetworkSubnetCIDR string `json:"internalNetworkSubnetCIDR,omitempty"`
	ExternalNetworkSubnetCIDR string `json:"externalNetworkSubnetCIDR,omitempty"`
	// InternalVMNetworkName and ExternalVMNetworkName are vSphere network
	// names (case-insensitive).
	InternalVMNetworkName string `json:"internalVmNetworkName,omitempty"`
	ExternalVMNetworkName string `json:"externalVmNetworkName,omitempty"`
	// IPFamily is ipv4 (the default) or ipv6.
	IPFamily string `json:"ipFamily,omitempty"`
}

// Defaults.
const (
	DefaultPasswordEnv = "VSPHERE_PASSWORD"
	DefaultTagCacheTTL = 10 * time.Minute
	IPv4Family         = "ipv4"
	IPv6Family         = "ipv6"
)

// ParseConfig reads a cloud config strictly: unknown fields are errors, and
// every problem of the config is reported at once. It reads neither the
// password nor the CA file.
func ParseConfig(r io.Reader) (Config, error) {
	return kit.ParseConfig(ProviderName, r, (*Config).defaults, (*Config).validate)
}

func (c *Config) durations() []kit.Duration {
	return append(c.ListConfig.Durations(),
		kit.Duration{Name: "tagCacheTTL", Value: &c.TagCacheTTL, Default: DefaultTagCacheTTL})
}

// secret is where the password is: any characters are kept (govmomi sends
// it in the SOAP login's body and base64-encoded to the REST API).
func (c *Config) secret() kit.Secret {
	return kit.Secret{File: c.PasswordFile, FileField: "passwordFile", Env: c.PasswordEnv, EnvField: "passwordEnv", Password: true,
		What: "vsphere: password"}
}

func (c *Config) defaults() {
	if c.Server != "" && !strings.Contains(c.Server, "://") {
		c.Server = "https://" + c.Server + "/sdk"
	}
	kit.DefaultSecretEnv(c.PasswordFile, &c.PasswordEnv, DefaultPasswordEnv)
	if c.NodeNamePolicy == "" {
		c.NodeNamePolicy = agentid.PolicyVMName
	}
	if c.Nodes.IPFamily == "" {
		c.Nodes.IPFamily = IPv4Family
	}
	kit.DefaultDurations(c.durations())
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	errs = append(errs, kit.RequiredEndpointField("server", c.Server, true, "vCenter's https://<host>/sdk"))
	if c.Username == "" {
		bad("username is required")
	}
	errs = append(errs, c.secret().Check()...)
	if c.ClusterID == "" {
		bad("clusterID is required: it is the cluster's name in join tickets (and its tag's, with clusterTagCategory)")
	} else {
		for _, msg := range validation.IsValidLabelValue(c.ClusterID) {
			bad("clusterID %q: %s", c.ClusterID, msg)
		}
	}
	if err := checkFolder(c.Folder); err != nil {
		bad("folder: %v", err)
	}
	if c.Labels.Zone != "" && c.Labels.Zone == c.Labels.Region {
		bad("labels: zone and region name the same tag category %q", c.Labels.Zone)
	}
	if c.ClusterTagCategory != "" && (c.ClusterTagCategory == c.Labels.Zone || c.ClusterTagCategory == c.Labels.Region) {
		bad("clusterTagCategory %q is also a topology label's category", c.ClusterTagCategory)
	}
	for _, s := range []struct{ name, v string }{
		{"nodes.internalNetworkSubnetCIDR", c.Nodes.InternalNetworkSubnetCIDR},
		{"nodes.externalNetworkSubnetCIDR", c.Nodes.ExternalNetworkSubnetCIDR},
	} {
		if _, err := parseCIDRs(s.v); err != nil {
			bad("%s: %v", s.name, err)
		}
	}
	if c.Nodes.IPFamily != IPv4Family && c.Nodes.IPFamily != IPv6Family {
		bad("nodes.ipFamily %q: want %s or %s", c.Nodes.IPFamily, IPv4Family, IPv6Family)
	}
	errs = append(errs, kit.CheckOnlyPolicy(c.NodeNamePolicy, agentid.PolicyVMName))
	if _, err := c.addressSources(); err != nil {
		bad("%v", err)
	}
	errs = append(errs, kit.CheckDurations(c.durations())...)
	return kit.ConfigError("vsphere", errs)
}

// checkFolder accepts an absolute inventory path of a folder inside a
// datacenter's VM folder: /<datacenter>/vm[/...].
func checkFolder(p string) error {
	switch {
	case p == "":
		return errors.New("required: the inventory path of the cluster's VM folder, /<datacenter>/vm/<folder>")
	case !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//"):
		return fmt.Errorf("%q: want an absolute inventory path such as /<datacenter>/vm/<folder>", p)
	}
	parts := strings.Split(p[1:], "/")
	if len(parts) < 2 || parts[1] != "vm" {
		return fmt.Errorf("%q: want a path inside a datacenter's VM folder, /<datacenter>/vm[/<folder>...]", p)
	}
	return nil
}

// parseCIDRs reads comma-separated CIDRs ("" is none).
func parseCIDRs(s string) ([]*net.IPNet, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []*net.IPNet
	for _, part := range strings.Split(s, ",") {
		_, n, err := net.ParseCIDR(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// Password reads the password from PasswordFile or PasswordEnv. Its errors
// name where it was looked for, never what was found there.
func (c *Config) Password() (string, error) { return c.secret().Read() }

// roots reads CAFile; nil (the system's roots) when it is unset.
func (c *Config) roots() (*x509.CertPool, error) { return kit.CAFilePool("vsphere", c.CAFile) }

// serverURL is Server parsed.
func (c *Config) serverURL() *url.URL {
	u, _ := url.Parse(c.Server)
	return u
}

// Asserted address sources: all of a VM's addresses come from VMware Tools,
// which runs in the guest and reports what the guest says.
const (
	SourceGuestHostName = "guest.hostName"
	SourceGuestNet      = "guest.net"
)

// addressSources are the VM's address sources and which the config trusts.
func (c *Config) addressSources() (kit.AddressSources, error) {
	return kit.NewAddressSources(map[string]string{
		SourceGuestHostName: "the VM's guest, through VMware Tools",
		SourceGuestNet:      "the VM's guest, through VMware Tools",
	}, c.TrustedAddressSources)
}
