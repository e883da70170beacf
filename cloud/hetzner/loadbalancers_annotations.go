package hetzner

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// AnnotationPrefix is hcloud-cloud-controller-manager's prefix of its
// Service annotations, which mooring reads with the same names and
// meanings (docs/hetzner.md lists them: supported or not).
const AnnotationPrefix = "load-balancer.hetzner.cloud/"

// The annotations mooring reads.
const (
	AnnName                  = AnnotationPrefix + "name"
	AnnHostname              = AnnotationPrefix + "hostname"
	AnnLocation              = AnnotationPrefix + "location"
	AnnNetworkZone           = AnnotationPrefix + "network-zone"
	AnnType                  = AnnotationPrefix + "type"
	AnnAlgorithm             = AnnotationPrefix + "algorithm-type"
	AnnProtocol              = AnnotationPrefix + "protocol"
	AnnProxyProtocol         = AnnotationPrefix + "uses-proxyprotocol"
	AnnUsePrivateIP          = AnnotationPrefix + "use-private-ip"
	AnnDisablePublicNetwork  = AnnotationPrefix + "disable-public-network"
	AnnDisablePrivateIngress = AnnotationPrefix + "disable-private-ingress"
	AnnIPv6Disabled          = AnnotationPrefix + "ipv6-disabled"
	AnnCertificates          = AnnotationPrefix + "http-certificates"
	AnnCertificateType       = AnnotationPrefix + "certificate-type"
	AnnHealthProtocol        = AnnotationPrefix + "health-check-protocol"
	AnnHealthPort            = AnnotationPrefix + "health-check-port"
	AnnHealthInterval        = AnnotationPrefix + "health-check-interval"
	AnnHealthTimeout         = AnnotationPrefix + "health-check-timeout"
	AnnHealthRetries         = AnnotationPrefix + "health-check-retries"
	AnnHealthPath            = AnnotationPrefix + "health-check-http-path"
	AnnHealthDomain          = AnnotationPrefix + "health-check-http-domain"
	AnnHealthStatusCodes     = AnnotationPrefix + "http-status-codes"
	AnnHealthTLS             = AnnotationPrefix + "health-check-http-validate-certificate"
)

// readOnly are the annotations hcloud-cloud-controller-manager writes
// (or reserves) on a Service: known, never read.
var readOnly = []string{AnnotationPrefix + "id", AnnotationPrefix + "ipv4", AnnotationPrefix + "ipv6",
	AnnotationPrefix + "ipv4-rdns", AnnotationPrefix + "ipv6-rdns"}

// LabelServiceUID is the label hcloud-cloud-controller-manager puts on the
// load balancers it makes, the Service's UID; mooring sets it too, so that
// switching back finds them.
const LabelServiceUID = "hcloud-ccm/service-uid"

// ownerLabels are mooring's labels on a Service's load balancer.
var ownerLabels = loadbalancer.LabelTags{Prefix: "mooring.dev"}

// Hetzner's defaults, as the Cloud API and hcloud-cloud-controller-manager
// give them.
const (
	defaultLBType         = "lb11"
	defaultAlgorithm      = "round_robin"
	defaultHealthInterval = 15 * time.Second
	defaultHealthTimeout  = 10 * time.Second
	defaultHealthRetries  = 3
)

// lbSpec is what a Service's load balancer is, in normal form. Fields
// tagged "-" are not compared (Fingerprint): the location and network
// zone count only at creation (as hcloud-cloud-controller-manager's), and
// the ingress choices only for the Service's status.
type lbSpec struct {
	Type      string
	Algorithm string
	// Public is the public interface; Network whether the load balancer is
	// attached to the configured network (and to none other).
	Public, Network bool
	Services        []lbService
	Targets         []lbTarget

	Location    string `json:"-"`
	NetworkZone string `json:"-"`
	// Hostname replaces the IPs in the status; NoIPv6 leaves the IPv6 out,
	// NoPrivate the private IP.
	Hostname          string `json:"-"`
	NoIPv6, NoPrivate bool   `json:"-"`
	// Pick is where a load balancer without a location or network zone is
	// made: the location of the first target's server.
	Pick []string `json:"-"`
}

// lbService is one listen port.
type lbService struct {
	Protocol                string
	ListenPort, Destination int
	Proxy                   bool
	Certificates            []int64
	Check                   lbCheck
}

// lbCheck is a service's health check (whole seconds).
type lbCheck struct {
	Protocol                   string
	Port                       int
	Interval, Timeout, Retries int
	Path, Domain               string
	StatusCodes                []string
	TLS                        bool
}

// lbTarget is a server target.
type lbTarget struct {
	Server  int64
	Private bool
}

// Name is the load balancer's name: its name annotation, or the name the
// cloud provider library gives (hcloud-cloud-controller-manager's default:
// "a" and the Service's UID without dashes, 32 characters at most).
func (l *lbCloud) Name(svc *v1.Service) string {
	if v := strings.TrimSpace(svc.Annotations[AnnName]); v != "" {
		return v
	}
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// ID: hcloud-cloud-controller-manager writes no id annotation (its id
// annotation is reserved and unused), so a Service names none.
func (l *lbCloud) ID(*v1.Service) string { return "" }

// Desired reads svc's annotations and ports, and the nodes, into the spec;
// every problem of the annotations at once, naming each.
func (l *lbCloud) Desired(_ context.Context, svc *v1.Service, nodes []*v1.Node) (lbSpec, error) {
	a := loadbalancer.Read(svc, AnnotationPrefix)
	a.Known(readOnly...)
	a.Known(AnnName)
	spec := lbSpec{
		Type:        a.String(AnnType, defaultLBType),
		Algorithm:   a.OneOf(AnnAlgorithm, defaultAlgorithm, "round_robin", "least_connections"),
		Location:    a.String(AnnLocation, ""),
		NetworkZone: a.String(AnnNetworkZone, ""),
		Hostname:    a.String(AnnHostname, ""),
		NoIPv6:      a.Bool(AnnIPv6Disabled, false),
		NoPrivate:   a.Bool(AnnDisablePrivateIngress, false),
	}
	if spec.Location != "" && spec.NetworkZone != "" {
		a.Fail(AnnNetworkZone, "unset: "+AnnLocation+" is set, and the two are mutually exclusive")
	}
	if !lbTypeName.MatchString(spec.Type) {
		a.Fail(AnnType, "a load balancer type's name (lb11, lb21, lb31)")
	}
	network := !l.c.cfg.Network.IsZero()
	spec.Network = network
	spec.Public = !a.Bool(AnnDisablePublicNetwork, false)
	private := a.Bool(AnnUsePrivateIP, false)
	if (private || !spec.Public) && !network {
		if private {
			a.Fail(AnnUsePrivateIP, "false: the cloud config names no network (network:) for the load balancer to join")
		} else {
			a.Fail(AnnDisablePublicNetwork, "false: the cloud config names no network (network:) for the load balancer to be reached in")
		}
	}
	if !spec.Public && spec.NoPrivate && spec.Hostname == "" {
		a.Fail(AnnDisablePrivateIngress, "false while "+AnnDisablePublicNetwork+" is true and no "+AnnHostname+" is set (the load balancer would have no address to show)")
	}
	protocol := a.OneOf(AnnProtocol, "tcp", "tcp", "http", "https")
	proxy := a.Bool(AnnProxyProtocol, false)
	var certs []int64
	if typ := a.OneOf(AnnCertificateType, "uploaded", "uploaded", "managed"); typ == "managed" {
		a.Fail(AnnCertificateType, "uploaded (mooring does not make managed certificates)")
	}
	for _, s := range a.List(AnnCertificates) {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			a.Fail(AnnCertificates, "a comma-separated list of certificate IDs (mooring does not look certificates up by name)")
			break
		}
		certs = append(certs, id)
	}
	slices.Sort(certs)
	certs = slices.Compact(certs)
	switch {
	case protocol == "https" && len(certs) == 0:
		a.Fail(AnnProtocol, "tcp or http, or https with "+AnnCertificates)
	case protocol != "https" && len(certs) > 0:
		a.Fail(AnnCertificates, "unset unless "+AnnProtocol+" is https")
	}
	check := lbCheck{
		Protocol: a.OneOf(AnnHealthProtocol, "tcp", "tcp", "http", "https"),
		Port:     a.Int(AnnHealthPort, 0, 1, 65535),
		Interval: seconds(a, AnnHealthInterval, defaultHealthInterval),
		Timeout:  seconds(a, AnnHealthTimeout, defaultHealthTimeout),
		Retries:  a.Int(AnnHealthRetries, defaultHealthRetries, 0, 10),
	}
	if check.Protocol != "tcp" {
		check.Path = a.String(AnnHealthPath, "/")
		check.Domain = a.String(AnnHealthDomain, "")
		check.StatusCodes = a.List(AnnHealthStatusCodes)
		if len(check.StatusCodes) == 0 {
			check.StatusCodes = []string{"2??", "3??"}
		}
		check.TLS = a.Bool(AnnHealthTLS, false)
		if !strings.HasPrefix(check.Path, "/") {
			a.Fail(AnnHealthPath, "a path beginning with /")
		}
	} else {
		a.Known(AnnHealthPath, AnnHealthDomain, AnnHealthStatusCodes, AnnHealthTLS)
	}
	// externalTrafficPolicy Local: kube-proxy's health check node port
	// answers on the nodes with a ready endpoint, unless an annotation
	// says otherwise.
	if path, port, ok := loadbalancer.HealthCheckNodePort(svc); ok && !a.Has(AnnHealthPort) && !a.Has(AnnHealthProtocol) {
		check.Protocol, check.Port, check.Path = "http", int(port), path
		check.StatusCodes = []string{"2??"}
	}
	if err := a.Err(); err != nil {
		return lbSpec{}, err
	}
	ports, err := loadbalancer.Ports(svc, v1.ProtocolTCP)
	if err != nil {
		return lbSpec{}, err
	}
	// Hetzner's load balancers take every client: a Service that allows
	// only some is refused, not opened to all.
	if ranges, err := loadbalancer.SourceRanges(svc); err != nil {
		return lbSpec{}, err
	} else if ranges != nil {
		return lbSpec{}, fmt.Errorf("service %s/%s: loadBalancerSourceRanges %v: Hetzner's load balancers do not filter clients by address (filter on the nodes, or allow 0.0.0.0/0)",
			svc.Namespace, svc.Name, ranges)
	}
	for _, p := range ports {
		c := check
		c.Port = cmp.Or(c.Port, int(p.NodePort))
		c.StatusCodes = slices.Clone(c.StatusCodes)
		spec.Services = append(spec.Services, lbService{Protocol: protocol, ListenPort: int(p.Port), Destination: int(p.NodePort),
			Proxy: proxy, Certificates: slices.Clone(certs), Check: c})
	}
	for _, t := range loadbalancer.Targets(nodes) {
		id, err := ParseProviderID(t.ProviderID)
		if err != nil {
			// Not a Cloud server (a Robot server, a Node of another
			// provider): not a target, as with hcloud-cloud-controller-manager.
			continue
		}
		spec.Targets = append(spec.Targets, lbTarget{Server: id, Private: private})
		spec.Pick = append(spec.Pick, t.ProviderID)
	}
	slices.SortFunc(spec.Targets, func(x, y lbTarget) int { return cmp.Compare(x.Server, y.Server) })
	spec.Targets = slices.Compact(spec.Targets)
	return spec, nil
}

// seconds reads a duration annotation in whole seconds (the API's unit).
func seconds(a *loadbalancer.Annotations, name string, def time.Duration) int {
	d := a.Duration(name, def, time.Second, time.Hour)
	if d%time.Second != 0 {
		a.Fail(name, "whole seconds, such as 15s")
		return int(def / time.Second)
	}
	return int(d / time.Second)
}

// labelsFor are a load balancer's labels for o: those it has, mooring's
// owner labels and hcloud-cloud-controller-manager's service UID label.
func labelsFor(have map[string]string, o loadbalancer.Owner) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, ownerLabels.Labels(o))
	out[LabelServiceUID] = o.UID
	return out
}
