package openstack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
	"github.com/mooring-dev/mooring/cloud/openstack/agentid"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/internal/version"
)

// ProviderName is the backend's name, for --cloud-provider and the node
// agent's cloud setting; also the scheme of its providerIDs.
const ProviderName = agentid.Name

// Factory builds the provider from its cloud-config; backend.go registers
// it with mooring's backends.
var Factory = kit.Factory(ParseConfig, New)

// Cloud is OpenStack as Kubernetes and mooring see it: InstancesV2 and
// Zones over the shared view of the cluster's Nova servers, and the
// approver's Attester. OpenStack signs no server identity that mooring can
// check, so it has no evidence verifier: its servers join with join
// tickets, whose verifier the approver adds itself (--ticket-keys-file).
// With a routerID it has Routes: the router's extra routes (routes.go);
// unless loadBalancer.disabled, LoadBalancer: Octavia's (loadbalancers.go).
type Cloud struct {
	kit.Base          // InstancesV2 and Zones over the view, the Attester
	kit.InstancesOnly // Initialize, Clusters; Routes is routes.go's, LoadBalancer loadbalancers.go's

	cfg      Config
	secret   string
	httpc    *http.Client
	sources  kit.AddressSources
	view     *view.View
	mu       sync.Mutex // guards provider and the service clients
	provider *gophercloud.ProviderClient
	compute  *gophercloud.ServiceClient
	network  *gophercloud.ServiceClient

	routes *routes // nil without a routerID (routes.go)

	octavia *gophercloud.ServiceClient      // under mu (loadbalancers.go)
	lbs     *loadbalancer.Balancers[lbSpec] // nil with loadBalancer.disabled
}

// New reads the application credential's secret and the CA file, and
// builds the provider. It makes no call: Keystone is asked for a token on
// the first listing, and again whenever Nova refuses the token (it
// expired).
func New(cfg Config) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	secret, err := cfg.Secret()
	if err != nil {
		return nil, err
	}
	pool, err := cfg.certPool()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	// No redirects: the token must go only where the catalog says.
	httpc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	klog.InfoS("OpenStack provider configured", "authURL", cfg.AuthURL, "region", cfg.Region, "interface", cfg.Interface,
		"clusterID", cfg.ClusterID, "clusterTag", cfg.ClusterTag, "clusterMetadataKey", cfg.ClusterMetadataKey,
		"regionalProviderID", cfg.RegionalProviderID, "trustedAddressSources", cfg.TrustedAddressSources, "routerID", cfg.RouterID,
		"loadBalancers", !cfg.LoadBalancer.Disabled, "lbSubnetID", cfg.LoadBalancer.SubnetID, "lbFloatingNetworkID", cfg.LoadBalancer.FloatingNetworkID)
	sources, _ := cfg.addressSources() // checked by validate
	c := &Cloud{cfg: cfg, secret: secret, httpc: httpc, sources: sources}
	c.view = view.New(c.source(), cfg.ViewOptions())
	if cfg.RouterID != "" {
		c.routes = &routes{c: c}
	}
	if c.lbs, err = newLoadBalancers(c); err != nil {
		return nil, err
	}
	// The cluster id names the cluster: view.Instance.Cluster holds it and
	// join tickets name it as their audience.
	c.Base = kit.NewBase(kit.Options{Name: ProviderName, View: c.view, MaxAge: cfg.InstanceMaxAge.Duration,
		ClusterTag: cfg.ClusterID, Finder: c, Zones: true, ProviderID: c.canonical})
	return c, nil
}

func (c *Cloud) source() Source {
	return Source{Compute: c.computeClient, ClusterID: c.cfg.ClusterID, ClusterTag: c.cfg.ClusterTag,
		ClusterMetadataKey: c.cfg.ClusterMetadataKey, Region: c.cfg.Region, RegionalProviderID: c.cfg.RegionalProviderID,
		InternalNetworks: c.cfg.InternalNetworkNames, PublicNetworks: c.cfg.PublicNetworkNames,
		RequestTimeout: c.cfg.RequestTimeout.Duration, Sources: c.sources}
}

// computeClient is the Compute client, authenticated with the application
// credential on first use (Keystone v3, POST /v3/auth/tokens; the token
// is renewed on Nova's 401), at the catalog's compute endpoint for the
// region and interface, asking for Microversion. A failure is returned
// and tried again on the next call.
func (c *Cloud) computeClient(ctx context.Context) (*gophercloud.ServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.compute != nil {
		return c.compute, nil
	}
	provider, err := c.authenticated(ctx)
	if err != nil {
		return nil, err
	}
	compute, err := gopenstack.NewComputeV2(provider, gophercloud.EndpointOpts{
		Region: c.cfg.Region, Availability: gophercloud.Availability(c.cfg.Interface),
	})
	if err != nil {
		return nil, fmt.Errorf("openstack: no %s compute endpoint in region %s in the catalog: %w", c.cfg.Interface, c.cfg.Region, err)
	}
	if err := kit.CheckEndpoint(compute.Endpoint, true); err != nil {
		return nil, fmt.Errorf("openstack: the catalog's compute endpoint: %w", err)
	}
	compute.Microversion = Microversion
	klog.InfoS("Authenticated with Keystone", "computeEndpoint", compute.Endpoint, "microversion", Microversion)
	c.compute = compute
	return compute, nil
}

// networkClient is the Networking (Neutron) client, at the catalog's
// network endpoint for the region and interface, over the same
// authentication as computeClient. A failure is returned and tried again
// on the next call.
func (c *Cloud) networkClient(ctx context.Context) (*gophercloud.ServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.network != nil {
		return c.network, nil
	}
	provider, err := c.authenticated(ctx)
	if err != nil {
		return nil, err
	}
	network, err := gopenstack.NewNetworkV2(provider, gophercloud.EndpointOpts{
		Region: c.cfg.Region, Availability: gophercloud.Availability(c.cfg.Interface),
	})
	if err != nil {
		return nil, fmt.Errorf("openstack: no %s network endpoint in region %s in the catalog: %w", c.cfg.Interface, c.cfg.Region, err)
	}
	if err := kit.CheckEndpoint(network.Endpoint, true); err != nil {
		return nil, fmt.Errorf("openstack: the catalog's network endpoint: %w", err)
	}
	klog.InfoS("Using Neutron", "networkEndpoint", network.Endpoint)
	c.network = network
	return network, nil
}

// authenticated is the provider client, authenticated with the
// application credential on first use (gophercloud re-authenticates when
// a service refuses the token). c.mu is held.
func (c *Cloud) authenticated(ctx context.Context) (*gophercloud.ProviderClient, error) {
	if c.provider != nil {
		return c.provider, nil
	}
	provider, err := gopenstack.NewClient(c.cfg.AuthURL)
	if err != nil {
		return nil, fmt.Errorf("openstack: authURL: %w", err)
	}
	provider.HTTPClient = *c.httpc
	provider.UserAgent.Prepend("mooring/" + version.Get().Version)
	err = gopenstack.Authenticate(ctx, provider, gophercloud.AuthOptions{
		IdentityEndpoint:            c.cfg.AuthURL,
		ApplicationCredentialID:     c.cfg.ApplicationCredentialID,
		ApplicationCredentialName:   c.cfg.ApplicationCredentialName,
		UserID:                      c.cfg.UserID,
		ApplicationCredentialSecret: c.secret,
		AllowReauth:                 true,
	})
	if err != nil {
		return nil, fmt.Errorf("openstack: Keystone authentication with application credential %s: %w", c.credentialName(), err)
	}
	c.provider = provider
	return provider, nil
}

// credentialName names the credential in errors and logs (never its
// secret).
func (c *Cloud) credentialName() string {
	if c.cfg.ApplicationCredentialID != "" {
		return c.cfg.ApplicationCredentialID
	}
	return c.cfg.ApplicationCredentialName + " of user " + c.cfg.UserID
}

// canonical is a Node's providerID in the form the view holds (this
// config's form), or an error when it is not this cloud's: another scheme,
// or a regional form of another region.
func (c *Cloud) canonical(providerID string) (string, error) {
	id, err := c.serverID(providerID)
	if err != nil {
		return "", err
	}
	region := ""
	if c.cfg.RegionalProviderID {
		region = c.cfg.Region
	}
	return agentid.ProviderID(region, id), nil
}

// serverID reads a Node's providerID, in either form; the regional form
// must name this config's region.
func (c *Cloud) serverID(providerID string) (string, error) {
	region, id, err := agentid.ParseProviderID(providerID)
	if err != nil {
		return "", err
	}
	if region != "" && region != c.cfg.Region {
		return "", fmt.Errorf("providerID %q is of region %s, not %s", providerID, region, c.cfg.Region)
	}
	return id, nil
}

// Config is the provider's effective configuration.
func (c *Cloud) Config() Config { return c.cfg }

// FindInstance finds a Node's server in the shared view: by the server id
// of its providerID (either form) when it has one, else by its name (the
// server's name, lower-cased). An outage is an error, never "not found".
// It is its own, not Base's: the view is asked by id.
func (c *Cloud) FindInstance(ctx context.Context, node *v1.Node) (view.Instance, error) {
	if node.Spec.ProviderID == "" {
		return c.view.ByNodeName(ctx, node.Name, c.cfg.InstanceMaxAge.Duration)
	}
	id, err := c.serverID(node.Spec.ProviderID)
	if err != nil {
		return view.Instance{}, fmt.Errorf("node %s: %w", node.Name, err)
	}
	return c.view.ByID(ctx, id, c.cfg.InstanceMaxAge.Duration)
}

// ConfirmInstance asks Nova for the server of a providerID itself (GET
// /servers/{id}), after FindInstance missed it in the cluster's list: a
// *kit.AbsentError when the project has no such server (404), a
// *kit.ForeignError when the server is not the cluster's.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	id, err := c.serverID(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout.Duration)
	defer cancel()
	client, err := c.computeClient(ctx)
	if err != nil {
		return view.Instance{}, err
	}
	srv, err := servers.Get(ctx, client, id).Extract()
	if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return view.Instance{}, &kit.AbsentError{ID: providerID}
	}
	if err != nil {
		return view.Instance{}, fmt.Errorf("openstack servers get %s: %w", id, err)
	}
	if srv == nil || srv.ID != id {
		return view.Instance{}, fmt.Errorf("openstack servers get %s: Nova answered with another server", id)
	}
	src := c.source()
	if ok, why := src.member(srv); !ok {
		return view.Instance{}, &kit.ForeignError{ID: providerID, Why: why}
	}
	if vi, ok := src.toView(srv); ok {
		return vi, nil
	}
	return view.Instance{}, errors.New("openstack: unreachable: a member server that does not convert")
}
