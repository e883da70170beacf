package hetzner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/hetzner/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/internal/version"
)

// ProviderName is the backend's name, for --cloud-provider and the node
// agent's cloud setting.
const ProviderName = agentid.Name

// maxRetries is how often the client library retries a call the API
// answered with a retryable error (rate limit, conflict, gateway timeout)
// within RequestTimeout; the view backs off between failed Lists itself.
const maxRetries = 2

// Factory builds the provider from its cloud-config; backend.go registers
// it with mooring's backends.
var Factory = kit.Factory(ParseConfig, func(cfg Config) (*Cloud, error) { return New(cfg) })

// Cloud is Hetzner Cloud as Kubernetes and mooring see it: InstancesV2 and
// Zones over the shared view of the cluster's servers, and the approver's
// Attester. Hetzner signs no instance identity, so it has no evidence
// verifier: its servers join with join tickets, whose verifier the
// approver adds itself (--ticket-keys-file). Its routes go through the
// configured private network (routes.go); it has no clusters.
type Cloud struct {
	kit.Base          // InstancesV2 and Zones over the view, the Attester
	kit.InstancesOnly // Initialize, and no clusters; Routes() and LoadBalancer() are overridden

	cfg    Config
	client *hcloud.Client
	view   *view.View

	network *networkResolver                // the configured network's ID (routes_network.go)
	routes  *routes                         // Routes(), when a network is configured (routes.go)
	lbs     *loadbalancer.Balancers[lbSpec] // LoadBalancer() (loadbalancers.go)
}

// New reads the API token and builds the provider with the hcloud-go
// client: the configured endpoint, the token as bearer, a bounded number
// of retries. opts are added last. It makes no call.
func New(cfg Config, opts ...hcloud.ClientOption) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	token, err := cfg.Token()
	if err != nil {
		return nil, err
	}
	all := []hcloud.ClientOption{
		hcloud.WithEndpoint(cfg.Endpoint),
		hcloud.WithToken(token),
		hcloud.WithApplication("mooring", version.Get().Version),
		hcloud.WithHTTPClient(&http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}),
		hcloud.WithRetryOpts(hcloud.RetryOpts{
			BackoffFunc: hcloud.ExponentialBackoffWithOpts(hcloud.ExponentialBackoffOpts{
				Base: time.Second, Multiplier: 2, Cap: 10 * time.Second, Jitter: true,
			}),
			MaxRetries: maxRetries,
		}),
	}
	return NewWithClient(cfg, hcloud.NewClient(append(all, opts...)...))
}

// NewWithClient builds the provider over an hcloud-go client. It makes no
// call.
func NewWithClient(cfg Config, client *hcloud.Client) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("hetzner: an hcloud client is required")
	}
	klog.InfoS("Hetzner Cloud provider configured", "endpoint", cfg.Endpoint, "clusterLabel", cfg.ClusterLabel,
		"clusterID", cfg.ClusterID, "network", cfg.Network.String(), "addressFamily", cfg.AddressFamily)
	c := &Cloud{cfg: cfg, client: client}
	c.network = &networkResolver{ref: cfg.Network, client: &client.Network, timeout: cfg.RequestTimeout.Duration}
	c.routes = &routes{c: c}
	lbs, err := loadbalancer.New[lbSpec](newLBCloud(c), loadbalancer.Options{Cluster: cfg.ClusterID})
	if err != nil {
		return nil, err
	}
	c.lbs = lbs
	c.view = view.New(c.source(), cfg.ViewOptions())
	c.Base = kit.NewBase(kit.Options{Name: ProviderName, View: c.view, MaxAge: cfg.InstanceMaxAge.Duration,
		ClusterTag: cfg.ClusterID, Finder: c, Zones: true, Metadata: metadata,
		ProviderID: kit.CheckedBy(ParseProviderID)})
	return c, nil
}

func (c *Cloud) source() Source {
	return Source{Servers: &c.client.Server, ClusterLabel: c.cfg.ClusterLabel, ClusterID: c.cfg.ClusterID,
		Network: c.cfg.Network.ID, ResolveNetwork: c.network.ID, AddressFamily: c.cfg.AddressFamily,
		RequestTimeout: c.cfg.RequestTimeout.Duration}
}

// Config is the provider's effective configuration.
func (c *Cloud) Config() Config { return c.cfg }

// ConfirmInstance asks the API for the server of a providerID itself
// (GET /servers/{id}), after FindInstance missed it in the cluster's list:
// a *kit.AbsentError when the project has no such server (not_found), a
// *kit.ForeignError when the server lacks the cluster label.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	src := c.source()
	return kit.ByID[int64, *hcloud.Server]{Parse: ParseProviderID, Timeout: c.cfg.RequestTimeout.Duration,
		Get: func(ctx context.Context, id int64) (*hcloud.Server, bool, error) {
			if err := src.resolveNetwork(ctx); err != nil {
				return nil, false, err
			}
			srv, resp, err := c.client.Server.GetByID(ctx, id)
			noteRateLimit(resp)
			// The library turns the API's not_found into a nil server.
			return srv, err == nil && srv == nil, err
		},
		Is:   func(srv *hcloud.Server, id int64) bool { return srv.ID == id },
		View: func(srv *hcloud.Server) (view.Instance, bool) { return src.toView(srv) },
		Kind: "Hetzner server", Foreign: fmt.Sprintf("does not carry label %s=%s", c.cfg.ClusterLabel, c.cfg.ClusterID),
	}.Confirm(ctx, providerID)
}

// ProvidedByLabel is the Node label hcloud-cloud-controller-manager sets to
// "cloud" on Cloud servers' Nodes (and "robot" on Robot servers'); mooring
// sets it too, so that what selects on it keeps working.
const ProvidedByLabel = "instance.hetzner.cloud/provided-by"

// metadata is Hetzner's record of a server as the Node's metadata: zone,
// region and labels as hcloud-cloud-controller-manager sets them.
func metadata(in view.Instance) *cloudprovider.InstanceMetadata {
	md := kit.Metadata(in)
	md.AdditionalLabels = map[string]string{ProvidedByLabel: "cloud"}
	return md
}
