package azure

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Config is the Azure backend's cloud config file (the CCM's and the CSR
// approver's --cloud-config), YAML or JSON, read strictly. It holds no
// secret: ARM calls take a token from the VM's managed identity (or the
// credential chain named by credential).
type Config struct {
	// SubscriptionID is the subscription of the cluster's VMs. Required.
	SubscriptionID string `json:"subscriptionID"`
	// ResourceGroup holds the cluster's VMs, scale sets and NICs. Required.
	ResourceGroup string `json:"resourceGroup"`
	// ClusterID names the cluster: its VMs and scale sets carry the tag
	// kubernetes.io_cluster_<ClusterID> = owned or shared. Required.
	ClusterID string `json:"clusterID"`
	// ARMEndpoint is Azure Resource Manager's URL; default
	// https://management.azure.com (other clouds: theirs). Plain http only
	// to a loopback host (tests).
	ARMEndpoint string `json:"armEndpoint,omitempty"`
	// ARMAudience is the token audience for ARM; default the endpoint's.
	ARMAudience string `json:"armAudience,omitempty"`
	// Credential: "managedIdentity" (default: the VM's or pod's managed
	// identity, azidentity.ManagedIdentityCredential) or "default"
	// (azidentity.DefaultAzureCredential: environment, workload identity,
	// managed identity, Azure CLI).
	Credential string `json:"credential,omitempty"`
	// UserAssignedIdentityID is the client id of a user-assigned managed
	// identity; "" is the system-assigned one.
	UserAssignedIdentityID string `json:"userAssignedIdentityID,omitempty"`
	// AllowedSubscriptions are the subscriptions whose attested documents
	// are accepted; default [SubscriptionID].
	AllowedSubscriptions []string `json:"allowedSubscriptions,omitempty"`
	// AttestationRootsFile holds PEM roots the documents' signer must chain
	// to; "" is the system's roots (Azure's signer is issued under a
	// public CA).
	AttestationRootsFile string `json:"attestationRootsFile,omitempty"`
	// AttestationIntermediatesFile optionally holds PEM intermediate CA
	// certificates: extra chain candidates besides those fetched from the
	// signer's CA Issuers URL (the document carries only the signer's
	// certificate). Needed only where the approver cannot reach the AIA
	// hosts; Microsoft rotates these CAs without notice.
	AttestationIntermediatesFile string `json:"attestationIntermediatesFile,omitempty"`
	// AttestationAIAAllowedHosts are where the signer's issuers may be
	// fetched from (its CA Issuers URLs, plain http by design; what is
	// fetched must still chain to the roots): entries "host",
	// "host:port" or "host/path-prefix"; default DefaultAIAAllowedHosts.
	// ["none"] fetches nothing.
	AttestationAIAAllowedHosts []string `json:"attestationAIAAllowedHosts,omitempty"`
	// AttestationAIACacheTTL is how long a fetched issuer is kept (24h).
	AttestationAIACacheTTL metav1.Duration `json:"attestationAIACacheTTL,omitempty"`
	// SignerNames the signer certificate must be for; default
	// [metadata.azure.com].
	SignerNames []string `json:"signerNames,omitempty"`
	// MaxDocumentAge is how long after its timeStamp.createdOn an attested
	// document is accepted (plus MaxClockSkew). Default 5m, at most 15m.
	MaxDocumentAge metav1.Duration `json:"maxDocumentAge,omitempty"`
	// MaxClockSkew is tolerated between Azure's clock and the approver's,
	// on createdOn (either way) and expiresOn. Default 1m, at most 5m.
	MaxClockSkew metav1.Duration `json:"maxClockSkew,omitempty"`
	// VTPMRootsFile holds PEM roots that Trusted Launch vTPMs' attestation
	// key certificates must chain to (TPM evidence, docs/azure.md); ""
	// is Microsoft's Azure Virtual TPM Root Certificate Authority 2023,
	// built in.
	VTPMRootsFile string `json:"vtpmRootsFile,omitempty"`
	// VTPMIntermediatesFile optionally holds PEM issuing CA certificates
	// of those AK certificates, besides the built-in Global Virtual TPM
	// CA - 03 (the certificate in the vTPM is the leaf alone).
	VTPMIntermediatesFile string `json:"vtpmIntermediatesFile,omitempty"`
	// RouteTableName names the route table where the route controller
	// (--configure-cloud-routes) routes each Node's pod CIDR via its VM's
	// private IP, kubenet's routes (docs/azure.md, Routes); the table must
	// exist, associated with the nodes' subnet. "" gives the provider no
	// routes. cloud-provider-azure's field of the same name.
	RouteTableName string `json:"routeTableName,omitempty"`
	// RouteTableResourceGroup holds the route table; default
	// resourceGroup.
	RouteTableResourceGroup string `json:"routeTableResourceGroup,omitempty"`
	// LoadBalancerName names the cluster's Standard load balancer, which
	// holds a frontend IP configuration per Service of type LoadBalancer
	// (docs/azure.md, Load balancers), and with "-internal" the internal
	// one; default kubernetes, the name cloud-provider-azure gives it
	// (its --cluster-name's default).
	LoadBalancerName string `json:"loadBalancerName,omitempty"`
	// LoadBalancerResourceGroup holds the load balancers and the public
	// IPs made for Services; default resourceGroup.
	LoadBalancerResourceGroup string `json:"loadBalancerResourceGroup,omitempty"`
	// VnetName and SubnetName name the subnet of internal load balancers'
	// frontends (the azure-load-balancer-internal-subnet annotation names
	// another of the virtual network's); VnetResourceGroup holds the
	// virtual network (default resourceGroup). Internal Services are
	// refused without them.
	VnetName          string `json:"vnetName,omitempty"`
	SubnetName        string `json:"subnetName,omitempty"`
	VnetResourceGroup string `json:"vnetResourceGroup,omitempty"`
	// SecurityGroupName names the network security group of the nodes
	// (or their subnet) where each Service's ports are allowed in from its
	// source ranges; SecurityGroupResourceGroup holds it (default
	// resourceGroup). "" writes no security rules.
	SecurityGroupName          string `json:"securityGroupName,omitempty"`
	SecurityGroupResourceGroup string `json:"securityGroupResourceGroup,omitempty"`
	// DisableLoadBalancers gives the provider no load balancers (another
	// controller, such as cloud-provider-azure's, serves the Services).
	DisableLoadBalancers bool `json:"disableLoadBalancers,omitempty"`
	// ViewConfig: instanceMaxAge, minRefreshInterval, requestTimeout
	// (defaults 30s, 2s, 30s).
	kit.ViewConfig
}

// Defaults.
const (
	DefaultARMEndpoint = "https://management.azure.com"
)

// Credential kinds.
const (
	CredentialManagedIdentity = "managedIdentity"
	CredentialDefault         = "default"
)

// ClusterTagPrefix starts the tag key of the cluster's VMs and scale sets
// (Azure tag names allow no '/'): kubernetes.io_cluster_<clusterID>.
const ClusterTagPrefix = "kubernetes.io_cluster_"

// Values of the cluster tag.
const (
	ClusterTagOwned  = "owned"
	ClusterTagShared = "shared"
)

var (
	// Azure resource group names: 1-90 of letters, digits, _ - . ( ),
	// not ending in '.'.
	resourceGroupRE = regexp.MustCompile(`^[-\w.()]{0,89}[-\w()]$`)
	clusterIDRE     = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	// Azure route table names: 1-80 of letters, digits, _ . -, starting
	// with a letter or digit, ending with a letter, digit or _.
	routeTableRE = regexp.MustCompile(`^[A-Za-z0-9]([-\w.]{0,78}\w)?$`)
)

// routeTableGroup is the route table's resource group.
func (c *Config) routeTableGroup() string {
	if c.RouteTableResourceGroup != "" {
		return c.RouteTableResourceGroup
	}
	return c.ResourceGroup
}

// ParseConfig reads a cloud config strictly; every problem is reported.
func ParseConfig(r io.Reader) (Config, error) {
	return kit.ParseConfig(ProviderName, r, (*Config).defaults, (*Config).validate)
}

func (c *Config) durations() []kit.Duration {
	return append(c.ViewConfig.Durations(),
		kit.Duration{Name: "attestationAIACacheTTL", Value: &c.AttestationAIACacheTTL, Default: DefaultAIACacheTTL},
		kit.Duration{Name: "maxDocumentAge", Value: &c.MaxDocumentAge, Default: DefaultMaxDocumentAge},
		kit.Duration{Name: "maxClockSkew", Value: &c.MaxClockSkew, Default: DefaultMaxClockSkew})
}

// ClusterTagKey is the tag key the cluster's VMs carry.
func (c *Config) ClusterTagKey() string { return ClusterTagPrefix + c.ClusterID }

func (c *Config) defaults() {
	c.loadBalancerDefaults() // loadbalancers_config.go
	if c.ARMEndpoint == "" {
		c.ARMEndpoint = DefaultARMEndpoint
	}
	if c.Credential == "" {
		c.Credential = CredentialManagedIdentity
	}
	if len(c.AllowedSubscriptions) == 0 && c.SubscriptionID != "" {
		c.AllowedSubscriptions = []string{c.SubscriptionID}
	}
	if len(c.AttestationAIAAllowedHosts) == 0 {
		c.AttestationAIAAllowedHosts = slices.Clone(DefaultAIAAllowedHosts)
	}
	kit.DefaultDurations(c.durations())
}

func (c *Config) validate() error {
	var errs []error
	if !agentid.ValidUUID(c.SubscriptionID) {
		errs = append(errs, fmt.Errorf("subscriptionID %q: want the subscription id (a UUID)", c.SubscriptionID))
	}
	if !resourceGroupRE.MatchString(c.ResourceGroup) {
		errs = append(errs, fmt.Errorf("resourceGroup %q: want a resource group name", c.ResourceGroup))
	}
	if !clusterIDRE.MatchString(c.ClusterID) {
		errs = append(errs, fmt.Errorf("clusterID %q: want 1-100 letters, digits or ._- (it ends the tag name %s<clusterID>)", c.ClusterID, ClusterTagPrefix))
	}
	errs = append(errs, c.validateLoadBalancers()...) // loadbalancers_config.go
	if c.RouteTableName != "" && !routeTableRE.MatchString(c.RouteTableName) {
		errs = append(errs, fmt.Errorf("routeTableName %q: want a route table name (1-80 letters, digits, _ . -)", c.RouteTableName))
	}
	if c.RouteTableResourceGroup != "" && (c.RouteTableName == "" || !resourceGroupRE.MatchString(c.RouteTableResourceGroup)) {
		errs = append(errs, fmt.Errorf("routeTableResourceGroup %q: want a resource group name, with routeTableName", c.RouteTableResourceGroup))
	}
	errs = append(errs, kit.CheckEndpointField("armEndpoint", c.ARMEndpoint, true))
	switch c.Credential {
	case CredentialManagedIdentity, CredentialDefault:
	default:
		errs = append(errs, fmt.Errorf("credential %q: want %s or %s", c.Credential, CredentialManagedIdentity, CredentialDefault))
	}
	for _, s := range c.AllowedSubscriptions {
		if !agentid.ValidUUID(s) {
			errs = append(errs, fmt.Errorf("allowedSubscriptions: %q is not a subscription id", s))
		}
	}
	if !c.noAIA() {
		if _, err := parseAIAAllowed(c.AttestationAIAAllowedHosts); err != nil {
			errs = append(errs, fmt.Errorf("attestationAIAAllowedHosts: %w", err))
		}
	}
	errs = append(errs, kit.CheckDurations(c.durations())...)
	if c.MaxDocumentAge.Duration > MaxMaxDocumentAge {
		errs = append(errs, fmt.Errorf("maxDocumentAge %s: at most %s", c.MaxDocumentAge.Duration, MaxMaxDocumentAge))
	}
	if c.MaxClockSkew.Duration > MaxMaxClockSkew {
		errs = append(errs, fmt.Errorf("maxClockSkew %s: at most %s", c.MaxClockSkew.Duration, MaxMaxClockSkew))
	}
	return kit.ConfigError("azure", errs)
}

// VerifierOptions builds the evidence verifier's options, reading the
// certificate files.
func (c *Config) VerifierOptions() (VerifierOptions, error) {
	o := VerifierOptions{Subscriptions: c.AllowedSubscriptions, SignerNames: c.SignerNames, AIACacheTTL: c.AttestationAIACacheTTL.Duration,
		MaxDocumentAge: c.MaxDocumentAge.Duration, MaxClockSkew: c.MaxClockSkew.Duration}
	if !c.noAIA() {
		o.AIAAllowedHosts = c.AttestationAIAAllowedHosts
	}
	if c.AttestationRootsFile == "" {
		roots, err := x509.SystemCertPool()
		if err != nil {
			return o, fmt.Errorf("azure: the system's roots: %w", err)
		}
		o.Roots = roots
	} else {
		certs, err := readCerts(c.AttestationRootsFile)
		if err != nil {
			return o, fmt.Errorf("azure: attestationRootsFile: %w", err)
		}
		o.Roots = x509.NewCertPool()
		for _, cert := range certs {
			o.Roots.AddCert(cert)
		}
	}
	if c.AttestationIntermediatesFile != "" {
		certs, err := readCerts(c.AttestationIntermediatesFile)
		if err != nil {
			return o, fmt.Errorf("azure: attestationIntermediatesFile: %w", err)
		}
		o.Intermediates = certs
	}
	return o, nil
}

// VTPMOptions builds the vTPM check's options, reading the certificate
// files.
func (c *Config) VTPMOptions() (VTPMOptions, error) {
	var o VTPMOptions
	if c.VTPMRootsFile != "" {
		certs, err := readCerts(c.VTPMRootsFile)
		if err != nil {
			return o, fmt.Errorf("azure: vtpmRootsFile: %w", err)
		}
		o.Roots = x509.NewCertPool()
		for _, cert := range certs {
			o.Roots.AddCert(cert)
		}
	}
	if c.VTPMIntermediatesFile != "" {
		certs, err := readCerts(c.VTPMIntermediatesFile)
		if err != nil {
			return o, fmt.Errorf("azure: vtpmIntermediatesFile: %w", err)
		}
		o.Intermediates = certs
	}
	return o, nil
}

// noAIA: the allow-list is ["none"].
func (c *Config) noAIA() bool {
	return len(c.AttestationAIAAllowedHosts) == 1 && c.AttestationAIAAllowedHosts[0] == "none"
}

// readCerts reads every CERTIFICATE block of a PEM file; at least one,
// and nothing else.
func readCerts(path string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseCerts(path, data)
}

// parseCerts reads every CERTIFICATE block of PEM data (named path in
// errors); at least one, and nothing else.
func parseCerts(path string, data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := data; len(strings.TrimSpace(string(rest))) > 0; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, fmt.Errorf("%s: trailing bytes that are not PEM", path)
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: a %s block; want only CERTIFICATE blocks", path, b.Type)
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, cert)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no certificate", path)
	}
	return out, nil
}
