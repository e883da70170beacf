package client

import (
	"context"
	"net/http"

	"github.com/mooring-dev/mooring/cloud/local/api"
)

// CreateInstance creates an instance.
func (c *Client) CreateInstance(ctx context.Context, req api.CreateInstanceRequest) (*api.Instance, error) {
	var in api.Instance
	return &in, c.do(ctx, http.MethodPost, v+"/instances", nil, req, &in)
}

// GetInstance returns one instance.
func (c *Client) GetInstance(ctx context.Context, id string) (*api.Instance, error) {
	var in api.Instance
	return &in, c.do(ctx, http.MethodGet, v+"/instances/"+esc(id), nil, nil, &in)
}

// ListInstances returns one page of instances.
func (c *Client) ListInstances(ctx context.Context, opts ListOptions) (*api.InstanceList, error) {
	var l api.InstanceList
	return &l, c.do(ctx, http.MethodGet, v+"/instances", opts.query(), nil, &l)
}

// ListAllInstances returns every instance that matches, page by page.
func (c *Client) ListAllInstances(ctx context.Context, opts ListOptions) ([]api.Instance, error) {
	return listAll(ctx, opts, func(ctx context.Context, o ListOptions) ([]api.Instance, string, error) {
		l, err := c.ListInstances(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.NextPageToken, nil
	})
}

func (c *Client) instanceAction(ctx context.Context, id, action string) (*api.Instance, error) {
	var in api.Instance
	return &in, c.do(ctx, http.MethodPost, v+"/instances/"+esc(id)+"/"+action, nil, nil, &in)
}

// StopInstance stops a running instance (stopping a stopped one is a no-op).
func (c *Client) StopInstance(ctx context.Context, id string) (*api.Instance, error) {
	return c.instanceAction(ctx, id, "stop")
}

// StartInstance starts a stopped instance (starting a running one is a no-op).
func (c *Client) StartInstance(ctx context.Context, id string) (*api.Instance, error) {
	return c.instanceAction(ctx, id, "start")
}

// TerminateInstance terminates an instance for good.
func (c *Client) TerminateInstance(ctx context.Context, id string) (*api.Instance, error) {
	return c.instanceAction(ctx, id, "terminate")
}

// SetMetadataEndpoint turns an instance's metadata service on or off.
func (c *Client) SetMetadataEndpoint(ctx context.Context, id string, e api.MetadataEndpoint) (*api.Instance, error) {
	var in api.Instance
	return &in, c.do(ctx, http.MethodPut, v+"/instances/"+esc(id)+"/metadata-endpoint", nil, api.SetMetadataEndpointRequest{Endpoint: e}, &in)
}

// EnsureLoadBalancer creates the named load balancer or updates it to spec.
func (c *Client) EnsureLoadBalancer(ctx context.Context, name string, spec api.LoadBalancerSpec) (*api.LoadBalancer, error) {
	var l api.LoadBalancer
	return &l, c.do(ctx, http.MethodPut, v+"/loadbalancers/"+esc(name), nil, spec, &l)
}

// GetLoadBalancer returns one load balancer with its backends' health.
func (c *Client) GetLoadBalancer(ctx context.Context, name string) (*api.LoadBalancer, error) {
	var l api.LoadBalancer
	return &l, c.do(ctx, http.MethodGet, v+"/loadbalancers/"+esc(name), nil, nil, &l)
}

// ListLoadBalancers returns one page of load balancers.
func (c *Client) ListLoadBalancers(ctx context.Context, opts ListOptions) (*api.LoadBalancerList, error) {
	var l api.LoadBalancerList
	return &l, c.do(ctx, http.MethodGet, v+"/loadbalancers", opts.query(), nil, &l)
}

// ListAllLoadBalancers returns every load balancer that matches.
func (c *Client) ListAllLoadBalancers(ctx context.Context, opts ListOptions) ([]api.LoadBalancer, error) {
	return listAll(ctx, opts, func(ctx context.Context, o ListOptions) ([]api.LoadBalancer, string, error) {
		l, err := c.ListLoadBalancers(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.NextPageToken, nil
	})
}

// DeleteLoadBalancer deletes a load balancer and frees its VIP.
func (c *Client) DeleteLoadBalancer(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, v+"/loadbalancers/"+esc(name), nil, nil, nil)
}

// CreateRoute adds a route to the route table.
func (c *Client) CreateRoute(ctx context.Context, r api.Route) (*api.Route, error) {
	var out api.Route
	return &out, c.do(ctx, http.MethodPost, v+"/routes", nil, r, &out)
}

// GetRoute returns one route.
func (c *Client) GetRoute(ctx context.Context, name string) (*api.Route, error) {
	var out api.Route
	return &out, c.do(ctx, http.MethodGet, v+"/routes/"+esc(name), nil, nil, &out)
}

// ListRoutes returns one page of routes.
func (c *Client) ListRoutes(ctx context.Context, opts ListOptions) (*api.RouteList, error) {
	var l api.RouteList
	return &l, c.do(ctx, http.MethodGet, v+"/routes", opts.query(), nil, &l)
}

// ListAllRoutes returns every route that matches.
func (c *Client) ListAllRoutes(ctx context.Context, opts ListOptions) ([]api.Route, error) {
	return listAll(ctx, opts, func(ctx context.Context, o ListOptions) ([]api.Route, string, error) {
		l, err := c.ListRoutes(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.NextPageToken, nil
	})
}

// DeleteRoute removes a route.
func (c *Client) DeleteRoute(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, v+"/routes/"+esc(name), nil, nil, nil)
}

// JWKS returns the published identity verification keys (a JSON Web Key Set).
func (c *Client) JWKS(ctx context.Context) ([]byte, error) {
	var data []byte
	return data, c.do(ctx, http.MethodGet, v+"/identity/jwks", nil, nil, &data)
}

// RotateIdentityKey makes a new signing key and returns its key id.
func (c *Client) RotateIdentityKey(ctx context.Context) (string, error) {
	var out struct {
		KID string `json:"kid"`
	}
	return out.KID, c.do(ctx, http.MethodPost, v+"/identity/rotate", nil, nil, &out)
}

// Stats returns the API call counters.
func (c *Client) Stats(ctx context.Context) (*api.Stats, error) {
	var s api.Stats
	return &s, c.do(ctx, http.MethodGet, v+"/stats", nil, nil, &s)
}

// ResetStats zeroes the API call counters.
func (c *Client) ResetStats(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, v+"/stats", nil, nil, nil)
}

// Faults returns the faults being injected.
func (c *Client) Faults(ctx context.Context) (*api.Faults, error) {
	var f api.Faults
	return &f, c.do(ctx, http.MethodGet, v+"/faults", nil, nil, &f)
}

// SetFaults replaces the faults being injected.
func (c *Client) SetFaults(ctx context.Context, f api.Faults) error {
	return c.do(ctx, http.MethodPut, v+"/faults", nil, f, nil)
}

// ClearFaults stops all fault injection.
func (c *Client) ClearFaults(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, v+"/faults", nil, nil, nil)
}

// RateLimit returns the API's rate limit (a zero Limit: unlimited).
func (c *Client) RateLimit(ctx context.Context) (*api.RateLimit, error) {
	var l api.RateLimit
	return &l, c.do(ctx, http.MethodGet, v+"/ratelimit", nil, nil, &l)
}

// SetRateLimit replaces the API's rate limit at once; a zero Limit lifts it.
// Admin calls (stats, faults, rate limit) are never limited.
func (c *Client) SetRateLimit(ctx context.Context, l api.RateLimit) error {
	return c.do(ctx, http.MethodPut, v+"/ratelimit", nil, l, nil)
}
