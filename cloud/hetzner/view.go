package hetzner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/hetzner/agentid"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// pageSize is per_page of the servers list: the Cloud API's largest page.
const pageSize = 50

// maxPages bounds one listing (50 × 400 = 20,000 servers, far over a
// project's server limit).
const maxPages = 400

// listSort orders the listing by id. Pages are offsets into the listing,
// so what changes between two page reads moves the pages after it: a
// server created meanwhile has a higher id than every other and lands
// after all of them, moving nothing; a server deleted meanwhile moves every
// later server one place up, and the first of the next page would be
// missed. total_entries then falls between pages, or the servers read
// at the end are fewer than it says, and the listing starts over. (A
// deletion and a creation between the same two page reads leave
// total_entries as it was and can still hide one server from one listing
// of more than one page; the CCM asks the API for the id itself before it
// believes a server gone.)
const listSort = "id:asc"

// listAttempts bounds how often one ListInstances starts over after the
// server set changed between its pages.
const listAttempts = kit.ListAttempts

// Source lists a cluster's Hetzner Cloud servers for the shared instance
// view: one paginated GET /servers filtered by the cluster label, whose
// answer is checked again here (the label selector narrows the listing, it
// does not decide membership).
type Source struct {
	// Servers is the servers API of the hcloud-go client.
	Servers *hcloud.ServerClient
	// ClusterLabel and ClusterID: a server is the cluster's when its
	// label ClusterLabel has the value ClusterID.
	ClusterLabel, ClusterID string
	// Network and AddressFamily select the addresses (Config's fields):
	// Network is the network's ID, 0 for every private network.
	Network       int64
	AddressFamily string
	// ResolveNetwork, when set, gives Network before a listing (a network
	// configured by name is looked up once); its error fails the listing.
	ResolveNetwork func(context.Context) (int64, error)
	// RequestTimeout bounds each page's call; 0 leaves it to the context.
	RequestTimeout time.Duration
}

var _ view.Source = Source{}

// errListing is wrapped by the errors of a listing the API answered but
// that cannot be trusted whole.
var errListing = errors.New("inconsistent server listing")

// ListInstances follows every page. A page that fails, or a listing whose
// pagination does not add up (no meta.pagination, a page other than the
// one asked for, a short page before the last, servers out of id order),
// is an error, never a shorter list: the view believes what a fresh list
// lacks is gone. total_entries falling between pages or differing at the
// end from the servers read means servers were deleted meanwhile: the
// listing starts over, at most listAttempts times in all, then is an
// error.
func (s Source) ListInstances(ctx context.Context) ([]view.Instance, error) {
	if err := s.resolveNetwork(ctx); err != nil {
		return nil, err
	}
	return kit.ReadWhole("hetzner servers list", listAttempts, func() ([]view.Instance, int, error) {
		out, err := s.listOnce(ctx)
		return out, 0, err
	}, nil)
}

// resolveNetwork sets Network from ResolveNetwork, if set.
func (s *Source) resolveNetwork(ctx context.Context) error {
	if s.ResolveNetwork == nil {
		return nil
	}
	id, err := s.ResolveNetwork(ctx)
	if err != nil {
		return err
	}
	s.Network = id
	return nil
}

func (s Source) listOnce(ctx context.Context) ([]view.Instance, error) {
	selector := s.ClusterLabel + "==" + s.ClusterID
	var (
		out    []view.Instance
		read   int
		total  int
		lastID int64
	)
	for page := 1; ; {
		if page > maxPages {
			return nil, fmt.Errorf("hetzner servers list: more than %d pages", maxPages)
		}
		servers, resp, err := s.page(ctx, selector, page)
		noteRateLimit(resp)
		if err != nil {
			return nil, fmt.Errorf("hetzner servers list (page %d, label selector %s): %w", page, selector, err)
		}
		p := resp.Meta.Pagination
		switch {
		case p == nil:
			return nil, fmt.Errorf("%w: page %d has no meta.pagination", errListing, page)
		case p.Page != page:
			return nil, fmt.Errorf("%w: asked for page %d, got page %d", errListing, page, p.Page)
		case p.PerPage < 1 || p.PerPage > pageSize:
			return nil, fmt.Errorf("%w: page %d says per_page %d, want 1-%d", errListing, page, p.PerPage, pageSize)
		case len(servers) > p.PerPage:
			return nil, fmt.Errorf("%w: page %d holds %d servers, over its per_page %d", errListing, page, len(servers), p.PerPage)
		case p.TotalEntries < total:
			return nil, fmt.Errorf("%w: %w: total_entries fell from %d to %d (a server was deleted; later pages moved)", errListing, kit.ErrListChanged, total, p.TotalEntries)
		}
		total = p.TotalEntries
		for _, srv := range servers {
			if srv == nil {
				return nil, fmt.Errorf("%w: page %d holds a null server", errListing, page)
			}
			if srv.ID <= lastID {
				// Also a server listed twice.
				return nil, fmt.Errorf("%w: server %d after server %d: not in the id order asked for", errListing, srv.ID, lastID)
			}
			read, lastID = read+1, srv.ID
			if vi, ok := s.toView(srv); ok {
				out = append(out, vi)
			}
		}
		if p.NextPage == 0 {
			// total_entries may be null (unknown), which reads as 0.
			if total > 0 && read != total {
				return nil, fmt.Errorf("%w: %w: %d servers read, total_entries says %d", errListing, kit.ErrListChanged, read, total)
			}
			return out, nil
		}
		if p.NextPage != page+1 {
			return nil, fmt.Errorf("%w: page %d names page %d as the next", errListing, page, p.NextPage)
		}
		if len(servers) < p.PerPage {
			return nil, fmt.Errorf("%w: page %d holds %d servers, under its per_page %d, and is not the last", errListing, page, len(servers), p.PerPage)
		}
		page = p.NextPage
	}
}

func (s Source) page(ctx context.Context, selector string, page int) ([]*hcloud.Server, *hcloud.Response, error) {
	if s.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.RequestTimeout)
		defer cancel()
	}
	servers, resp, err := s.Servers.List(ctx, hcloud.ServerListOpts{
		ListOpts: hcloud.ListOpts{Page: page, PerPage: pageSize, LabelSelector: selector},
		Sort:     []string{listSort},
	})
	if err == nil && resp == nil {
		err = errors.New("no response")
	}
	return servers, resp, err
}

// noteRateLimit logs when a response says the project's request budget is
// nearly spent (RateLimit-Remaining under a tenth of RateLimit-Limit).
func noteRateLimit(resp *hcloud.Response) {
	if resp == nil || resp.Response == nil {
		return
	}
	rl := resp.Meta.Ratelimit
	if rl.Limit > 0 && rl.Remaining*10 < rl.Limit {
		klog.InfoS("Hetzner Cloud API request budget nearly spent", "remaining", rl.Remaining, "limit", rl.Limit, "fullAt", rl.Reset)
	}
}

// toView converts a server into the shared view's form; false when it is
// not the cluster's (label missing or another value) or has no id.
func (s Source) toView(srv *hcloud.Server) (view.Instance, bool) {
	if srv == nil || srv.Labels[s.ClusterLabel] != s.ClusterID {
		if srv != nil {
			klog.V(2).InfoS("Leaving out a server the label selector let through without the cluster label", "server", srv.ID, "label", s.ClusterLabel)
		}
		return view.Instance{}, false
	}
	if srv.ID <= 0 {
		klog.V(2).InfoS("Leaving out a server without an id", "name", srv.Name)
		return view.Instance{}, false
	}
	id := strconv.FormatInt(srv.ID, 10)
	in := view.Instance{
		ProviderID: agentid.ProviderID(srv.ID),
		ID:         id,
		Name:       srv.Name,
		NodeName:   agentid.NodeName(srv.Name),
		Cluster:    s.ClusterID,
		State:      viewState(id, srv.Status),
		Addresses:  s.addresses(srv),
		Labels:     maps.Clone(srv.Labels),
		Created:    srv.Created,
	}
	if srv.Location != nil {
		in.Region = srv.Location.Name
		in.Zone = ZoneOf(srv.Location.Name)
	}
	if srv.ServerType != nil {
		in.InstanceType = srv.ServerType.Name
	}
	if srv.Created.IsZero() {
		klog.V(2).InfoS("The API gives a server no creation time; a join ticket for it will be refused", "server", id, "name", srv.Name)
	}
	return in, true
}

// viewState maps a server's status onto the view's: running is running;
// off, and stopping on the way to it, are stopped; deleting is terminated
// (a deleted server is simply absent); initializing, starting, migrating,
// rebuilding, unknown and any status Hetzner may add are pending: neither
// running (no join, no serving certificate) nor gone.
func viewState(id string, status hcloud.ServerStatus) view.State {
	switch status {
	case hcloud.ServerStatusRunning:
		return view.StateRunning
	case hcloud.ServerStatusOff, hcloud.ServerStatusStopping:
		return view.StateStopped
	case hcloud.ServerStatusDeleting:
		return view.StateTerminated
	case hcloud.ServerStatusInitializing, hcloud.ServerStatusStarting, hcloud.ServerStatusMigrating,
		hcloud.ServerStatusRebuilding, hcloud.ServerStatusUnknown:
		return view.StatePending
	}
	klog.V(2).InfoS("Unknown Hetzner server status; treating it as pending", "server", id, "status", status)
	return view.StatePending
}

// addresses lists a server's addresses in hcloud-cloud-controller-manager's
// order: the server name as Hostname, the public IPv4 address, the public
// IPv6 host address (the network's ::1, the address Hetzner configures on
// the server) as ExternalIP (as the address family allows), then the
// address in each private network (only the configured one, if any) as
// InternalIP.
func (s Source) addresses(srv *hcloud.Server) []v1.NodeAddress {
	out := []v1.NodeAddress{{Type: v1.NodeHostName, Address: srv.Name}}
	v4 := s.AddressFamily != AddressFamilyIPv6
	v6 := s.AddressFamily == AddressFamilyIPv6 || s.AddressFamily == AddressFamilyDualStack
	if ip := srv.PublicNet.IPv4.IP.To4(); v4 && ip != nil && !ip.IsUnspecified() {
		out = append(out, v1.NodeAddress{Type: v1.NodeExternalIP, Address: ip.String()})
	}
	if ip := ipv6Host(srv.PublicNet.IPv6); v6 && ip != nil {
		out = append(out, v1.NodeAddress{Type: v1.NodeExternalIP, Address: ip.String()})
	}
	for _, pn := range srv.PrivateNet {
		if pn.IP == nil || pn.IP.IsUnspecified() || (s.Network != 0 && (pn.Network == nil || pn.Network.ID != s.Network)) {
			continue
		}
		out = append(out, v1.NodeAddress{Type: v1.NodeInternalIP, Address: pn.IP.String()})
	}
	return out
}

// ipv6Host is the host address of a server's public IPv6 network: the
// network's address with its last bit set (2001:db8:1:2::/64 gives
// 2001:db8:1:2::1); nil when the server has no IPv6 network.
func ipv6Host(n hcloud.ServerPublicNetIPv6) net.IP {
	ip := n.IP
	if n.Network != nil {
		ip = n.Network.IP
	}
	ip = ip.To16()
	if ip == nil || ip.To4() != nil || (n.Network == nil && ip.IsUnspecified()) {
		return nil
	}
	host := make(net.IP, net.IPv6len)
	copy(host, ip)
	host[net.IPv6len-1] |= 1
	return host
}

// legacyDatacenters are the datacenter names of Hetzner's locations from
// before datacenters left the API (2026-07-01): the zone
// hcloud-cloud-controller-manager labels Nodes with, by location.
var legacyDatacenters = map[string]string{
	"fsn1": "fsn1-dc14",
	"nbg1": "nbg1-dc3",
	"hel1": "hel1-dc2",
	"ash":  "ash-dc1",
	"hil":  "hil-dc1",
	"sin":  "sin-dc1",
}

// ZoneOf is the topology zone of a server in location, as
// hcloud-cloud-controller-manager gives it: the location's former
// datacenter name, or the location's name for locations opened since.
// The region is the location's name.
func ZoneOf(location string) string {
	if dc, ok := legacyDatacenters[location]; ok {
		return dc
	}
	return location
}

// errProviderID is wrapped by ParseProviderID's errors.
var errProviderID = errors.New("not a Hetzner Cloud providerID")

// ParseProviderID reads hcloud://<id>: a positive decimal id in canonical
// form. Robot servers' providerIDs (hrobot://N, and the legacy
// hcloud://bm-N) are not this backend's.
func ParseProviderID(providerID string) (int64, error) {
	return kit.NumericProviderID(providerID, agentid.ProviderIDPrefix, "server id", errProviderID)
}
