package azure

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azcloud "github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
	"github.com/mooring-dev/mooring/cloud/view"
)

// ProviderName is the backend's name, for --cloud-provider and the node
// agent's cloud setting.
const ProviderName = agentid.Name

// Factory builds the provider from its cloud-config; backend.go registers
// it.
var Factory = kit.Factory(ParseConfig, New)

// Cloud is Azure as Kubernetes and mooring see it: InstancesV2 and Zones
// over the shared view of the cluster's VMs, and the approver's attested
// document verifier, and with a routeTableName the route table's routes
// (routes.go), and unless disableLoadBalancers the Services' load
// balancers (loadbalancers.go).
type Cloud struct {
	kit.Base          // InstancesV2 and Zones over the view, the Attester
	kit.InstancesOnly // Initialize; LoadBalancer and Routes are this backend's own

	cfg     Config
	clients *Clients
	view    *view.View
	routes  *routes                         // nil without a routeTableName (routes.go)
	lbs     *loadbalancer.Balancers[lbSpec] // nil with disableLoadBalancers (loadbalancers.go)
	vtpm    *vtpmVerifier                   // TPM evidence (tpm.go)
}

// New builds the provider with the credential the config names
// (azidentity: managed identity by default) and ARM clients pointed at its
// armEndpoint through the SDK's cloud configuration. It makes no call.
func New(cfg Config) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var (
		cred azcore.TokenCredential
		err  error
	)
	switch cfg.Credential {
	case CredentialDefault:
		cred, err = azidentity.NewDefaultAzureCredential(nil)
	default:
		o := &azidentity.ManagedIdentityCredentialOptions{}
		if cfg.UserAssignedIdentityID != "" {
			o.ID = azidentity.ClientID(cfg.UserAssignedIdentityID)
		}
		cred, err = azidentity.NewManagedIdentityCredential(o)
	}
	if err != nil {
		return nil, fmt.Errorf("azure: credential %s: %w", cfg.Credential, err)
	}
	return NewWithCredential(cfg, cred)
}

// ClientOptions are the ARM clients' options for a config: the SDK's
// cloud configuration with the config's ARM endpoint and audience, and
// bearer tokens over plain http only for a loopback endpoint (tests).
func ClientOptions(cfg Config) *arm.ClientOptions {
	audience := cfg.ARMAudience
	if audience == "" {
		audience = strings.TrimSuffix(cfg.ARMEndpoint, "/")
		if audience == strings.TrimSuffix(DefaultARMEndpoint, "/") {
			audience = azcloud.AzurePublic.Services[azcloud.ResourceManager].Audience
		}
	}
	conf := azcloud.AzurePublic
	conf.Services = map[azcloud.ServiceName]azcloud.ServiceConfiguration{
		azcloud.ResourceManager: {Endpoint: cfg.ARMEndpoint, Audience: audience},
	}
	insecure := false
	if u, err := url.Parse(cfg.ARMEndpoint); err == nil && u.Scheme == "http" && kit.IsLoopback(u.Hostname()) {
		insecure = true
	}
	return &arm.ClientOptions{ClientOptions: policy.ClientOptions{Cloud: conf, InsecureAllowCredentialWithHTTP: insecure}}
}

// NewWithCredential builds the provider over a token credential (tests
// pass a fake one); it makes no call.
func NewWithCredential(cfg Config, cred azcore.TokenCredential) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cred == nil {
		return nil, errors.New("azure: a credential is required")
	}
	clients, err := NewClients(cfg.SubscriptionID, cred, ClientOptions(cfg))
	if err != nil {
		return nil, fmt.Errorf("azure: ARM clients: %w", err)
	}
	vo, err := cfg.VerifierOptions()
	if err != nil {
		return nil, err
	}
	v, err := NewVerifier(vo)
	if err != nil {
		return nil, err
	}
	to, err := cfg.VTPMOptions()
	if err != nil {
		return nil, err
	}
	c := &Cloud{cfg: cfg, clients: clients, vtpm: newVTPMVerifier(to)}
	if c.routes, err = newRoutes(c, cred, ClientOptions(cfg)); err != nil {
		return nil, err
	}
	c.view = view.New(c.source(), view.Options{MinRefreshInterval: cfg.MinRefreshInterval.Duration})
	c.Base = kit.NewBase(kit.Options{Name: ProviderName, View: c.view, MaxAge: cfg.InstanceMaxAge.Duration,
		ClusterTag: cfg.ClusterID, Finder: c, Zones: true, Verifiers: []cloud.EvidenceVerifier{v},
		ProviderID: func(id string) (string, error) {
			// In the form this backend writes (ARM ids compare case-blind).
			r, err := agentid.ParseProviderID(id)
			if err != nil {
				return "", err
			}
			return r.ProviderID(), nil
		}})
	if c.lbs, err = newLoadBalancers(c, cred, ClientOptions(cfg)); err != nil {
		return nil, fmt.Errorf("azure: load balancers: %w", err)
	}
	klog.InfoS("Azure cloud provider configured", "subscription", cfg.SubscriptionID, "resourceGroup", cfg.ResourceGroup,
		"clusterID", cfg.ClusterID, "armEndpoint", cfg.ARMEndpoint, "credential", cfg.Credential,
		"maxDocumentAge", cfg.MaxDocumentAge.Duration, "maxClockSkew", cfg.MaxClockSkew.Duration)
	return c, nil
}

func (c *Cloud) source() Source {
	return Source{Clients: c.clients, Subscription: c.cfg.SubscriptionID, ResourceGroup: c.cfg.ResourceGroup,
		ClusterID: c.cfg.ClusterID, RequestTimeout: c.cfg.RequestTimeout.Duration}
}

// Config is the provider's effective configuration.
func (c *Cloud) Config() Config { return c.cfg }
