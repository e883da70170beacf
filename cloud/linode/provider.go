package linode

import (
	"context"
	"net/http"
	"strings"

	"github.com/linode/linodego"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
	"github.com/mooring-dev/mooring/cloud/linode/agentid"
	"github.com/mooring-dev/mooring/cloud/view"
)

// ProviderName is the backend's name, for --cloud-provider and the node
// agent's cloud setting (the name Linode's CCM registers too).
const ProviderName = agentid.Name

// userAgent goes before linodego's own.
const userAgent = "mooring"

// Factory builds the provider from its cloud-config; backend.go registers
// it with mooring's backends.
var Factory = kit.Factory(ParseConfig, New)

// Cloud is Linode as Kubernetes and mooring see it: InstancesV2 over the
// shared view of the cluster's Linodes, Service load balancers as
// NodeBalancers (loadbalancers.go), and the approver's Attester, which
// verifies no evidence of its own (Linode signs no instance identity:
// Linodes join with join tickets, which the approver verifies itself). It
// has no zones (as in Linode's CCM: a region has none, and
// InstanceMetadata carries the region), routes or clusters.
type Cloud struct {
	kit.Base // InstancesV2 over the view, the Attester

	cfg       Config
	client    *linodego.Client
	view      *view.View
	balancers *loadbalancer.Balancers[lbSpec]
	// kube reads the Secrets of https ports (tls.go; from Initialize).
	kube kubeClient
}

// New builds the provider with linodego over an HTTP client that sends the
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
	client := linodego.NewClient(hc)
	// Set after NewClient, which reads LINODE_URL and LINODE_API_VERSION
	// from the environment: the config decides.
	client.SetBaseURL(strings.TrimRight(cfg.APIEndpoint, "/"))
	client.SetAPIVersion(apiVersion)
	client.SetUserAgent(userAgent + " " + linodego.DefaultUserAgent)
	client.UseCache(false)
	client.SetRetryCount(*cfg.MaxRetries)
	client.SetRetryWaitTime(cfg.RetryWait.Duration)
	client.SetRetryMaxWaitTime(cfg.MaxRetryWait.Duration)
	src := Source{Client: &client, ClusterTag: cfg.ClusterTag, ClusterID: cfg.ClusterID, PageSize: cfg.PageSize,
		Private: cfg.privateRanges(), RequestTimeout: cfg.RequestTimeout.Duration}
	klog.InfoS("Linode cloud provider configured", "clusterID", cfg.ClusterID, "clusterTag", cfg.ClusterTag,
		"apiEndpoint", cfg.APIEndpoint, "token", cfg.TokenSource(), "pageSize", cfg.PageSize,
		"privateCIDRs", cfg.PrivateCIDRs, "vpcNames", cfg.VPCNames, "subnetNames", cfg.SubnetNames, "maxRetries", *cfg.MaxRetries)
	c := &Cloud{cfg: cfg, client: &client, view: view.New(src, cfg.ViewOptions())}
	c.Base = kit.NewBase(kit.Options{Name: ProviderName, View: c.view, MaxAge: cfg.InstanceMaxAge.Duration,
		ClusterTag: cfg.ClusterID, Finder: c,
		ProviderID: kit.CheckedBy(ParseProviderID)})
	b, err := loadbalancer.New[lbSpec](&nodeBalancers{c: c}, loadbalancer.Options{Cluster: cfg.ClusterID})
	if err != nil {
		return nil, err
	}
	c.balancers = b
	return c, nil
}

// LoadBalancer is Service load balancers as NodeBalancers; it is also a
// cloud.LoadBalancerInventory.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.balancers, true }

// Routes are not provided (docs/linode.md).
func (c *Cloud) Routes() (cloudprovider.Routes, bool) { return nil, false }

// Config is the provider's effective configuration.
func (c *Cloud) Config() Config { return c.cfg }

// ConfirmInstance asks the API for the Linode of a providerID itself (GET
// /v4/linode/instances/<id>), after FindInstance missed it in the
// cluster's list: a *kit.AbsentError when the API answers 404, a
// *kit.ForeignError when the Linode lacks the cluster tag.
func (c *Cloud) ConfirmInstance(ctx context.Context, providerID string) (view.Instance, error) {
	return kit.ByID[int, *linodego.Instance]{Parse: ParseProviderID, Timeout: c.cfg.RequestTimeout.Duration,
		Get: func(ctx context.Context, id int) (*linodego.Instance, bool, error) {
			in, err := c.client.GetInstance(ctx, id)
			return in, linodego.IsNotFound(err), err
		},
		Is:   func(in *linodego.Instance, id int) bool { return in != nil && in.ID == id },
		View: Source{ClusterTag: c.cfg.ClusterTag, ClusterID: c.cfg.ClusterID, Private: c.cfg.privateRanges()}.toView,
		Kind: "Linode", Foreign: "does not carry the tag " + c.cfg.ClusterTag,
	}.Confirm(ctx, providerID)
}
