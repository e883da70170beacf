package digitalocean

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/digitalocean/godo"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/digitalocean/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
	"github.com/mooring-dev/mooring/cloud/view"
)

// ProviderName is the backend's name, for --cloud-provider and the node
// agent's cloud setting (the name DigitalOcean's CCM registers too).
const ProviderName = agentid.Name

// userAgent goes before godo's own.
const userAgent = "mooring"

// Factory builds the provider from its cloud-config; backend.go registers
// it with mooring's backends.
var Factory = kit.Factory(ParseConfig, New)

// Cloud is DigitalOcean as Kubernetes and mooring see it: InstancesV2 over
// the shared view of the cluster's droplets, and the approver's Attester,
// which verifies no evidence of its own (DigitalOcean signs no droplet
// identity: droplets join with join tickets, which the approver verifies
// itself); and Service load balancers (loadbalancers.go), as DigitalOcean's
// CCM makes them. It has no zones (as in DigitalOcean's CCM: a region has
// none, and InstanceMetadata carries the region), routes or clusters.
type Cloud struct {
	kit.Base // InstancesV2 over the view, the Attester

	cfg    Config
	client *godo.Client
	view   *view.View
	lbs    *loadbalancer.Balancers[LBSpec]
}

// Initialize has nothing to start.
func (c *Cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

// Routes are not provided: DigitalOcean's VPCs route droplets' addresses,
// not pod CIDRs (docs/digitalocean.md).
func (c *Cloud) Routes() (cloudprovider.Routes, bool) { return nil, false }

// New builds the provider with godo over an HTTP client that sends the
// configured token as a bearer token, read again before every request. It
// reads the token once to fail at start when there is none, and makes no
// call.
func New(cfg Config) (*Cloud, error) { return NewWithHTTPClient(cfg, nil) }

// NewWithHTTPClient builds the provider over an HTTP client that
// authenticates the requests itself (nil: New's). It makes no call.
func NewWithHTTPClient(cfg Config, hc *http.Client) (*Cloud, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	hc, err := kit.OrBearer(hc, cfg.RequestTimeout.Duration, cfg.token)
	if err != nil {
		return nil, err
	}
	endpoint := cfg.APIEndpoint
	if !strings.HasSuffix(endpoint, "/") {
		endpoint += "/" // godo resolves v2/... against it
	}
	client, err := godo.New(hc, godo.SetBaseURL(endpoint), godo.SetUserAgent(userAgent))
	if err != nil {
		return nil, fmt.Errorf("%s: the API client: %w", ProviderName, err)
	}
	src := Source{Client: client, ClusterTag: cfg.ClusterTag, ClusterID: cfg.ClusterID, PageSize: cfg.PageSize,
		RequestTimeout: cfg.RequestTimeout.Duration}
	klog.InfoS("DigitalOcean cloud provider configured", "clusterID", cfg.ClusterID, "clusterTag", cfg.ClusterTag,
		"apiEndpoint", cfg.APIEndpoint, "token", cfg.TokenSource(), "pageSize", cfg.PageSize)
	c := &Cloud{cfg: cfg, client: client, view: view.New(src, cfg.ViewOptions())}
	c.Base = kit.NewBase(kit.Options{Name: ProviderName, View: c.view, MaxAge: cfg.InstanceMaxAge.Duration,
		ClusterTag: cfg.ClusterID, Finder: c,
		ProviderID: kit.CheckedBy(ParseProviderID)})
	if c.lbs, err = loadbalancer.New[LBSpec](lbCloud{c}, loadbalancer.Options{Cluster: cfg.ClusterID}); err != nil {
		return nil, fmt.Errorf("%s: %w", ProviderName, err)
	}
	return c, nil
}

// Config is the provider's effective configuration.
func (c *Cloud) Config() Config { return c.cfg }

// ConfirmInstance asks the API for the droplet of a providerID itself (GET
// /v2/droplets/<id>), after FindInstance missed it in the cluster's list:
// a *kit.AbsentError when the API answers 404, a *kit.ForeignError
// when the droplet lacks the cluster tag.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	return kit.ByID[int, *godo.Droplet]{Parse: ParseProviderID, Timeout: c.cfg.RequestTimeout.Duration,
		Get: func(ctx context.Context, id int) (*godo.Droplet, bool, error) {
			d, _, err := c.client.Droplets.Get(ctx, id)
			var derr *godo.ErrorResponse
			return d, errors.As(err, &derr) && derr.Response != nil && derr.Response.StatusCode == http.StatusNotFound, err
		},
		Is:   func(d *godo.Droplet, id int) bool { return d != nil && d.ID == id },
		View: Source{ClusterTag: c.cfg.ClusterTag, ClusterID: c.cfg.ClusterID}.toView,
		Kind: "droplet", Foreign: "does not carry the tag " + c.cfg.ClusterTag,
	}.Confirm(ctx, providerID)
}
