package digitalocean

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/digitalocean/godo"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/digitalocean/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// maxPages bounds one listing (200 × 500 = 100,000 droplets).
const maxPages = 500

// listAttempts bounds how often one ListInstances starts over after the
// droplet set changed between its pages.
const listAttempts = kit.ListAttempts

// Source lists a cluster's droplets for the shared instance view: GET
// /v2/droplets?tag_name=<cluster tag>, page after page, with the real
// client library (godo). The tag filter narrows the listing; every droplet
// is checked again here for the tag (it does not decide membership alone).
type Source struct {
	// Client is the API client.
	Client *godo.Client
	// ClusterTag is the droplet tag of the cluster; ClusterID the cluster
	// the view's instances are of.
	ClusterTag, ClusterID string
	// PageSize is per_page (1-200; 0 is 200).
	PageSize int
	// RequestTimeout bounds each page's request; 0 leaves it to the
	// context.
	RequestTimeout time.Duration
}

var _ view.Source = Source{}

// ListInstances follows every page. A page that fails, lacks meta.total,
// is short while another follows, or whose next link does not lead to the
// following page is an error, never a shorter list: the view believes that
// a droplet a fresh list lacks is gone. Pages are numbered, so a droplet
// made or deleted between two requests shifts the pages after it; a change
// of meta.total or a droplet seen twice starts the listing over (at most
// listAttempts times in all).
func (s Source) ListInstances(ctx context.Context) ([]view.Instance, error) {
	return kit.ReadWhole("droplets tagged "+s.ClusterTag, listAttempts, func() ([]view.Instance, int, error) {
		out, err := s.listOnce(ctx)
		return out, 0, err
	}, nil)
}

func (s Source) listOnce(ctx context.Context) ([]view.Instance, error) {
	size := s.PageSize
	if size <= 0 || size > MaxPageSize {
		size = MaxPageSize
	}
	var (
		out   []view.Instance
		seen  = map[int]bool{}
		total = -1
	)
	for page := 1; ; page++ {
		if page > maxPages {
			return nil, fmt.Errorf("droplets tagged %s: more than %d pages", s.ClusterTag, maxPages)
		}
		droplets, resp, err := s.page(ctx, page, size)
		if err != nil {
			return nil, fmt.Errorf("list droplets tagged %s (page %d): %w", s.ClusterTag, page, err)
		}
		if resp == nil || resp.Meta == nil {
			return nil, fmt.Errorf("list droplets tagged %s (page %d): the answer has no meta.total", s.ClusterTag, page)
		}
		switch {
		case resp.Meta.Total < 0:
			return nil, fmt.Errorf("list droplets tagged %s (page %d): meta.total %d", s.ClusterTag, page, resp.Meta.Total)
		case total >= 0 && resp.Meta.Total != total:
			return nil, fmt.Errorf("%w: meta.total went from %d to %d at page %d", kit.ErrListChanged, total, resp.Meta.Total, page)
		case total < 0 && resp.Meta.Total > maxPages*size:
			return nil, fmt.Errorf("droplets tagged %s: %d droplets, more than %d pages of %d", s.ClusterTag, resp.Meta.Total, maxPages, size)
		}
		total = resp.Meta.Total
		for i := range droplets {
			d := &droplets[i]
			if seen[d.ID] {
				return nil, fmt.Errorf("%w: droplet %d listed twice", kit.ErrListChanged, d.ID)
			}
			seen[d.ID] = true
			if vi, ok := s.toView(d); ok {
				out = append(out, vi)
			}
		}
		next, err := nextPage(resp.Links)
		if err != nil {
			return nil, fmt.Errorf("list droplets tagged %s (page %d): %w", s.ClusterTag, page, err)
		}
		if next == 0 {
			break
		}
		switch {
		case next != page+1:
			return nil, fmt.Errorf("list droplets tagged %s (page %d): links.pages.next leads to page %d", s.ClusterTag, page, next)
		case len(droplets) != size:
			return nil, fmt.Errorf("list droplets tagged %s (page %d): %d droplets on a page of %d that is not the last: incomplete", s.ClusterTag, page, len(droplets), size)
		}
	}
	if len(seen) != total {
		return nil, fmt.Errorf("%w: %d droplets listed, meta.total says %d", kit.ErrListChanged, len(seen), total)
	}
	return out, nil
}

func (s Source) page(ctx context.Context, page, size int) ([]godo.Droplet, *godo.Response, error) {
	if s.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.RequestTimeout)
		defer cancel()
	}
	return s.Client.Droplets.ListByTag(ctx, s.ClusterTag, &godo.ListOptions{Page: page, PerPage: size})
}

// nextPage is the page number links.pages.next names, or 0 on the last
// page.
func nextPage(l *godo.Links) (int, error) {
	if l == nil || l.IsLastPage() {
		return 0, nil
	}
	u, err := url.Parse(l.Pages.Next)
	if err != nil {
		return 0, fmt.Errorf("links.pages.next %q: %w", l.Pages.Next, err)
	}
	n, err := strconv.Atoi(u.Query().Get("page"))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("links.pages.next %q names no page", l.Pages.Next)
	}
	return n, nil
}

// toView converts a droplet into the shared view's form; false when it is
// not the cluster's (the tag is missing) or has no usable id.
func (s Source) toView(d *godo.Droplet) (view.Instance, bool) {
	if d == nil || !slices.Contains(d.Tags, s.ClusterTag) {
		if d != nil {
			klog.V(2).InfoS("Leaving out a droplet without the cluster tag", "droplet", d.ID, "tag", s.ClusterTag)
		}
		return view.Instance{}, false
	}
	if d.ID < 1 {
		klog.V(2).InfoS("Leaving out a droplet without an id", "name", d.Name)
		return view.Instance{}, false
	}
	id := strconv.Itoa(d.ID)
	vi := view.Instance{
		ProviderID:   agentid.ProviderIDPrefix + id,
		ID:           id,
		Name:         d.Name,
		NodeName:     agentid.NodeName(d.Name),
		InstanceType: d.SizeSlug,
		Cluster:      s.ClusterID,
		State:        viewState(id, d.Status),
		Addresses:    nodeAddresses(d),
		Labels:       kit.TagLabels(d.Tags),
		Created:      created(id, d.Created),
	}
	if vi.InstanceType == "" && d.Size != nil {
		vi.InstanceType = d.Size.Slug
	}
	if d.Region != nil {
		// DigitalOcean's CCM sets the region only: a region has no zones.
		vi.Region = d.Region.Slug
	}
	return vi, true
}

// viewState maps the droplet statuses (new, active, off, archive) onto the
// view's. archive is a droplet that no longer runs anywhere: gone, as a
// deleted one is. A status DigitalOcean may add later is pending: neither
// running (no join) nor gone.
func viewState(id, status string) view.State {
	switch status {
	case "active":
		return view.StateRunning
	case "off":
		return view.StateStopped
	case "archive":
		return view.StateTerminated
	case "new":
		return view.StatePending
	}
	klog.V(2).InfoS("Unknown droplet status; treating it as pending", "droplet", id, "status", status)
	return view.StatePending
}

// nodeAddresses lists a droplet's addresses in DigitalOcean's CCM's order:
// the droplet name (Hostname), the private (VPC) IPv4 (InternalIP), the
// public IPv4 and the public IPv6 (both ExternalIP), each the first of its
// kind (godo's PrivateIPv4, PublicIPv4, PublicIPv6). Unparsable addresses
// are left out.
func nodeAddresses(d *godo.Droplet) []v1.NodeAddress {
	var out []v1.NodeAddress
	if d.Name != "" {
		out = append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: d.Name})
	}
	add := func(t v1.NodeAddressType, get func() (string, error)) {
		a, err := get()
		if err != nil || a == "" {
			return
		}
		ip := net.ParseIP(a)
		if ip == nil {
			klog.V(2).InfoS("Leaving out an unparsable droplet address", "droplet", d.ID, "type", t, "address", a)
			return
		}
		out = append(out, v1.NodeAddress{Type: t, Address: ip.String()})
	}
	add(v1.NodeInternalIP, d.PrivateIPv4)
	add(v1.NodeExternalIP, d.PublicIPv4)
	add(v1.NodeExternalIP, d.PublicIPv6)
	return out
}

// created reads created_at (RFC 3339). An unreadable one is the zero time:
// the backend does not say when the droplet was made, and a join ticket
// for it is denied.
func created(id, s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		klog.V(2).InfoS("Unreadable droplet created_at", "droplet", id, "createdAt", s)
		return time.Time{}
	}
	return t
}

// errProviderID is wrapped by ParseProviderID's errors.
var errProviderID = errors.New("not a DigitalOcean providerID")

// ParseProviderID reads digitalocean://<droplet id>: a decimal id above 0,
// without sign or leading zeros.
func ParseProviderID(providerID string) (int, error) {
	id, err := kit.NumericProviderID(providerID, agentid.ProviderIDPrefix, "droplet id", errProviderID)
	return int(id), err // int is 64 bits on linux/amd64 and arm64, mooring's platforms
}
