package linode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/linode/linodego"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// tagPrefix begins the tags that tie a NodeBalancer to a cluster's
// Service (loadbalancer.StringTags; Linode tags are 3-50 characters).
const tagPrefix = "mooring"

// tagPreserve marks a NodeBalancer to keep when its Service goes (the
// preserve annotation): deleting, mooring has nothing else of the Service
// to read it from.
const tagPreserve = tagPrefix + ":preserve"

// maxTag is the longest tag Linode takes.
const maxTag = 50

var ownerTags = loadbalancer.StringTags{Prefix: tagPrefix, Max: maxTag}

// lbSpec is a NodeBalancer in normal form: what its Service's annotations
// and nodes call for, or what the API holds. Unexported fields are not
// compared (Fingerprint is of the exported ones).
type lbSpec struct {
	// Throttle is client_conn_throttle.
	Throttle int
	// Tags are the tags annotation's (the NodeBalancer's tags but ours).
	Tags []string
	// Preserve: the NodeBalancer stays when its Service goes.
	Preserve bool
	// Firewall is the Cloud Firewall it is attached to (firewall-id); 0
	// for none; held, -n for n of them (firewalls lists them).
	Firewall int
	// Ports are its configs, by port.
	Ports []portSpec

	// hostnameOnly: the status shows the hostname alone (the Service's
	// choice, not the NodeBalancer's: Ingress).
	hostnameOnly bool
	// Set at creation only: the region (from the nodes' region label, else
	// their Linodes'), and the type.
	region      string
	providerIDs []string
	nbType      string
	// vpc is the VPC backends' subnet as the Service chooses it; subnet
	// its id (nodes are sent with it; the create's vpcs).
	vpc    *vpcChoice
	subnet int
	// named is the nodebalancer-id annotation's id: such a Service's
	// NodeBalancer is never made.
	named string
	// labels are the nodes' labels by address.
	labels map[string]string
	// Read from the API: full when the configs were read; configs by port;
	// the tags as they are.
	full         bool
	configs      map[int]int
	rawTags      []string
	firewalls    []int
	ip, hostname string
}

// portSpec is one config.
type portSpec struct {
	Port                                           int
	Protocol, ProxyProtocol, Algorithm, Stickiness string
	Check, CheckPath, CheckBody                    string
	CheckInterval, CheckTimeout, CheckAttempts     int
	CheckPassive                                   bool
	UDPCheckPort                                   int
	// TLS is an https port's certificate's fingerprint (ssl_fingerprint).
	TLS string
	// Nodes are "<ip>:<port>", with " <mode>" after a node whose mode is
	// not accept; sorted.
	Nodes []string

	// secret is tls-secret-name; tls the certificate and key read from it
	// (a pointer: a printed spec shows no key).
	secret string
	tls    *certKey
}

// nodeBalancers is loadbalancer.Cloud over Linode's NodeBalancers.
type nodeBalancers struct {
	c *Cloud
	// ids are the NodeBalancer ids last seen by address ("ip:<address>",
	// "hostname:<name>"), so that finding one by its Service's status
	// is a GET of the id rather than a list.
	ids sync.Map
	// subnets are the VPC subnets found, by name or id (vpc.go).
	subnets sync.Map
}

var _ loadbalancer.Cloud[lbSpec] = (*nodeBalancers)(nil)

// Name is "ccm-" and 12 hex digits, as Linode's CCM labels its
// NodeBalancers; Linode's CCM takes its digits from the clock, mooring
// from the Service's UID, so that the name is the Service's alone.
// (Linode's CCM finds its NodeBalancers by the nodebalancer-id
// annotation or by the address in the Service's status, never by label:
// ID answers those.)
func (l *nodeBalancers) Name(svc *v1.Service) string {
	sum := sha256.Sum256([]byte(svc.UID))
	return "ccm-" + hex.EncodeToString(sum[:])[:12]
}

// ID is the nodebalancer-id annotation's; else, as Linode's CCM finds the
// NodeBalancer it made, the address in the Service's status:
// "ip:<address>" or "hostname:<name>" (Get reads these).
func (l *nodeBalancers) ID(svc *v1.Service) string {
	if s := strings.TrimSpace(svc.Annotations[AnnNodeBalancerID]); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return strconv.Itoa(n)
		}
		return ""
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			return "ip:" + in.IP
		}
		if in.Hostname != "" {
			return "hostname:" + in.Hostname
		}
	}
	return ""
}

func (l *nodeBalancers) Desired(ctx context.Context, svc *v1.Service, nodes []*v1.Node) (lbSpec, error) {
	if t := ownerTags.Tags(loadbalancer.OwnerOf(l.c.cfg.ClusterID, svc))[0]; len(t) > maxTag {
		return lbSpec{}, fmt.Errorf("clusterID %q: the NodeBalancer tag %s is longer than Linode's %d characters", l.c.cfg.ClusterID, t, maxTag)
	}
	spec, err := l.desired(ctx, svc, nodes)
	if s := strings.TrimSpace(svc.Annotations[AnnNodeBalancerID]); s != "" {
		spec.named = s
	}
	return spec, err
}

// held is a NodeBalancer as the API shows it; configs (nil: not read) are
// its configs with their nodes.
func held(nb *linodego.NodeBalancer, configs map[*linodego.NodeBalancerConfig][]linodego.NodeBalancerNode) loadbalancer.Held[lbSpec] {
	spec := lbSpec{Throttle: nb.ClientConnThrottle, rawTags: slices.Clone(nb.Tags), configs: map[int]int{}, region: nb.Region}
	for _, t := range nb.Tags {
		switch {
		case t == tagPreserve:
			spec.Preserve = true
		case !strings.HasPrefix(t, tagPrefix+":"):
			spec.Tags = append(spec.Tags, t)
		}
	}
	slices.Sort(spec.Tags)
	spec.Tags = slices.Compact(spec.Tags)
	proxy := false
	if configs != nil {
		spec.full = true
		for cf, nodes := range configs {
			spec.configs[cf.Port] = cf.ID
			ps := portSpec{Port: cf.Port, Protocol: string(cf.Protocol), ProxyProtocol: string(cf.ProxyProtocol),
				Algorithm: string(cf.Algorithm), Stickiness: string(cf.Stickiness), Check: string(cf.Check),
				CheckInterval: cf.CheckInterval, CheckTimeout: cf.CheckTimeout, CheckAttempts: cf.CheckAttempts, CheckPassive: cf.CheckPassive}
			if ps.Protocol == "tcp" {
				ps.Stickiness = ""
			}
			if ps.Check == "http" || ps.Check == "http_body" {
				ps.CheckPath = cf.CheckPath
			}
			if ps.Check == "http_body" {
				ps.CheckBody = cf.CheckBody
			}
			if ps.Protocol == "udp" {
				ps.UDPCheckPort = cf.UDPCheckPort
			}
			if ps.Protocol == "https" {
				ps.TLS = cf.SSLFingerprint
			}
			for _, n := range nodes {
				a := n.Address
				if n.Mode != "" && n.Mode != linodego.ModeAccept {
					a += " " + string(n.Mode)
				}
				ps.Nodes = append(ps.Nodes, a)
			}
			slices.Sort(ps.Nodes)
			proxy = proxy || ps.ProxyProtocol != "" && ps.ProxyProtocol != "none"
			spec.Ports = append(spec.Ports, ps)
		}
		slices.SortFunc(spec.Ports, func(a, b portSpec) int { return a.Port - b.Port })
	}
	h := loadbalancer.Held[lbSpec]{ID: strconv.Itoa(nb.ID), Owner: ownerTags.Owner(nb.Tags), Spec: spec}
	if nb.Label != nil {
		h.Name = *nb.Label
	}
	h.Spec.ip, h.Spec.hostname = deref(nb.IPv4), deref(nb.Hostname)
	h.Ingress = loadbalancer.Ingress(h.Spec.ip, h.Spec.hostname, proxy, false)
	return h
}

// read reads a NodeBalancer's configs and their nodes (one call for the
// configs, one per config for its nodes).
func (l *nodeBalancers) read(ctx context.Context, nb *linodego.NodeBalancer) (loadbalancer.Held[lbSpec], error) {
	cfs, err := l.c.client.ListNodeBalancerConfigs(ctx, nb.ID, nil)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, fmt.Errorf("NodeBalancer %d's configs: %w", nb.ID, err)
	}
	configs := map[*linodego.NodeBalancerConfig][]linodego.NodeBalancerNode{}
	for i := range cfs {
		nodes, err := l.c.client.ListNodeBalancerNodes(ctx, nb.ID, cfs[i].ID, nil)
		if err != nil {
			return loadbalancer.Held[lbSpec]{}, fmt.Errorf("NodeBalancer %d config %d's nodes: %w", nb.ID, cfs[i].ID, err)
		}
		configs[&cfs[i]] = nodes
	}
	fws, err := l.c.client.ListNodeBalancerFirewalls(ctx, nb.ID, nil)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, fmt.Errorf("NodeBalancer %d's firewalls: %w", nb.ID, err)
	}
	h := held(nb, configs)
	for _, fw := range fws {
		h.Spec.firewalls = append(h.Spec.firewalls, fw.ID)
	}
	switch len(fws) {
	case 0:
	case 1:
		h.Spec.Firewall = fws[0].ID
	default:
		// Never a Service's spec (one firewall-id): Update sorts it out.
		h.Spec.Firewall = -len(fws)
	}
	return h, nil
}

// List lists the account's NodeBalancers (pages of the config's
// pageSize), reading the configs of those tagged for the cluster.
func (l *nodeBalancers) List(ctx context.Context) ([]loadbalancer.Held[lbSpec], error) {
	nbs, err := l.c.client.ListNodeBalancers(ctx, &linodego.ListOptions{PageSize: l.c.cfg.PageSize})
	if err != nil {
		return nil, err
	}
	out := make([]loadbalancer.Held[lbSpec], 0, len(nbs))
	for i := range nbs {
		if ownerTags.Owner(nbs[i].Tags).Cluster != l.c.cfg.ClusterID {
			out = append(out, held(&nbs[i], nil))
			continue
		}
		h, err := l.read(ctx, &nbs[i])
		if linodego.IsNotFound(err) {
			continue // deleted since the list
		}
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// Get reads a NodeBalancer by its id, or ("ip:", "hostname:") by its
// address as a Service's status shows it.
// Index lists the account's NodeBalancers with their labels and tags but
// not their configs (the kit's Indexer): one paged call, where List reads
// every cluster NodeBalancer's configs and nodes too, so that finding a
// new Service's NodeBalancer does not cost a List of all of them.
func (l *nodeBalancers) Index(ctx context.Context) ([]loadbalancer.Held[lbSpec], error) {
	nbs, err := l.c.client.ListNodeBalancers(ctx, &linodego.ListOptions{PageSize: l.c.cfg.PageSize})
	if err != nil {
		return nil, err
	}
	out := make([]loadbalancer.Held[lbSpec], len(nbs))
	for i := range nbs {
		out[i] = held(&nbs[i], nil)
	}
	return out, nil
}

func (l *nodeBalancers) Get(ctx context.Context, id string) (loadbalancer.Held[lbSpec], bool, error) {
	var nb *linodego.NodeBalancer
	if known, ok := l.ids.Load(id); ok {
		h, found, err := l.Get(ctx, known.(string))
		if err != nil || found && (h.Spec.ip == strings.TrimPrefix(id, "ip:") || h.Spec.hostname == strings.TrimPrefix(id, "hostname:")) {
			return h, found, err
		}
		l.ids.Delete(id)
	}
	switch {
	case strings.HasPrefix(id, "ip:") || strings.HasPrefix(id, "hostname:"):
		opts := &linodego.ListOptions{PageSize: l.c.cfg.PageSize}
		key, val, _ := strings.Cut(id, ":")
		if key == "ip" {
			opts.Filter = fmt.Sprintf(`{"ipv4": %q}`, val)
		}
		nbs, err := l.c.client.ListNodeBalancers(ctx, opts)
		if err != nil {
			return loadbalancer.Held[lbSpec]{}, false, err
		}
		for i := range nbs {
			if key == "ip" || nbs[i].Hostname != nil && *nbs[i].Hostname == val {
				nb = &nbs[i]
				break
			}
		}
		if nb == nil {
			return loadbalancer.Held[lbSpec]{}, false, nil
		}
	default:
		n, err := strconv.Atoi(id)
		if err != nil {
			return loadbalancer.Held[lbSpec]{}, false, fmt.Errorf("NodeBalancer id %q is not a number", id)
		}
		nb, err = l.c.client.GetNodeBalancer(ctx, n)
		if linodego.IsNotFound(err) {
			return loadbalancer.Held[lbSpec]{}, false, nil
		}
		if err != nil {
			return loadbalancer.Held[lbSpec]{}, false, err
		}
	}
	h, err := l.read(ctx, nb)
	if linodego.IsNotFound(err) {
		return loadbalancer.Held[lbSpec]{}, false, nil
	}
	if err == nil {
		l.seen(h)
	}
	return h, err == nil, err
}

// seen remembers a NodeBalancer's id by its addresses.
func (l *nodeBalancers) seen(h loadbalancer.Held[lbSpec]) {
	if h.Spec.ip != "" {
		l.ids.Store("ip:"+h.Spec.ip, h.ID)
	}
	if h.Spec.hostname != "" {
		l.ids.Store("hostname:"+h.Spec.hostname, h.ID)
	}
}

// tags are a NodeBalancer's tags: o's, the annotation's, and the
// preserve mark.
func tags(o loadbalancer.Owner, spec lbSpec) []string {
	t := append(ownerTags.Tags(o), spec.Tags...)
	if spec.Preserve {
		t = append(t, tagPreserve)
	}
	return t
}

func createConfig(p portSpec, labels map[string]string, subnet int) linodego.NodeBalancerConfigCreateOptions {
	passive := p.CheckPassive
	o := linodego.NodeBalancerConfigCreateOptions{Port: p.Port, Protocol: linodego.ConfigProtocol(p.Protocol),
		ProxyProtocol: linodego.ConfigProxyProtocol(p.ProxyProtocol), Algorithm: linodego.ConfigAlgorithm(p.Algorithm),
		Stickiness: linodego.ConfigStickiness(p.Stickiness), Check: linodego.ConfigCheck(p.Check), CheckInterval: p.CheckInterval,
		CheckTimeout: p.CheckTimeout, CheckAttempts: p.CheckAttempts, CheckPath: p.CheckPath, CheckBody: p.CheckBody,
		CheckPassive: &passive}
	if p.tls != nil {
		o.SSLCert, o.SSLKey = p.tls.cert, p.tls.key
	}
	if p.Protocol == "udp" {
		port := p.UDPCheckPort
		o.UDPCheckPort = &port
	}
	for _, a := range p.Nodes {
		n := linodego.NodeBalancerNodeCreateOptions{Address: a, Label: labels[a], Weight: 100, SubnetID: subnet}
		if n.Label == "" {
			n.Label = nodeLabel(strings.ReplaceAll(a, ":", "-"))
		}
		if p.Protocol != "udp" {
			n.Mode = linodego.ModeAccept
		}
		o.Nodes = append(o.Nodes, n)
	}
	return o
}

// region is where a new NodeBalancer goes: the nodes' region label, else
// their first Linode's region.
func (l *nodeBalancers) region(ctx context.Context, spec lbSpec) (string, error) {
	if spec.region != "" {
		return spec.region, nil
	}
	for _, pid := range spec.providerIDs {
		in, err := l.c.view.ByProviderID(ctx, pid, l.c.cfg.InstanceMaxAge.Duration)
		if err == nil && in.Region != "" {
			return in.Region, nil
		}
	}
	return "", errors.New("no region: none of the Service's nodes has the label " + v1.LabelTopologyRegion + " or a Linode the cluster's list holds")
}

func (l *nodeBalancers) Create(ctx context.Context, name string, o loadbalancer.Owner, spec lbSpec) (loadbalancer.Held[lbSpec], error) {
	if spec.named != "" {
		// As Linode's CCM: the Service names a NodeBalancer to use, and
		// another is not made in its place.
		return loadbalancer.Held[lbSpec]{}, fmt.Errorf("the NodeBalancer %s that %s names does not exist", spec.named, AnnNodeBalancerID)
	}
	region, err := l.region(ctx, spec)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, err
	}
	if err := l.firewallExists(ctx, spec.Firewall); err != nil {
		return loadbalancer.Held[lbSpec]{}, err
	}
	throttle := spec.Throttle
	opts := linodego.NodeBalancerCreateOptions{Label: &name, Region: region, ClientConnThrottle: &throttle, Tags: tags(o, spec),
		Type: linodego.NodeBalancerPlanType(spec.nbType), FirewallID: spec.Firewall}
	if spec.vpc != nil {
		opts.VPCs = []linodego.NodeBalancerVPCOptions{{SubnetID: spec.subnet, IPv4Range: spec.vpc.ipv4Range}}
	}
	for _, p := range spec.Ports {
		cf := createConfig(p, spec.labels, spec.subnet)
		opts.Configs = append(opts.Configs, &cf)
	}
	nb, err := l.c.client.CreateNodeBalancer(ctx, opts)
	if err != nil {
		return loadbalancer.Held[lbSpec]{}, err
	}
	h := held(nb, nil)
	l.seen(h)
	// What the create sent is what it holds (its answer has no configs;
	// the firewall was attached by the create itself).
	h.Spec.Ports, h.Spec.Firewall = spec.Ports, spec.Firewall
	h.Ingress = loadbalancer.Ingress(h.Spec.ip, h.Spec.hostname, proxied(spec), false)
	return h, nil
}

var _ loadbalancer.IngressWorder[lbSpec] = (*nodeBalancers)(nil)

// Ingress is h's status for a Service that calls for spec: its address and
// hostname, ipMode Proxy where a port speaks PROXY protocol, the hostname
// alone for hostname-only-ingress.
func (l *nodeBalancers) Ingress(h loadbalancer.Held[lbSpec], spec lbSpec) []v1.LoadBalancerIngress {
	return loadbalancer.Ingress(h.Spec.ip, h.Spec.hostname, proxied(spec), spec.hostnameOnly)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func proxied(spec lbSpec) bool {
	return slices.ContainsFunc(spec.Ports, func(p portSpec) bool { return p.ProxyProtocol != "none" && p.ProxyProtocol != "" })
}

// Update makes the NodeBalancer carry o's tags and spec's throttle (one
// PUT, when they differ), and its configs spec's ports: a config of a
// port it has is rebuilt (settings and nodes in one call) when it
// differs, one of a new port created, one of a port gone deleted. Its
// address stays.
func (l *nodeBalancers) Update(ctx context.Context, h loadbalancer.Held[lbSpec], o loadbalancer.Owner, spec lbSpec) (loadbalancer.Held[lbSpec], error) {
	id, err := strconv.Atoi(h.ID)
	if err != nil {
		return h, fmt.Errorf("NodeBalancer id %q is not a number", h.ID)
	}
	if !h.Spec.full {
		got, ok, err := l.Get(ctx, h.ID)
		if err != nil {
			return h, err
		}
		if !ok {
			return h, fmt.Errorf("NodeBalancer %d is gone", id)
		}
		h = got
	}
	// The firewall first: a NodeBalancer gets its new firewall before it
	// loses its old one, and before its configs change.
	if err := l.firewall(ctx, id, h.Spec.firewalls, spec.Firewall); err != nil {
		return h, err
	}
	want := tags(o, spec)
	have := slices.Clone(h.Spec.rawTags)
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) || h.Spec.Throttle != spec.Throttle {
		throttle := spec.Throttle
		if _, err := l.c.client.UpdateNodeBalancer(ctx, id, linodego.NodeBalancerUpdateOptions{ClientConnThrottle: &throttle, Tags: &want}); err != nil {
			return h, err
		}
	}
	heldPorts := map[int]portSpec{}
	for _, p := range h.Spec.Ports {
		heldPorts[p.Port] = p
	}
	for _, p := range spec.Ports {
		cid, had := h.Spec.configs[p.Port]
		cf := createConfig(p, spec.labels, spec.subnet)
		switch {
		case !had:
			if _, err := l.c.client.CreateNodeBalancerConfig(ctx, id, cf); err != nil {
				return h, fmt.Errorf("port %d: %w", p.Port, err)
			}
		case loadbalancer.Fingerprint(heldPorts[p.Port]) != loadbalancer.Fingerprint(p):
			rb := linodego.NodeBalancerConfigRebuildOptions{Port: cf.Port, Protocol: cf.Protocol, ProxyProtocol: cf.ProxyProtocol,
				Algorithm: cf.Algorithm, Stickiness: cf.Stickiness, Check: cf.Check, CheckInterval: cf.CheckInterval,
				CheckAttempts: cf.CheckAttempts, CheckPath: cf.CheckPath, CheckBody: cf.CheckBody, CheckPassive: cf.CheckPassive,
				CheckTimeout: cf.CheckTimeout, UDPCheckPort: cf.UDPCheckPort, SSLCert: cf.SSLCert, SSLKey: cf.SSLKey,
				Nodes: make([]linodego.NodeBalancerConfigRebuildNodeOptions, 0, len(cf.Nodes))}
			for _, n := range cf.Nodes {
				rb.Nodes = append(rb.Nodes, linodego.NodeBalancerConfigRebuildNodeOptions{NodeBalancerNodeCreateOptions: n})
			}
			if _, err := l.c.client.RebuildNodeBalancerConfig(ctx, id, cid, rb); err != nil {
				return h, fmt.Errorf("port %d: %w", p.Port, err)
			}
		}
		delete(heldPorts, p.Port)
	}
	for port := range heldPorts {
		if err := l.c.client.DeleteNodeBalancerConfig(ctx, id, h.Spec.configs[port]); err != nil && !linodego.IsNotFound(err) {
			return h, fmt.Errorf("port %d: %w", port, err)
		}
	}
	out := h
	out.Owner = o
	out.Spec = spec
	out.Spec.full, out.Spec.rawTags, out.Spec.ip, out.Spec.hostname = false, want, h.Spec.ip, h.Spec.hostname
	out.Ingress = loadbalancer.Ingress(h.Spec.ip, h.Spec.hostname, proxied(spec), false)
	return out, nil
}

// Delete deletes the NodeBalancer; one to preserve loses mooring's tags
// instead (no longer the cluster's: a Service may adopt it by its
// nodebalancer-id, and the drift pass leaves it alone).
func (l *nodeBalancers) Delete(ctx context.Context, h loadbalancer.Held[lbSpec]) error {
	id, err := strconv.Atoi(h.ID)
	if err != nil {
		return fmt.Errorf("NodeBalancer id %q is not a number", h.ID)
	}
	if h.Spec.Preserve {
		tags := slices.DeleteFunc(slices.Clone(h.Spec.rawTags), func(t string) bool { return strings.HasPrefix(t, tagPrefix+":") })
		_, err := l.c.client.UpdateNodeBalancer(ctx, id, linodego.NodeBalancerUpdateOptions{Tags: &tags})
		if err == nil {
			klog.FromContext(ctx).Info("Kept the NodeBalancer of a Service that is gone (preserve), untagged", "id", id, "loadBalancer", h.Name)
		}
		if linodego.IsNotFound(err) {
			return nil
		}
		return err
	}
	err = l.c.client.DeleteNodeBalancer(ctx, id)
	if linodego.IsNotFound(err) || linodego.ErrHasStatus(err, http.StatusNotFound) {
		return nil
	}
	return err
}
