// Package provider is the local cloud's k8s.io/cloud-provider implementation,
// registered as "local" by cloud/local: InstancesV2 over the shared instance view (or, for
// comparisons, one cloud call per lookup), load balancers and routes through
// the local cloud's API, with an optional client-side rate limit.
package provider

import (
	"context"
	"fmt"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
	"github.com/mooring-dev/mooring/cloud/local/agentid"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/client"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Name is the provider's name, for --cloud-provider: the backend's.
const Name = agentid.Name

// ClusterLabel carries the instance's cluster tag on its Node.
const ClusterLabel = "mooring.dev/cluster"

// Factory builds the provider from its cloud-config (the backend's
// registration, cloud/local, registers it with mooring's backends).
var Factory = kit.Factory(ParseConfig, New)

// Cloud is the local cloud as Kubernetes sees it.
type Cloud struct {
	kit.Base // InstancesV2 over the view (no Zones), the Attester
	// The load balancers (cloudprovider.LoadBalancer and
	// cloud.LoadBalancerInventory) over lbCloud.
	*loadbalancer.Balancers[api.LoadBalancerSpec]

	cfg    Config
	client *client.Client
	view   *view.View
	lookup instanceLookup // of the InstancesV2 methods
}

var (
	_ cloudprovider.LoadBalancer  = (*Cloud)(nil)
	_ cloudprovider.Routes        = (*Cloud)(nil)
	_ cloud.LoadBalancerInventory = (*Cloud)(nil)
)

// New connects to the cloud that cfg names. It makes no call yet.
func New(cfg Config) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tok, err := cfg.token()
	if err != nil {
		return nil, err
	}
	hc := &http.Client{
		Timeout:   cfg.RequestTimeout.Duration,
		Transport: newAPITransport(http.DefaultTransport, cfg.APIRateLimit, cfg.APIRateBurst),
	}
	c, err := client.New(cfg.Endpoint, tok, hc)
	if err != nil {
		return nil, err
	}
	return NewWithClient(cfg, c)
}

// NewWithClient builds the provider over an existing client, which it uses
// as it is: apiRateLimit and apiRateBurst are New's.
func NewWithClient(cfg Config, c *client.Client) (*Cloud, error) {
	cfg.defaults()
	v, err := attest.New(c.JWKS, attest.Options{Issuer: cfg.IdentityIssuer})
	if err != nil {
		return nil, err
	}
	cl := &Cloud{
		cfg:    cfg,
		client: c,
		view: view.New(Source{Client: c, Cluster: cfg.Cluster, NamePolicy: cfg.NodeNamePolicy}, view.Options{
			MinRefreshInterval: cfg.MinRefreshInterval.Duration, ListCost: listCost(cfg.APIRateLimit)}),
	}
	// FindInstance is the provider's own (through the view or direct).
	cl.Base = kit.NewBase(kit.Options{Name: Name, View: cl.view, MaxAge: cfg.InstanceMaxAge.Duration,
		ClusterTag: cfg.Cluster, Finder: cl, Metadata: Metadata, Verifiers: []cloud.EvidenceVerifier{v}})
	if cl.Balancers, err = loadbalancer.New(loadbalancer.Cloud[api.LoadBalancerSpec](lbCloud{cl}), loadbalancer.Options{Cluster: cfg.Cluster}); err != nil {
		return nil, err
	}
	switch cfg.InstanceLookup {
	case InstanceLookupView:
		cl.lookup = viewLookup{view: cl.view, cfg: &cl.cfg}
	case InstanceLookupDirect:
		cl.lookup = directLookup{client: c, cluster: cfg.Cluster, policy: cfg.NodeNamePolicy}
	default:
		return nil, fmt.Errorf("local cloud config: instanceLookup %q: want %s or %s", cfg.InstanceLookup, InstanceLookupView, InstanceLookupDirect)
	}
	return cl, nil
}

// Config is the provider's effective configuration.
func (c *Cloud) Config() Config { return c.cfg }

// Client is the local cloud API client.
func (c *Cloud) Client() *client.Client { return c.client }

// Initialize is called by the CCM before controllers start; nothing to do.
func (c *Cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

// LoadBalancer is implemented.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.Balancers, true }

// Routes is implemented.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) { return c, true }

// Source lists a local cloud's instances of one cluster for the shared view.
type Source struct {
	Client     *client.Client
	Cluster    string
	NamePolicy agentid.NamePolicy
}

// ListInstances follows every page of the cluster's instances.
func (s Source) ListInstances(ctx context.Context) ([]view.Instance, error) {
	items, err := s.Client.ListAllInstances(ctx, client.ListOptions{Cluster: s.Cluster, PageSize: listPageSize})
	if err != nil {
		return nil, err
	}
	out := make([]view.Instance, len(items))
	for i := range items {
		out[i] = ToView(&items[i], s.NamePolicy)
	}
	return out, nil
}

// listPageSize is how many instances a page of the view's List holds.
const listPageSize = 1000

// listCost is how long apiRateLimit (calls per second; 0: none) takes to
// allow a List of n instances: the view spaces its Lists for misses by it.
func listCost(apiRateLimit float64) func(n int) time.Duration {
	if apiRateLimit <= 0 {
		return nil
	}
	return func(n int) time.Duration {
		pages := max(1, (n+listPageSize-1)/listPageSize)
		return time.Duration(float64(pages) / apiRateLimit * float64(time.Second))
	}
}

// ToView converts a local cloud instance into the shared view's form, its
// Node name under the policy, with addresses in a stable order: InternalIP,
// ExternalIP, InternalDNS, Hostname.
func ToView(in *api.Instance, policy agentid.NamePolicy) view.Instance {
	out := view.Instance{
		ProviderID: agentid.ProviderID(in.ID), ID: in.ID, Name: in.Name, NodeName: policy.NodeName(in.ID, in.Name), Zone: in.Zone, Region: in.Region,
		InstanceType: in.InstanceType, Cluster: in.Cluster, State: view.State(in.State), Labels: in.Labels, Created: in.CreatedAt,
	}
	for _, t := range []api.AddressType{api.InternalIP, api.ExternalIP, api.InternalDNS, api.Hostname} {
		for _, a := range in.Addresses {
			if a.Type == t {
				out.Addresses = append(out.Addresses, v1.NodeAddress{Type: v1.NodeAddressType(t), Address: a.Address})
			}
		}
	}
	return out
}
