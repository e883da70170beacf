package digitalocean

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/digitalocean/godo"
	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// LBSpec is a load balancer in normal form: what a Service and its nodes
// call for (desired) and what DigitalOcean holds (held) compare by
// fingerprint.
type LBSpec struct {
	Rules  []LBRule
	Health LBHealth
	Sticky LBSticky
	// SizeUnit is the number of load balancer nodes (1-100).
	SizeUnit                                                         int
	Redirect, ProxyProtocol, BackendKeepalive, DisableLetsEncryptDNS bool
	// IdleTimeout is http_idle_timeout_seconds (30-600).
	IdleTimeout int
	// Allow and Deny are the firewall's rules (ip:<address>,
	// cidr:<prefix>).
	Allow, Deny []string
	// Droplets are the targets' droplet ids.
	Droplets []int
	// Region is where a new load balancer is made (its nodes' region),
	// or where a held one is; it cannot change, and is not compared.
	Region string `json:"-"`
	// tags are a held load balancer's tags (not compared).
	tags []string
	// Hostname is AnnotationHostname's: how the Service's status shows
	// the load balancer (not a setting of it; not compared).
	Hostname string `json:"-"`
}

// LBRule is a forwarding rule.
type LBRule struct {
	EntryProtocol  string
	EntryPort      int
	TargetProtocol string
	TargetPort     int
	CertificateID  string
	TLSPassthrough bool
}

// LBHealth is the health check.
type LBHealth struct {
	Protocol, Path          string
	Port, Interval, Timeout int
	Healthy, Unhealthy      int
	ProxyProtocol           bool
}

// LBSticky is the sticky sessions setting.
type LBSticky struct {
	Type       string
	CookieName string
	CookieTTL  int
}

func (s LBSpec) normal() LBSpec {
	s.Rules = slices.Clone(s.Rules)
	slices.SortFunc(s.Rules, func(a, b LBRule) int {
		return cmp.Or(cmp.Compare(a.EntryPort, b.EntryPort), strings.Compare(a.EntryProtocol, b.EntryProtocol))
	})
	norm := func(l []string) []string {
		if len(l) == 0 {
			return nil
		}
		l = slices.Clone(l)
		slices.Sort(l)
		return slices.Compact(l)
	}
	s.Allow, s.Deny = norm(s.Allow), norm(s.Deny)
	s.Droplets = slices.Clone(s.Droplets)
	slices.Sort(s.Droplets)
	s.Droplets = slices.Compact(s.Droplets)
	if len(s.Droplets) == 0 {
		s.Droplets = nil
	}
	if s.Health.Protocol == "tcp" {
		s.Health.Path = ""
	}
	if s.Sticky.Type == "" {
		s.Sticky.Type = "none"
	}
	return s
}

// A load balancer's statuses: new while DigitalOcean builds it, active,
// or errored when it could not.
const (
	lbStatusActive  = "active"
	lbStatusErrored = "errored"
)

// lbNamePattern is what the API takes as a load balancer's name.
var lbNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,254}$`)

// ownerTags write and read a load balancer's owner as DigitalOcean tags:
// mooring:cluster:<id>, mooring:uid:<uid>, mooring:service:<ns>:<name>.
var ownerTags = loadbalancer.StringTags{Prefix: "mooring", Max: 255}

// lbCloud is DigitalOcean's load balancer API for the kit.
type lbCloud struct{ c *Cloud }

var _ loadbalancer.Cloud[LBSpec] = lbCloud{}

func (l lbCloud) Name(svc *v1.Service) string { return lbName(svc) }

func (l lbCloud) ID(svc *v1.Service) string {
	return strings.TrimSpace(svc.Annotations[AnnotationLoadBalancerID])
}

func (l lbCloud) Desired(_ context.Context, svc *v1.Service, nodes []*v1.Node) (LBSpec, error) {
	return desired(svc, nodes)
}

// List reads every page of GET /v2/load_balancers (the API filters load
// balancers by no tag).
func (l lbCloud) List(ctx context.Context) ([]loadbalancer.Held[LBSpec], error) {
	var out []loadbalancer.Held[LBSpec]
	seen := map[string]bool{}
	for page := 1; ; page++ {
		if page > maxPages {
			return nil, fmt.Errorf("load balancers: more than %d pages", maxPages)
		}
		lbs, resp, err := timed(ctx, l.c.cfg.RequestTimeout.Duration, func(ctx context.Context) ([]godo.LoadBalancer, *godo.Response, error) {
			return l.c.client.LoadBalancers.List(ctx, &godo.ListOptions{Page: page, PerPage: l.c.cfg.PageSize})
		})
		if err != nil {
			return nil, fmt.Errorf("list load balancers (page %d): %w", page, err)
		}
		for i := range lbs {
			if seen[lbs[i].ID] {
				continue // shifted by a delete between pages
			}
			seen[lbs[i].ID] = true
			out = append(out, held(&lbs[i]))
		}
		if resp == nil || resp.Links == nil || resp.Links.IsLastPage() || len(lbs) == 0 {
			return out, nil
		}
	}
}

func (l lbCloud) Get(ctx context.Context, id string) (loadbalancer.Held[LBSpec], bool, error) {
	lb, _, err := timed(ctx, l.c.cfg.RequestTimeout.Duration, func(ctx context.Context) (*godo.LoadBalancer, *godo.Response, error) {
		return l.c.client.LoadBalancers.Get(ctx, id)
	})
	if isNotFound(err) {
		return loadbalancer.Held[LBSpec]{}, false, nil
	}
	if err != nil {
		return loadbalancer.Held[LBSpec]{}, false, err
	}
	return held(lb), true, nil
}

func (l lbCloud) Create(ctx context.Context, name string, o loadbalancer.Owner, spec LBSpec) (loadbalancer.Held[LBSpec], error) {
	if spec.Region == "" && len(spec.Droplets) > 0 {
		// A node without its region label yet: its droplet's region.
		in, err := l.c.view.ByID(ctx, strconv.Itoa(spec.Droplets[0]), l.c.cfg.InstanceMaxAge.Duration)
		if err != nil {
			return loadbalancer.Held[LBSpec]{}, fmt.Errorf("the region of droplet %d: %w", spec.Droplets[0], err)
		}
		spec.Region = in.Region
	}
	if spec.Region == "" {
		return loadbalancer.Held[LBSpec]{}, errors.New("no node names its region (label " + regionLabel + "): a load balancer is made in its nodes' region")
	}
	req := request(name, spec, l.tags(nil, o))
	req.Region = spec.Region
	lb, _, err := timed(ctx, l.c.cfg.RequestTimeout.Duration, func(ctx context.Context) (*godo.LoadBalancer, *godo.Response, error) {
		return l.c.client.LoadBalancers.Create(ctx, req)
	})
	if err != nil {
		return loadbalancer.Held[LBSpec]{}, err
	}
	return held(lb), nil
}

func (l lbCloud) Update(ctx context.Context, h loadbalancer.Held[LBSpec], o loadbalancer.Owner, spec LBSpec) (loadbalancer.Held[LBSpec], error) {
	req := request(h.Name, spec, l.tags(h.Spec.tags, o))
	req.Region = h.Spec.Region
	lb, _, err := timed(ctx, l.c.cfg.RequestTimeout.Duration, func(ctx context.Context) (*godo.LoadBalancer, *godo.Response, error) {
		return l.c.client.LoadBalancers.Update(ctx, h.ID, req)
	})
	if err != nil {
		return loadbalancer.Held[LBSpec]{}, err
	}
	return held(lb), nil
}

func (l lbCloud) Delete(ctx context.Context, h loadbalancer.Held[LBSpec]) error {
	_, _, err := timed(ctx, l.c.cfg.RequestTimeout.Duration, func(ctx context.Context) (*struct{}, *godo.Response, error) {
		resp, err := l.c.client.LoadBalancers.Delete(ctx, h.ID)
		return nil, resp, err
	})
	if isNotFound(err) {
		return nil
	}
	return err
}

// timed is one API call under the request timeout.
func timed[T any](ctx context.Context, timeout time.Duration, f func(context.Context) (T, *godo.Response, error)) (T, *godo.Response, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return f(ctx)
}

func isNotFound(err error) bool {
	var e *godo.ErrorResponse
	return errors.As(err, &e) && e.Response != nil && e.Response.StatusCode == http.StatusNotFound
}

// tags are a load balancer's tags: those it has that are not an owner's
// (kept), the cluster's tag (as DigitalOcean's CCM tags k8s:<cluster>) and
// o's.
func (l lbCloud) tags(had []string, o loadbalancer.Owner) []string {
	var out []string
	for _, t := range had {
		if !ownerTags.Mine([]string{t}) {
			out = append(out, t)
		}
	}
	out = append(out, l.c.cfg.ClusterTag)
	out = append(out, ownerTags.Tags(o)...)
	slices.Sort(out)
	return slices.Compact(out)
}

// request is the API's request for spec.
func request(name string, spec LBSpec, tags []string) *godo.LoadBalancerRequest {
	idle := uint64(spec.IdleTimeout)
	disableLE := spec.DisableLetsEncryptDNS
	req := &godo.LoadBalancerRequest{Name: name, SizeUnit: uint32(spec.SizeUnit), Tags: tags, DropletIDs: spec.Droplets,
		HealthCheck: &godo.HealthCheck{Protocol: spec.Health.Protocol, Port: spec.Health.Port, Path: spec.Health.Path,
			CheckIntervalSeconds: spec.Health.Interval, ResponseTimeoutSeconds: spec.Health.Timeout,
			HealthyThreshold: spec.Health.Healthy, UnhealthyThreshold: spec.Health.Unhealthy,
			ProxyProtocol: godo.PtrTo(spec.Health.ProxyProtocol)},
		StickySessions: &godo.StickySessions{Type: spec.Sticky.Type, CookieName: spec.Sticky.CookieName,
			CookieTtlSeconds: spec.Sticky.CookieTTL},
		RedirectHttpToHttps: spec.Redirect, EnableProxyProtocol: spec.ProxyProtocol,
		EnableBackendKeepalive: spec.BackendKeepalive, DisableLetsEncryptDNSRecords: &disableLE,
		HTTPIdleTimeoutSeconds: &idle, Firewall: &godo.LBFirewall{Allow: spec.Allow, Deny: spec.Deny}}
	if req.DropletIDs == nil {
		req.DropletIDs = []int{}
	}
	for _, r := range spec.Rules {
		req.ForwardingRules = append(req.ForwardingRules, godo.ForwardingRule{EntryProtocol: r.EntryProtocol,
			EntryPort: r.EntryPort, TargetProtocol: r.TargetProtocol, TargetPort: r.TargetPort,
			CertificateID: r.CertificateID, TlsPassthrough: r.TLSPassthrough})
	}
	return req
}

// held is a load balancer as DigitalOcean holds it, in normal form.
func held(lb *godo.LoadBalancer) loadbalancer.Held[LBSpec] {
	spec := LBSpec{SizeUnit: cmp.Or(int(lb.SizeUnit), 1), Redirect: lb.RedirectHttpToHttps,
		ProxyProtocol: lb.EnableProxyProtocol, BackendKeepalive: lb.EnableBackendKeepalive, IdleTimeout: 60,
		Droplets: lb.DropletIDs, tags: slices.Clone(lb.Tags)}
	if lb.DisableLetsEncryptDNSRecords != nil {
		spec.DisableLetsEncryptDNS = *lb.DisableLetsEncryptDNSRecords
	}
	if lb.HTTPIdleTimeoutSeconds != nil {
		spec.IdleTimeout = int(*lb.HTTPIdleTimeoutSeconds)
	}
	if lb.Region != nil {
		spec.Region = lb.Region.Slug
	}
	if lb.Firewall != nil {
		spec.Allow, spec.Deny = lb.Firewall.Allow, lb.Firewall.Deny
	}
	if h := lb.HealthCheck; h != nil {
		spec.Health = LBHealth{Protocol: h.Protocol, Port: h.Port, Path: h.Path, Interval: h.CheckIntervalSeconds,
			Timeout: h.ResponseTimeoutSeconds, Healthy: h.HealthyThreshold, Unhealthy: h.UnhealthyThreshold}
		if h.ProxyProtocol != nil {
			spec.Health.ProxyProtocol = *h.ProxyProtocol
		}
	}
	if st := lb.StickySessions; st != nil {
		spec.Sticky = LBSticky{Type: st.Type}
		if st.Type == "cookies" {
			spec.Sticky.CookieName, spec.Sticky.CookieTTL = st.CookieName, st.CookieTtlSeconds
		}
	}
	proxy := lb.EnableProxyProtocol
	for _, r := range lb.ForwardingRules {
		spec.Rules = append(spec.Rules, LBRule{EntryProtocol: r.EntryProtocol, EntryPort: r.EntryPort,
			TargetProtocol: r.TargetProtocol, TargetPort: r.TargetPort, CertificateID: r.CertificateID,
			TLSPassthrough: r.TlsPassthrough})
		proxy = proxy || r.CertificateID != ""
	}
	h := loadbalancer.Held[LBSpec]{ID: lb.ID, Name: lb.Name, Owner: ownerTags.Owner(lb.Tags), Spec: spec.normal()}
	switch lb.Status {
	case lbStatusActive:
	case lbStatusErrored:
		// DigitalOcean failed to build it: an error (a Warning Event,
		// retried with backoff), as DigitalOcean's CCM answers a status it
		// does not expect.
		h.Failed = lb.Status
	default:
		h.Pending = cmp.Or(lb.Status, "without a status")
	}
	if lb.Status == lbStatusActive {
		h.Ingress = loadbalancer.Ingress(lb.IP, "", proxy, false)
	}
	return h
}

// LoadBalancer is DigitalOcean's load balancers (cloudprovider.LoadBalancer
// and cloud.LoadBalancerInventory).
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.lbs, true }

// Ingress is the status DigitalOcean's CCM gives a Service: with
// AnnotationHostname, that hostname alone (the kit's IngressWorder).
func (l lbCloud) Ingress(h loadbalancer.Held[LBSpec], spec LBSpec) []v1.LoadBalancerIngress {
	if spec.Hostname == "" || len(h.Ingress) == 0 {
		return h.Ingress
	}
	return loadbalancer.Ingress(h.Ingress[0].IP, spec.Hostname, false, true)
}
