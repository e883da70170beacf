package openstack

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/pagination"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/openstack/agentid"
	"github.com/mooring-dev/mooring/cloud/view"
)

// pageSize is the limit of the servers listing: Nova's default max_limit
// (a cloud with a lower one serves smaller pages, with a next link).
const pageSize = 1000

// maxPages bounds one listing (far over a project's server quota at any
// page size a cloud serves).
const maxPages = 1000

// Microversion is the Compute API microversion asked for: 2.26 brought
// server tags and the tag filters of the listing, 2.47 the flavor's name
// embedded in the server (original_name), so no flavor lookup per server.
const Microversion = "2.47"

// hostnameKey is the server metadata item whose value the upstream CCM
// lists as the Node's Hostname address.
const hostnameKey = "hostname"

// Source lists a cluster's OpenStack servers for the shared instance view:
// GET /servers/detail filtered by the cluster tag (or every server of the
// project, when membership is a metadata item), paged by limit and marker
// in creation order, whose answer is checked again here (the filter narrows
// the listing, it does not decide membership).
type Source struct {
	// Compute is the authenticated Compute client (made on first use).
	Compute func(context.Context) (*gophercloud.ServiceClient, error)
	// ClusterID, and ClusterTag or ClusterMetadataKey: a server is the
	// cluster's when it carries the tag, or the metadata item key=ClusterID.
	ClusterID, ClusterTag, ClusterMetadataKey string
	// Region is the Nodes' region; RegionalProviderID puts it into their
	// providerIDs.
	Region             string
	RegionalProviderID bool
	// InternalNetworks and PublicNetworks classify fixed addresses.
	InternalNetworks, PublicNetworks []string
	// Sources says which of the sources a project member sets
	// (accessIPv4, accessIPv6, metadata.hostname) the config trusts.
	Sources kit.AddressSources
	// RequestTimeout bounds one listing, all its pages; 0 leaves it to the
	// context.
	RequestTimeout time.Duration
	// PageSize is the limit asked for (default pageSize).
	PageSize int
}

var _ view.Source = Source{}

// errListing is wrapped by the errors of a listing Nova answered but that
// cannot be trusted whole.
var errListing = errors.New("inconsistent server listing")

// listQuery is the listing's query (gophercloud's servers.ListOpts lacks
// the sort parameters): the cluster tag (unless membership is by metadata),
// the page size, oldest first (a server created while the pages are read
// lands after the marker, in this listing; Nova breaks ties by its own
// id), and the marker of a later page.
func listQuery(tag string, limit int, marker string) string {
	q := url.Values{}
	if tag != "" {
		q.Set("tags", tag)
	}
	q.Set("limit", strconv.Itoa(limit))
	q.Set("sort_key", "created_at")
	q.Set("sort_dir", "asc")
	if marker != "" {
		q.Set("marker", marker)
	}
	return q.Encode()
}

// serverPage is a page of the listing whose next page is asked of the
// catalog's compute endpoint, never at the servers_links href itself: Nova
// writes its links from the host it sees, which behind a proxy is often an
// internal http:// address (no compute_link_prefix), and the token goes
// with the request. The href gives only the marker.
type serverPage struct {
	servers.ServerPage
	next func(marker string) string
}

// NextPageURL is the next page at the compute endpoint, with the marker of
// servers_links' next href; "" when there is none.
func (p serverPage) NextPageURL() (string, error) {
	marker, err := p.nextMarker()
	if err != nil || marker == "" {
		return "", err
	}
	return p.next(marker), nil
}

// nextMarker is the marker of servers_links' next href: a server id, or ""
// when there is no next page.
func (p serverPage) nextMarker() (string, error) {
	href, err := p.ServerPage.NextPageURL()
	if err != nil || href == "" {
		return "", err
	}
	u, err := url.Parse(href)
	if err != nil {
		return "", fmt.Errorf("%w: servers_links next is no URL", errListing)
	}
	marker := u.Query().Get("marker")
	if !agentid.IsServerID(marker) {
		return "", fmt.Errorf("%w: servers_links next has marker %.80q, not a server id", errListing, marker)
	}
	return marker, nil
}

// ListInstances reads page after page while servers_links names a next
// one (asked of the catalog's endpoint with that link's marker). A page
// that fails (a marker deleted meanwhile is Nova's 400), or a listing that
// does not add up (a page over the limit asked, a next page that does not
// begin after the page's last server, a server listed twice, more than
// maxPages pages), is an error, never a shorter list: the view believes
// what a fresh list lacks is gone.
func (s Source) ListInstances(ctx context.Context) ([]view.Instance, error) {
	if s.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.RequestTimeout)
		defer cancel()
	}
	client, err := s.Compute(ctx)
	if err != nil {
		return nil, err
	}
	limit := s.PageSize
	if limit <= 0 {
		limit = pageSize
	}
	tag := ""
	if s.ClusterMetadataKey == "" {
		tag = s.ClusterTag
	}
	base := client.ServiceURL("servers", "detail") + "?"
	next := func(marker string) string { return base + listQuery(tag, limit, marker) }
	var (
		out   []view.Instance
		seen  = map[string]bool{}
		pages int
		last  string
	)
	pager := pagination.NewPager(client, next(""), func(r pagination.PageResult) pagination.Page {
		return serverPage{ServerPage: servers.ServerPage{LinkedPageBase: pagination.LinkedPageBase{PageResult: r}}, next: next}
	})
	err = pager.EachPage(ctx, func(_ context.Context, page pagination.Page) (bool, error) {
		pages++
		if pages > maxPages {
			return false, fmt.Errorf("more than %d pages", maxPages)
		}
		list, err := servers.ExtractServers(page.(serverPage).ServerPage)
		if err != nil {
			return false, err
		}
		// Nova's next page begins after the page's last server.
		if marker, err := page.(serverPage).nextMarker(); err != nil {
			return false, err
		} else if marker != "" && (len(list) == 0 || marker != list[len(list)-1].ID) {
			return false, fmt.Errorf("%w: page %d names a next page after server %s, not after its last server", errListing, pages, marker)
		}
		if len(list) > limit {
			return false, fmt.Errorf("%w: page %d holds %d servers, over the limit %d asked for", errListing, pages, len(list), limit)
		}
		for i := range list {
			srv := &list[i]
			if seen[srv.ID] {
				return false, fmt.Errorf("%w: server %s listed twice", errListing, srv.ID)
			}
			seen[srv.ID] = true
			last = srv.ID
			if vi, ok := s.toView(srv); ok {
				out = append(out, vi)
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("openstack servers list (page %d, tag %q, after server %q): %w", pages, tag, last, err)
	}
	return out, nil
}

// member reports whether a server is the cluster's: it carries the
// cluster tag, or the metadata item key=clusterID. Why says what it lacks.
func (s Source) member(srv *servers.Server) (ok bool, why string) {
	if s.ClusterMetadataKey != "" {
		if srv.Metadata[s.ClusterMetadataKey] == s.ClusterID {
			return true, ""
		}
		return false, fmt.Sprintf("does not carry the metadata item %s=%s", s.ClusterMetadataKey, s.ClusterID)
	}
	if srv.Tags != nil && slices.Contains(*srv.Tags, s.ClusterTag) {
		return true, ""
	}
	return false, fmt.Sprintf("does not carry the tag %s", s.ClusterTag)
}

// toView converts a server into the shared view's form; false when it is
// not the cluster's or its id is no server id.
func (s Source) toView(srv *servers.Server) (view.Instance, bool) {
	if ok, why := s.member(srv); !ok {
		klog.V(4).InfoS("Leaving out a server that is not the cluster's", "server", srv.ID, "why", why)
		return view.Instance{}, false
	}
	if !agentid.IsServerID(srv.ID) {
		klog.V(2).InfoS("Leaving out a server whose id is not a UUID", "server", srv.ID, "name", srv.Name)
		return view.Instance{}, false
	}
	region := ""
	if s.RegionalProviderID {
		region = s.Region
	}
	in := view.Instance{
		ProviderID:   agentid.ProviderID(region, srv.ID),
		ID:           srv.ID,
		Name:         srv.Name,
		NodeName:     agentid.NodeName(srv.Name),
		Zone:         ZoneOf(srv.AvailabilityZone),
		Region:       s.Region,
		InstanceType: instanceType(srv.Flavor),
		Cluster:      s.ClusterID,
		State:        viewState(srv.ID, srv.Status),
		Labels:       maps.Clone(srv.Metadata),
		Created:      srv.Created,
	}
	in.Addresses, in.Asserted = s.addresses(srv)
	if srv.Created.IsZero() {
		klog.V(2).InfoS("Nova gives a server no creation time; a join ticket for it will be refused", "server", srv.ID, "name", srv.Name)
	}
	return in, true
}

// viewState maps a server's status onto the view's, as the upstream CCM
// reads it: SHUTOFF is the one shut-down status (InstanceShutdown);
// SOFT_DELETED (powered off, restorable until reclaimed) is stopped too;
// DELETED is terminated (a deleted server is simply absent); ACTIVE is
// running; BUILD, REBOOT, HARD_REBOOT, REBUILD, RESIZE, VERIFY_RESIZE,
// REVERT_RESIZE, MIGRATING, PASSWORD, RESCUE, PAUSED, SUSPENDED, SHELVED,
// SHELVED_OFFLOADED, ERROR, UNKNOWN and any status Nova may add are
// pending: neither running (no join, no serving certificate) nor gone.
func viewState(id, status string) view.State {
	switch status {
	case "ACTIVE":
		return view.StateRunning
	case "SHUTOFF", "SOFT_DELETED":
		return view.StateStopped
	case "DELETED":
		return view.StateTerminated
	case "BUILD", "REBOOT", "HARD_REBOOT", "REBUILD", "RESIZE", "VERIFY_RESIZE", "REVERT_RESIZE", "MIGRATING",
		"PASSWORD", "RESCUE", "PAUSED", "SUSPENDED", "SHELVED", "SHELVED_OFFLOADED", "ERROR", "UNKNOWN":
		return view.StatePending
	}
	klog.V(2).InfoS("Unknown Nova server status; treating it as pending", "server", id, "status", status)
	return view.StatePending
}

// instanceType is the flavor's name as the server embeds it (from
// microversion 2.47, original_name) when it is a label value, else its id.
func instanceType(flavor map[string]any) string {
	if name, ok := flavor["original_name"].(string); ok && name != "" && len(validation.IsValidLabelValue(name)) == 0 {
		return name
	}
	if id, ok := flavor["id"].(string); ok && len(validation.IsValidLabelValue(id)) == 0 {
		return id
	}
	return ""
}

// labelUnsafe is what the upstream CCM replaces in a zone name.
var labelUnsafe = regexp.MustCompile(`[^-a-zA-Z0-9_.]+`)

// ZoneOf is the topology zone of a server in availability zone az, as the
// upstream CCM labels it: runs of characters a label value cannot hold
// replaced by '-', leading and trailing '-', '_' and '.' trimmed, at most
// 63 characters.
func ZoneOf(az string) string {
	z := strings.Trim(labelUnsafe.ReplaceAllString(az, "-"), "-_.")
	if len(z) > validation.LabelValueMaxLength {
		z = z[:validation.LabelValueMaxLength]
	}
	return z
}

// novaAddress is one entry of a server's addresses.
type novaAddress struct {
	addr     netip.Addr
	floating bool
}

// addresses lists a server's addresses in the upstream CCM's order
// (nodeAddresses): the fixed addresses as InternalIP (networks by name),
// accessIPv4 and accessIPv6 as ExternalIP, the metadata item hostname as
// Hostname, then floating addresses and the fixed addresses on
// publicNetworks as ExternalIP (networks by name). With internalNetworks
// set, fixed addresses on other networks are left out. An address is
// listed once per type.
//
// Nova's addresses are Neutron's ports' (fixed) and floating IPs, which
// the cloud assigns and keeps unique; accessIPv4, accessIPv6 and the
// metadata item are whatever a project member sets on the server. The
// second result marks the addresses only such a source gives, of sources
// the config does not trust.
func (s Source) addresses(srv *servers.Server) ([]v1.NodeAddress, map[string]string) {
	nets := parseAddresses(srv)
	names := slices.Sorted(maps.Keys(nets))
	var out []v1.NodeAddress
	var origins kit.AddressOrigins
	add := func(t v1.NodeAddressType, a, source string) {
		if a == "" {
			return
		}
		if source == "" {
			origins.Assigned(a)
		} else {
			origins.Asserted(a, source)
		}
		na := v1.NodeAddress{Type: t, Address: a}
		if !slices.Contains(out, na) {
			out = append(out, na)
		}
	}
	public := func(n string) bool { return slices.Contains(s.PublicNetworks, n) }
	for _, n := range names {
		if public(n) || (len(s.InternalNetworks) > 0 && !slices.Contains(s.InternalNetworks, n)) {
			continue
		}
		for _, a := range nets[n] {
			if !a.floating {
				add(v1.NodeInternalIP, a.addr.String(), "")
			}
		}
	}
	for _, a := range []struct{ addr, source string }{{srv.AccessIPv4, SourceAccessIPv4}, {srv.AccessIPv6, SourceAccessIPv6}} {
		if ip, err := netip.ParseAddr(a.addr); err == nil {
			add(v1.NodeExternalIP, ip.String(), a.source)
		}
	}
	add(v1.NodeHostName, srv.Metadata[hostnameKey], SourceHostnameMetadata)
	for _, n := range names {
		for _, a := range nets[n] {
			if a.floating || public(n) {
				add(v1.NodeExternalIP, a.addr.String(), "")
			}
		}
	}
	return out, s.Sources.Untrusted(origins)
}

// parseAddresses reads a server's addresses: per network name, each
// entry's addr and OS-EXT-IPS:type, in Nova's order. Entries that are no
// address are left out.
func parseAddresses(srv *servers.Server) map[string][]novaAddress {
	out := map[string][]novaAddress{}
	for n, raw := range srv.Addresses {
		list, ok := raw.([]any)
		if !ok {
			klog.V(2).InfoS("Leaving out a network whose addresses are not a list", "server", srv.ID, "network", n)
			continue
		}
		for _, e := range list {
			m, ok := e.(map[string]any)
			if !ok {
				continue
			}
			s, _ := m["addr"].(string)
			ip, err := netip.ParseAddr(s)
			if err != nil {
				klog.V(2).InfoS("Leaving out an address that does not parse", "server", srv.ID, "network", n)
				continue
			}
			typ, _ := m["OS-EXT-IPS:type"].(string)
			out[n] = append(out[n], novaAddress{addr: ip.Unmap(), floating: typ == "floating"})
		}
	}
	return out
}
