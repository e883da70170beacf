package linode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// AnnotationPrefix begins every Service annotation of Linode's CCM that
// mooring reads (docs/linode.md has the table).
const AnnotationPrefix = "service.beta.kubernetes.io/linode-loadbalancer-"

// The Service annotations mooring reads, named and meant as Linode's CCM
// names and means them.
const (
	AnnDefaultProtocol      = AnnotationPrefix + "default-protocol"
	AnnPortPrefix           = AnnotationPrefix + "port-"
	AnnDefaultProxyProtocol = AnnotationPrefix + "default-proxy-protocol"
	// AnnProxyProtocol is the deprecated name of default-proxy-protocol.
	AnnProxyProtocol       = AnnotationPrefix + "proxy-protocol"
	AnnDefaultAlgorithm    = AnnotationPrefix + "default-algorithm"
	AnnDefaultStickiness   = AnnotationPrefix + "default-stickiness"
	AnnCheckType           = AnnotationPrefix + "check-type"
	AnnCheckPath           = AnnotationPrefix + "check-path"
	AnnCheckBody           = AnnotationPrefix + "check-body"
	AnnCheckInterval       = AnnotationPrefix + "check-interval"
	AnnCheckTimeout        = AnnotationPrefix + "check-timeout"
	AnnCheckAttempts       = AnnotationPrefix + "check-attempts"
	AnnCheckPassive        = AnnotationPrefix + "check-passive"
	AnnUDPCheckPort        = AnnotationPrefix + "udp-check-port"
	AnnThrottle            = AnnotationPrefix + "throttle"
	AnnNodeBalancerID      = AnnotationPrefix + "nodebalancer-id"
	AnnNodeBalancerType    = AnnotationPrefix + "nodebalancer-type"
	AnnHostnameOnlyIngress = AnnotationPrefix + "hostname-only-ingress"
	AnnTags                = AnnotationPrefix + "tags"
	AnnPreserve            = AnnotationPrefix + "preserve"
	AnnFirewallID          = AnnotationPrefix + "firewall-id"
	// AnnNodePrivateIP on a Node names the address its NodeBalancer nodes
	// get, in place of its InternalIP (as Linode's CCM reads it).
	AnnNodePrivateIP = "node.k8s.linode.com/private-ip"
)

// unsupported are Linode's CCM's annotations that mooring refuses (an
// error naming it, nothing written), each with why.
var unsupported = map[string]string{
	"firewall-acl":         "Cloud Firewalls it makes itself (attach one of yours with firewall-id)",
	"reserved-ipv4":        "reserved IPv4 addresses",
	"retain-reserved-ipv4": "reserved IPv4 addresses",
	"enable-ipv6-ingress":  "IPv6 ingress",
	"enable-ipv6-backends": "IPv6 backends",
	"frontend-ipv4-range":  "VPC frontends",
	"frontend-ipv6-range":  "VPC frontends",
	"frontend-vpc-name":    "VPC frontends",
	"frontend-subnet-name": "VPC frontends",
	"frontend-subnet-id":   "VPC frontends",
}

// portAnnotation is a port-<n> annotation's JSON.
type portAnnotation struct {
	Protocol      string `json:"protocol"`
	ProxyProtocol string `json:"proxy-protocol"`
	Algorithm     string `json:"algorithm"`
	Stickiness    string `json:"stickiness"`
	UDPCheckPort  string `json:"udp-check-port"`
	TLSSecretName string `json:"tls-secret-name"`
}

var (
	tcpAlgorithms   = []string{"roundrobin", "leastconn", "source"}
	udpAlgorithms   = []string{"roundrobin", "leastconn", "ring_hash"}
	httpStickiness  = []string{"none", "table", "http_cookie"}
	udpStickiness   = []string{"none", "session", "source_ip"}
	proxyProtocols  = []string{"none", "v1", "v2"}
	checkTypes      = []string{"none", "connection", "http", "http_body"}
	nodeBalancerTyp = []string{"common", "premium", "premium_40gb"}
)

// desired reads svc's annotations and nodes into the spec; every problem
// is an error naming its annotation.
func (l *nodeBalancers) desired(ctx context.Context, svc *v1.Service, nodes []*v1.Node) (lbSpec, error) {
	var spec lbSpec
	ports, err := loadbalancer.Ports(svc, v1.ProtocolTCP, v1.ProtocolUDP)
	if err != nil {
		return spec, err
	}
	for i := 1; i < len(ports); i++ {
		if ports[i].Port == ports[i-1].Port {
			return spec, fmt.Errorf("service %s/%s: port %d is both %s and %s: a NodeBalancer has one config, of one protocol, per port",
				svc.Namespace, svc.Name, ports[i].Port, ports[i-1].Protocol, ports[i].Protocol)
		}
	}
	if ranges, err := loadbalancer.SourceRanges(svc); err != nil {
		return spec, err
	} else if ranges != nil {
		// Linode's CCM ignores them (the NodeBalancer stays open to all);
		// mooring refuses rather than serve wider than the Service asks.
		return spec, fmt.Errorf("service %s/%s: loadBalancerSourceRanges: a NodeBalancer filters clients only through a Cloud Firewall, and mooring does not make firewalls: remove them and attach a Cloud Firewall of yours that accepts those ranges with %s (docs/linode.md)",
			svc.Namespace, svc.Name, AnnFirewallID)
	}
	a := loadbalancer.Read(svc, AnnotationPrefix)
	for suffix, what := range unsupported {
		if a.Has(AnnotationPrefix + suffix) {
			a.Fail(AnnotationPrefix+suffix, "it unset: mooring does not support "+what+" on Linode yet (docs/linode.md)")
		}
	}
	if a.Has(AnnNodeBalancerID) {
		a.Int(AnnNodeBalancerID, 0, 1, 1<<31-1)
	}
	if a.Has(AnnFirewallID) {
		spec.Firewall = a.Int(AnnFirewallID, 0, 1, 1<<31-1)
	}
	spec.vpc = l.vpcChoice(a)
	spec.Throttle = a.Int(AnnThrottle, 0, 0, 20)
	spec.hostnameOnly = a.Bool(AnnHostnameOnlyIngress, false)
	spec.Preserve = a.Bool(AnnPreserve, false)
	spec.nbType = a.OneOf(AnnNodeBalancerType, "", nodeBalancerTyp...)
	for _, t := range a.List(AnnTags) {
		if len(t) < 3 || len(t) > 50 || strings.HasPrefix(t, tagPrefix+":") {
			a.Fail(AnnTags, "tags of 3-50 characters, none beginning "+tagPrefix+":")
			break
		}
		spec.Tags = append(spec.Tags, t)
	}
	slices.Sort(spec.Tags)
	spec.Tags = slices.Compact(spec.Tags)

	defProtocol := a.OneOf(AnnDefaultProtocol, "", "tcp", "udp", "http", "https")
	defProxy := a.OneOf(AnnDefaultProxyProtocol, "", proxyProtocols...)
	if old := a.OneOf(AnnProxyProtocol, "", proxyProtocols...); defProxy == "" {
		defProxy = old
	}
	defAlgorithm := a.OneOf(AnnDefaultAlgorithm, "", "roundrobin", "leastconn", "source", "ring_hash")
	defStickiness := a.OneOf(AnnDefaultStickiness, "", "none", "session", "table", "http_cookie", "source_ip")
	check := a.OneOf(AnnCheckType, "", checkTypes...)
	checkPath := a.String(AnnCheckPath, "/")
	if !strings.HasPrefix(checkPath, "/") {
		a.Fail(AnnCheckPath, "a path beginning with /")
	}
	checkBody := a.String(AnnCheckBody, "")
	if check == "http_body" && checkBody == "" {
		a.Fail(AnnCheckBody, "a text the body must hold, for check-type http_body")
	}
	interval := a.Int(AnnCheckInterval, 5, 2, 3600)
	timeout := a.Int(AnnCheckTimeout, 3, 1, 30)
	if timeout >= interval {
		a.Fail(AnnCheckTimeout, fmt.Sprintf("fewer seconds than check-interval (%d)", interval))
	}
	attempts := a.Int(AnnCheckAttempts, 2, 1, 30)
	passive := a.Bool(AnnCheckPassive, true)
	defUDPCheckPort := a.Int(AnnUDPCheckPort, 80, 1, 65535)

	for _, p := range ports {
		name := AnnPortPrefix + strconv.Itoa(int(p.Port))
		var pa portAnnotation
		if raw := a.String(name, ""); raw != "" {
			d := json.NewDecoder(bytes.NewReader([]byte(raw)))
			d.DisallowUnknownFields()
			if err := d.Decode(&pa); err != nil {
				a.Fail(name, "a JSON object of protocol, proxy-protocol, algorithm, stickiness, udp-check-port, tls-secret-name ("+err.Error()+")")
				continue
			}
		}
		ps := portSpec{Port: int(p.Port), Check: check, CheckInterval: interval, CheckTimeout: timeout, CheckAttempts: attempts,
			CheckPassive: passive}
		transport := "tcp"
		if p.Protocol == v1.ProtocolUDP {
			transport = "udp"
		}
		ps.Protocol = strings.ToLower(pa.Protocol)
		if ps.Protocol == "" && (transport == "tcp") == (defProtocol != "udp") {
			ps.Protocol = defProtocol
		}
		if ps.Protocol == "" {
			ps.Protocol = transport
		}
		switch {
		case !slices.Contains([]string{"tcp", "udp", "http", "https"}, ps.Protocol):
			a.Fail(name, "protocol tcp, udp, http or https")
			continue
		case ps.Protocol == "https" && pa.TLSSecretName == "":
			a.Fail(name, "a tls-secret-name for port "+strconv.Itoa(int(p.Port))+"'s protocol https (a Secret of type kubernetes.io/tls in the Service's namespace)")
			continue
		case ps.Protocol != "https" && pa.TLSSecretName != "":
			a.Fail(name, "protocol https with tls-secret-name (port "+strconv.Itoa(int(p.Port))+" is "+ps.Protocol+")")
			continue
		case pa.TLSSecretName != "" && len(validation.IsDNS1123Subdomain(pa.TLSSecretName)) > 0:
			a.Fail(name, "a tls-secret-name that is a Secret's name")
			continue
		case (ps.Protocol == "udp") != (transport == "udp"):
			a.Fail(nameOr(pa.Protocol, name, AnnDefaultProtocol), fmt.Sprintf("a protocol for the Service's %s port %d", p.Protocol, p.Port))
			continue
		}
		ps.ProxyProtocol = strings.ToLower(cmpOr(pa.ProxyProtocol, defProxy, "none"))
		if !slices.Contains(proxyProtocols, ps.ProxyProtocol) {
			a.Fail(name, "proxy-protocol none, v1 or v2")
		} else if ps.ProxyProtocol != "none" && ps.Protocol != "tcp" {
			a.Fail(nameOr(pa.ProxyProtocol, name, AnnDefaultProxyProtocol), "PROXY protocol only on tcp ports (port "+strconv.Itoa(int(p.Port))+" is "+ps.Protocol+")")
		}
		algorithms := tcpAlgorithms
		if ps.Protocol == "udp" {
			algorithms = udpAlgorithms
		}
		ps.Algorithm = strings.ToLower(cmpOr(pa.Algorithm, defAlgorithm, "roundrobin"))
		if !slices.Contains(algorithms, ps.Algorithm) {
			a.Fail(nameOr(pa.Algorithm, name, AnnDefaultAlgorithm), "an algorithm of "+ps.Protocol+": "+strings.Join(algorithms, ", "))
		}
		ps.secret = pa.TLSSecretName
		switch ps.Protocol {
		case "http", "https":
			ps.Stickiness = strings.ToLower(cmpOr(pa.Stickiness, defStickiness, "table"))
			if !slices.Contains(httpStickiness, ps.Stickiness) {
				a.Fail(nameOr(pa.Stickiness, name, AnnDefaultStickiness), "a stickiness of http: "+strings.Join(httpStickiness, ", "))
			}
		case "udp":
			ps.Stickiness = strings.ToLower(cmpOr(pa.Stickiness, defStickiness, "session"))
			if !slices.Contains(udpStickiness, ps.Stickiness) {
				a.Fail(nameOr(pa.Stickiness, name, AnnDefaultStickiness), "a stickiness of udp: "+strings.Join(udpStickiness, ", "))
			}
			ps.CheckPassive = false
			ps.UDPCheckPort = defUDPCheckPort
			if pa.UDPCheckPort != "" {
				n, err := strconv.Atoi(pa.UDPCheckPort)
				if err != nil || n < 1 || n > 65535 {
					a.Fail(name, "udp-check-port from 1 to 65535")
				}
				ps.UDPCheckPort = n
			}
		}
		if ps.Check == "" {
			ps.Check = "connection"
			if ps.Protocol == "udp" {
				ps.Check = "none"
			}
		}
		if ps.Check == "http" || ps.Check == "http_body" {
			ps.CheckPath = checkPath
		}
		if ps.Check == "http_body" {
			ps.CheckBody = checkBody
		}
		spec.Ports = append(spec.Ports, ps)
	}
	if err := a.Err(); err != nil {
		return spec, err
	}
	if err := l.targets(ctx, svc, nodes, &spec); err != nil {
		return spec, err
	}
	for i := range spec.Ports {
		if spec.Ports[i].secret != "" {
			if err := l.certificate(ctx, svc, &spec.Ports[i]); err != nil {
				return spec, err
			}
		}
	}
	return spec, nil
}

// nameOr names the annotation a value came from: the port's when it set
// it, else the default's.
func nameOr(fromPort, port, def string) string {
	if fromPort != "" {
		return port
	}
	return def
}

func cmpOr(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// targets adds the nodes to every port: each node's private address (its
// node.k8s.linode.com/private-ip annotation, else its InternalIP), or with
// VPC backends its Linode's address in the subnet, at the port's node
// port; and the region, from the nodes' region label.
func (l *nodeBalancers) targets(ctx context.Context, svc *v1.Service, nodes []*v1.Node, spec *lbSpec) error {
	type target struct{ ip, label string }
	var ts []target
	spec.labels = map[string]string{}
	var inVPC map[int]string
	if spec.vpc != nil {
		ctx, cancel := context.WithTimeout(ctx, l.c.cfg.RequestTimeout.Duration)
		defer cancel()
		ref, err := l.subnet(ctx, spec.vpc)
		if err != nil {
			return fmt.Errorf("service %s/%s: VPC backends: %w", svc.Namespace, svc.Name, err)
		}
		spec.subnet = ref.subnetID
		if len(nodes) > 0 {
			if inVPC, err = l.vpcAddresses(ctx, ref); err != nil {
				return fmt.Errorf("service %s/%s: VPC backends: %w", svc.Namespace, svc.Name, err)
			}
		}
	}
	for _, n := range nodes {
		ip := n.Annotations[AnnNodePrivateIP]
		if spec.vpc != nil {
			id, err := ParseProviderID(n.Spec.ProviderID)
			if ip = inVPC[id]; err != nil || ip == "" {
				return fmt.Errorf("service %s/%s: node %s (providerID %q) has no address in the NodeBalancer's VPC subnet %d",
					svc.Namespace, svc.Name, n.Name, n.Spec.ProviderID, spec.subnet)
			}
		}
		if ip == "" {
			for _, t := range loadbalancer.Targets([]*v1.Node{n}) {
				ip = t.InternalIP
			}
		}
		if ip == "" {
			return fmt.Errorf("service %s/%s: node %s has no InternalIP (nor %s annotation): a NodeBalancer reaches nodes at their private addresses",
				svc.Namespace, svc.Name, n.Name, AnnNodePrivateIP)
		}
		ts = append(ts, target{ip: ip, label: nodeLabel(n.Name)})
		if r := n.Labels[v1.LabelTopologyRegion]; r != "" && spec.region == "" {
			spec.region = r
		}
		if n.Spec.ProviderID != "" {
			spec.providerIDs = append(spec.providerIDs, n.Spec.ProviderID)
		}
	}
	for i := range spec.Ports {
		p := &spec.Ports[i]
		var np int32
		for _, sp := range svc.Spec.Ports {
			if int(sp.Port) == p.Port {
				np = sp.NodePort
			}
		}
		for _, t := range ts {
			addr := t.ip + ":" + strconv.Itoa(int(np))
			p.Nodes = append(p.Nodes, addr)
			spec.labels[addr] = t.label
		}
		slices.Sort(p.Nodes)
		p.Nodes = slices.Compact(p.Nodes)
	}
	return nil
}

// nodeLabel is a NodeBalancer node's label for a Node: 3-32 characters
// (as Linode's CCM makes it: "node-" before a shorter name, a longer one
// cut), ending in a letter or digit.
func nodeLabel(name string) string {
	for len(name) < 3 {
		name = "node-" + name
	}
	if len(name) > 32 {
		name = name[:32]
	}
	return strings.TrimRight(name, "-_.")
}
