package gce

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/GoogleCloudPlatform/k8s-cloud-provider/pkg/cloud"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	compute "google.golang.org/api/compute/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	cloudprovider "k8s.io/cloud-provider"
	upstreamgce "k8s.io/cloud-provider-gcp/providers/gce"
	"k8s.io/klog/v2"
)

// Load balancers and routes come from the upstream GCE cloud provider
// (k8s.io/cloud-provider-gcp/providers/gce) when the config says
// loadBalancers: upstream: this backend keeps InstancesV2, Zones and the
// approver's identity tokens, and hands LoadBalancer() and Routes() to an
// upstream provider built with gce.CreateGCECloud from the config's
// upstream block (project, zone, network, node tags), its Compute API
// calls sent to computeEndpoint. No target pool or forwarding rule logic
// lives here.
//
// What the upstream needs, and brings along:
//   - Initialize before its first load balancer: it watches (and creates
//     when missing) the ConfigMap kube-system/ingress-uid, whose uid names
//     the cluster in its resources (the nodes' health check
//     k8s-<uid>-node, firewall rules k8s-<uid>-node-hc and
//     k8s-<uid>-node-http-hc, the internal load balancers' instance groups
//     k8s-ig--<uid>); every EnsureLoadBalancer fails "Cloud.ClusterID is
//     not ready" until then. It records Events (as g-cloudprovider), and
//     its internal load balancers put the finalizer
//     gke.networking.io/l4-ilb-v1 on their Services.
//   - Node names that are instance names (nodeNamePolicy InstanceName, the
//     only one here): it finds a Node's instance by listing the managed
//     zones' instances (instances.list, filter on name).
//   - Node tags: its firewall rules target the nodes' network tags
//     (upstream.nodeTags, required here; without them it would read them
//     from the instances).
//   - Operations: it waits for each write's operation by reading it
//     (zoneOperations/regionOperations/globalOperations.get) once a second
//     at most (five a second over all), so a load balancer of six writes
//     takes six seconds or more.
//   - Globals: its package registers the provider "gce" with
//     k8s.io/cloud-provider (unused here: mooring's backends are built by
//     cloud.NewProvider) and its metrics (cloudprovider_gce_api_request_*,
//     the token source's counters, number_of_l4_ilbs) with component-base's
//     legacy registry.
//   - No metadata server call, since project, zone, network and token
//     source are all given.

// Load balancer modes (Config.LoadBalancers).
const (
	// LoadBalancersNone: no load balancers and no routes; the CCM's service
	// and route controllers do not run.
	LoadBalancersNone = "none"
	// LoadBalancersUpstream: load balancers and routes of the upstream GCE
	// cloud provider.
	LoadBalancersUpstream = "upstream"
)

// UpstreamConfig configures the upstream GCE provider (loadBalancers:
// upstream).
type UpstreamConfig struct {
	// Project holds the load balancers, firewall rules and routes; default
	// the first of projects, and it must be one of them.
	Project string `json:"project,omitempty"`
	// Zone is the zone the controller manager is taken to run in (the
	// upstream's local-zone); its region holds the load balancers.
	// Required.
	Zone string `json:"zone"`
	// ManagedZones are the zones whose instances can be Nodes behind load
	// balancers (default: zone alone); all of the region's.
	ManagedZones []string `json:"managedZones,omitempty"`
	// Network is the VPC network: a name (default "default") or a URL.
	Network string `json:"network,omitempty"`
	// Subnetwork is the subnetwork of internal load balancers: a name or a
	// URL. Empty: the upstream picks the auto-mode one of network.
	Subnetwork string `json:"subnetwork,omitempty"`
	// NodeTags are the nodes' network tags, the targets of the firewall
	// rules the load balancers make. Required.
	NodeTags []string `json:"nodeTags"`
	// NodeInstancePrefix, if set, is a prefix of every node's instance name
	// (it narrows the upstream's instance lists).
	NodeInstancePrefix string `json:"nodeInstancePrefix,omitempty"`
	// OperationPollInterval is the least time between two reads of a
	// write's operation (default 1s, the upstream's own; 10ms-10s). Every
	// write waits for its operation, so this bounds how fast a load
	// balancer is made; a test endpoint whose operations end at once
	// (gcetest) is read sooner.
	OperationPollInterval metav1.Duration `json:"operationPollInterval,omitempty"`
}

// Bounds of upstream.operationPollInterval.
const (
	DefaultOperationPollInterval = time.Second
	minOperationPollInterval     = 10 * time.Millisecond
	maxOperationPollInterval     = 10 * time.Second
)

var (
	zonePattern    = regexp.MustCompile(`^([a-z]+-[a-z]+[0-9]+)-[a-z][a-z0-9]*$`)
	netTagPattern  = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	resNamePattern = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// regionOf is a zone's region ("" when it is no zone).
func regionOf(zone string) string {
	if m := zonePattern.FindStringSubmatch(zone); m != nil {
		return m[1]
	}
	return ""
}

// validateUpstream checks loadBalancers and the upstream block.
func (c *Config) validateUpstream() []error {
	var errs []error
	switch c.LoadBalancers {
	case LoadBalancersNone:
		if c.Upstream != nil {
			errs = append(errs, fmt.Errorf("upstream is set but loadBalancers is %q; it is read only with loadBalancers: %s", c.LoadBalancers, LoadBalancersUpstream))
		}
		return errs
	case LoadBalancersUpstream:
	default:
		return append(errs, fmt.Errorf("loadBalancers %q: want %s or %s", c.LoadBalancers, LoadBalancersNone, LoadBalancersUpstream))
	}
	u := c.Upstream
	if u == nil {
		return append(errs, errors.New(`loadBalancers "upstream" needs the upstream block (zone, nodeTags)`))
	}
	if u.Project != "" && !slices.Contains(c.Projects, u.Project) {
		errs = append(errs, fmt.Errorf("upstream.project %q is not one of projects %v", u.Project, c.Projects))
	}
	region := regionOf(u.Zone)
	if region == "" {
		errs = append(errs, fmt.Errorf("upstream.zone %q: want a GCE zone such as us-central1-a", u.Zone))
	}
	for _, z := range u.ManagedZones {
		if region != "" && regionOf(z) != region {
			errs = append(errs, fmt.Errorf("upstream.managedZones: %q is not a zone of region %s", z, region))
		}
	}
	for _, f := range []struct{ name, v string }{{"network", u.Network}, {"subnetwork", u.Subnetwork}} {
		if f.v != "" && !strings.Contains(f.v, "/") && !resNamePattern.MatchString(f.v) {
			errs = append(errs, fmt.Errorf("upstream.%s %q: want a resource name or URL", f.name, f.v))
		}
	}
	if len(u.NodeTags) == 0 {
		errs = append(errs, errors.New("upstream.nodeTags is required: the nodes' network tags, which the load balancers' firewall rules target"))
	}
	for _, tag := range u.NodeTags {
		if !netTagPattern.MatchString(tag) {
			errs = append(errs, fmt.Errorf("upstream.nodeTags: %q is not a network tag (1-63 lower-case letters, digits or hyphens, starting with a letter)", tag))
		}
	}
	if d := u.OperationPollInterval.Duration; d < minOperationPollInterval || d > maxOperationPollInterval {
		errs = append(errs, fmt.Errorf("upstream.operationPollInterval %s: want %s-%s", d, minOperationPollInterval, maxOperationPollInterval))
	}
	if u.NodeInstancePrefix != "" && !resNamePattern.MatchString(u.NodeInstancePrefix) && !regexp.MustCompile(`^[a-z][-a-z0-9]*$`).MatchString(u.NodeInstancePrefix) {
		errs = append(errs, fmt.Errorf("upstream.nodeInstancePrefix %q: want the start of an instance name", u.NodeInstancePrefix))
	}
	return errs
}

// defaultsUpstream fills the upstream block's defaults.
func (c *Config) defaultsUpstream() {
	if c.LoadBalancers == "" {
		c.LoadBalancers = LoadBalancersNone
	}
	if u := c.Upstream; u != nil {
		if u.Project == "" && len(c.Projects) > 0 {
			u.Project = c.Projects[0]
		}
		if u.Network == "" {
			u.Network = "default"
		}
		if len(u.ManagedZones) == 0 && u.Zone != "" {
			u.ManagedZones = []string{u.Zone}
		}
		if u.OperationPollInterval.Duration == 0 {
			u.OperationPollInterval.Duration = DefaultOperationPollInterval
		}
	}
}

// canonicalBase is the base of the resource URLs the Compute API writes
// (selfLinks), whatever endpoint it is reached at.
const canonicalBase = "https://www.googleapis.com/compute/v1/"

// resourceURL is a name as a resource URL of project's scope, a URL as is.
func resourceURL(nameOrURL, project, scope, kind string) string {
	if strings.Contains(nameOrURL, "/") {
		return nameOrURL
	}
	return canonicalBase + "projects/" + project + "/" + scope + "/" + kind + "/" + nameOrURL
}

// upstreamOptions are what tests change of how the upstream is built.
type upstreamOptions struct {
	// tokenSource: nil is Application Default Credentials, or a static
	// token with withoutAuthentication.
	tokenSource oauth2.TokenSource
	// opPoll: the least time between two reads of an operation; 0 is the
	// upstream's (a second).
	opPoll time.Duration
}

// buildUpstream builds the upstream provider of cfg's upstream block.
func buildUpstream(cfg *Config, o upstreamOptions) (*upstreamgce.Cloud, error) {
	u := cfg.Upstream
	ts := o.tokenSource
	if ts == nil {
		if cfg.WithoutAuthentication {
			// A loopback test endpoint: it takes any token.
			ts = oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "unauthenticated", TokenType: "Bearer"})
		} else {
			var err error
			ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout.Duration)
			defer cancel()
			if ts, err = google.DefaultTokenSource(ctx, compute.ComputeScope); err != nil {
				return nil, fmt.Errorf("gce: upstream GCE provider: credentials: %w", err)
			}
		}
	}
	region := regionOf(u.Zone)
	uc := &upstreamgce.CloudConfig{
		APIEndpoint:        cfg.ComputeEndpoint,
		ProjectID:          u.Project,
		NetworkProjectID:   u.Project,
		Region:             region,
		Zone:               u.Zone,
		ManagedZones:       slices.Clone(u.ManagedZones),
		NetworkURL:         resourceURL(u.Network, u.Project, "global", "networks"),
		NodeTags:           slices.Clone(u.NodeTags),
		NodeInstancePrefix: u.NodeInstancePrefix,
		TokenSource:        ts,
		AlphaFeatureGate:   upstreamgce.NewAlphaFeatureGate(nil),
		StackType:          string(upstreamgce.NetworkStackIPV4),
	}
	if u.Subnetwork != "" {
		uc.SubnetworkURL = resourceURL(u.Subnetwork, u.Project, "regions/"+region, "subnetworks")
	}
	up, err := upstreamgce.CreateGCECloud(uc)
	if err != nil {
		return nil, fmt.Errorf("gce: upstream GCE provider: %w", err)
	}
	poll := u.OperationPollInterval.Duration
	if o.opPoll > 0 {
		poll = o.opPoll
	}
	if poll != DefaultOperationPollInterval {
		up.SetRateLimiter(opPollLimiter{min: poll})
	}
	klog.InfoS("Load balancers and routes from the upstream GCE provider", "project", u.Project, "region", region, "zone", u.Zone,
		"managedZones", u.ManagedZones, "network", uc.NetworkURL, "subnetwork", uc.SubnetworkURL, "nodeTags", u.NodeTags,
		"operationPollInterval", poll)
	return up, nil
}

// opPollLimiter waits min before each read of an operation (tests: the
// upstream's own waits a second).
type opPollLimiter struct{ min time.Duration }

func (l opPollLimiter) Accept(ctx context.Context, key *cloud.RateLimitKey) error {
	if key.Operation != "Get" || key.Service != "Operations" {
		return nil
	}
	t := time.NewTimer(l.min)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (opPollLimiter) Observe(context.Context, error, *cloud.RateLimitKey) {}

// LoadBalancer is the upstream GCE provider's, with loadBalancers:
// upstream; otherwise there is none and the CCM runs no service controller.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	if c.upstream == nil {
		return nil, false
	}
	return c.upstream.LoadBalancer()
}

// Routes are the upstream GCE provider's, with loadBalancers: upstream;
// otherwise there are none and the CCM runs no route controller.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) {
	if c.upstream == nil {
		return nil, false
	}
	r, ok := c.upstream.Routes()
	if !ok {
		return nil, false
	}
	return upstreamRoutes{r}, true // routes.go
}

// Initialize is called by the CCM before its controllers start; it is
// passed on to the upstream provider, which watches its cluster id
// ConfigMap and records Events with it.
func (c *Cloud) Initialize(b cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	if c.upstream != nil {
		c.upstream.Initialize(b, stop)
	}
}

// SetInformers passes the CCM's informers on to the upstream provider,
// which keeps the Nodes' zones through them (cloudprovider.InformerUser).
func (c *Cloud) SetInformers(f informers.SharedInformerFactory) {
	if c.upstream != nil {
		c.upstream.SetInformers(f)
	}
}
