package linode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/linode/linodego"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/linode/agentid"
	"github.com/mooring-dev/mooring/cloud/view"
)

// maxPages bounds one listing (500 × 500 = 250,000 Linodes).
const maxPages = 500

// listAttempts bounds how often one ListInstances starts over after the
// Linode set changed between its pages.
const listAttempts = kit.ListAttempts

// Source lists a cluster's Linodes for the shared instance view: GET
// /v4/linode/instances with X-Filter {"tags": "<cluster tag>"}, page
// after page, with the real client library (linodego). The filter
// narrows the listing; every Linode is checked again here for the tag (it
// does not decide membership alone).
type Source struct {
	// Client is the API client.
	Client *linodego.Client
	// ClusterTag is the Linodes' tag of the cluster; ClusterID the cluster
	// the view's instances are of.
	ClusterTag, ClusterID string
	// PageSize is page_size (25-500; 0 is 500).
	PageSize int
	// Private are the ranges of InternalIP addresses (nil: Linode's own,
	// 192.168.128.0/17).
	Private []netip.Prefix
	// RequestTimeout bounds each page's request, its retries included; 0
	// leaves it to the context.
	RequestTimeout time.Duration
}

var _ view.Source = Source{}

// ListInstances follows every page. A page that fails, whose pages or
// results do not add up, or that is short of what results promises is an
// error, never a shorter list: the view believes that a Linode a fresh
// list lacks may be gone. Pages are numbered, so a Linode made or deleted
// between two requests shifts the pages after it; a change of results or
// a Linode seen twice starts the listing over (at most listAttempts times
// in all).
func (s Source) ListInstances(ctx context.Context) ([]view.Instance, error) {
	return kit.ReadWhole("list Linodes tagged "+s.ClusterTag, listAttempts, func() ([]view.Instance, int, error) {
		out, err := s.listOnce(ctx)
		return out, 0, err
	}, nil)
}

// Filter is the X-Filter of the cluster's list: {"tags": "<tag>"}, which
// matches the Linodes whose tags hold that tag.
func Filter(tag string) string {
	b, _ := json.Marshal(map[string]string{"tags": tag}) // a map of strings always encodes
	return string(b)
}

func (s Source) listOnce(ctx context.Context) ([]view.Instance, error) {
	size := s.PageSize
	if size <= 0 || size > MaxPageSize {
		size = MaxPageSize
	}
	filter := Filter(s.ClusterTag)
	var (
		out          []view.Instance
		seen         = map[int]bool{}
		total, pages = -1, -1
		what         = "list Linodes tagged " + s.ClusterTag
	)
	for page := 1; ; page++ {
		opts := &linodego.ListOptions{PageOptions: &linodego.PageOptions{Page: page}, PageSize: size, Filter: filter}
		items, err := s.page(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("%s (page %d): %w", what, page, err)
		}
		switch want := max(1, (opts.Results+size-1)/size); {
		case opts.Pages < 1 || opts.Results < 0:
			return nil, fmt.Errorf("%s (page %d): the answer says pages %d, results %d", what, page, opts.Pages, opts.Results)
		case total >= 0 && (opts.Results != total || opts.Pages != pages):
			return nil, fmt.Errorf("%w: results went from %d to %d at page %d", kit.ErrListChanged, total, opts.Results, page)
		case opts.Pages != want:
			return nil, fmt.Errorf("%s (page %d): %d pages for %d results in pages of %d", what, page, opts.Pages, opts.Results, size)
		case opts.Pages > maxPages:
			return nil, fmt.Errorf("%s: %d Linodes, more than %d pages of %d", what, opts.Results, maxPages, size)
		}
		total, pages = opts.Results, opts.Pages
		want := size
		if page == pages {
			want = total - (pages-1)*size
		}
		if len(items) != want {
			return nil, fmt.Errorf("%s (page %d of %d): %d Linodes where %d results promise %d: incomplete", what, page, pages, len(items), total, want)
		}
		for i := range items {
			in := &items[i]
			if seen[in.ID] {
				return nil, fmt.Errorf("%w: Linode %d listed twice", kit.ErrListChanged, in.ID)
			}
			seen[in.ID] = true
			if vi, ok := s.toView(in); ok {
				out = append(out, vi)
			}
		}
		if page >= pages {
			return out, nil
		}
	}
}

// page asks for one page (opts.Page: linodego then asks for that page
// alone, and leaves the answer's pages and results in opts).
func (s Source) page(ctx context.Context, opts *linodego.ListOptions) ([]linodego.Instance, error) {
	if s.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.RequestTimeout)
		defer cancel()
	}
	return s.Client.ListInstances(ctx, opts)
}

// toView converts a Linode into the shared view's form; false when it is
// not the cluster's (the tag is missing) or has no usable id.
func (s Source) toView(in *linodego.Instance) (view.Instance, bool) {
	if in == nil || !slices.Contains(in.Tags, s.ClusterTag) {
		if in != nil {
			klog.V(2).InfoS("Leaving out a Linode without the cluster tag", "linode", in.ID, "tag", s.ClusterTag)
		}
		return view.Instance{}, false
	}
	if in.ID < 1 {
		klog.V(2).InfoS("Leaving out a Linode without an id", "label", in.Label)
		return view.Instance{}, false
	}
	id := strconv.Itoa(in.ID)
	vi := view.Instance{
		ProviderID:   agentid.ProviderID(in.ID),
		ID:           id,
		Name:         in.Label,
		NodeName:     agentid.NodeName(in.Label),
		InstanceType: in.Type,
		// Linode's CCM sets the region only: a region has no zones.
		Region:    in.Region,
		Cluster:   s.ClusterID,
		State:     viewState(id, in.Status),
		Addresses: s.nodeAddresses(in),
		Labels:    kit.TagLabels(in.Tags),
	}
	if in.Created != nil {
		vi.Created = in.Created.UTC()
	} else {
		// Not said: a join ticket for it is denied.
		klog.V(2).InfoS("A Linode without its created time", "linode", id)
	}
	return vi, true
}

// viewState maps the Linode statuses onto the view's: running runs;
// offline and shutting_down are stopped (as Linode's CCM reads them);
// deleting is gone; booting, rebooting, provisioning, migrating,
// rebuilding, cloning, restoring, resizing and a status Linode may add
// later are pending: neither running (no join) nor gone.
func viewState(id string, status linodego.InstanceStatus) view.State {
	switch status {
	case linodego.InstanceRunning:
		return view.StateRunning
	case linodego.InstanceOffline, linodego.InstanceShuttingDown:
		return view.StateStopped
	case linodego.InstanceDeleting:
		return view.StateTerminated
	case linodego.InstanceBooting, linodego.InstanceRebooting, linodego.InstanceProvisioning, linodego.InstanceMigrating,
		linodego.InstanceRebuilding, linodego.InstanceCloning, linodego.InstanceRestoring, linodego.InstanceResizing:
		return view.StatePending
	}
	klog.V(2).InfoS("Unknown Linode status; treating it as pending", "linode", id, "status", status)
	return view.StatePending
}

// nodeAddresses lists a Linode's addresses as Linode's CCM does: the label
// (Hostname), then each IPv4 address in the API's order, InternalIP when
// it is in a private range (192.168.128.0/17 on Linode) and ExternalIP
// otherwise, then the SLAAC IPv6 address (ExternalIP). Unparsable
// addresses are left out.
func (s Source) nodeAddresses(in *linodego.Instance) []v1.NodeAddress {
	private := s.Private
	if private == nil {
		private = []netip.Prefix{netip.MustParsePrefix(DefaultPrivateCIDR)}
	}
	var out []v1.NodeAddress
	if in.Label != "" {
		out = append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: in.Label})
	}
	for _, ip := range in.IPv4 {
		if ip == nil {
			continue
		}
		a, ok := netip.AddrFromSlice(*ip)
		if !ok || !a.Unmap().Is4() {
			klog.V(2).InfoS("Leaving out an unparsable Linode address", "linode", in.ID, "address", ip.String())
			continue
		}
		a = a.Unmap()
		t := v1.NodeExternalIP
		if slices.ContainsFunc(private, func(p netip.Prefix) bool { return p.Contains(a) }) {
			t = v1.NodeInternalIP
		}
		out = append(out, v1.NodeAddress{Type: t, Address: a.String()})
	}
	if in.IPv6 != "" {
		addr, _, _ := strings.Cut(in.IPv6, "/")
		if a, err := netip.ParseAddr(addr); err == nil && a.Is6() {
			out = append(out, v1.NodeAddress{Type: v1.NodeExternalIP, Address: a.String()})
		} else {
			klog.V(2).InfoS("Leaving out an unparsable Linode IPv6 address", "linode", in.ID, "address", in.IPv6)
		}
	}
	return out
}

// errProviderID is wrapped by ParseProviderID's errors.
var errProviderID = errors.New("not a Linode providerID")

// ParseProviderID reads linode://<linode id>: a decimal id above 0,
// without sign or leading zeros.
func ParseProviderID(providerID string) (int, error) {
	id, err := kit.NumericProviderID(providerID, agentid.ProviderIDPrefix, "linode id", errProviderID)
	return int(id), err // int is 64 bits on linux/amd64 and arm64, mooring's platforms
}
