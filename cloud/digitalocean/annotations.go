package digitalocean

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// The Service annotations of DigitalOcean's CCM that mooring reads, with
// the same names and meanings (docs/digitalocean.md has the table).
const (
	// AnnotationLoadBalancerID is the id of the Service's load balancer,
	// which DigitalOcean's CCM writes on the Service; mooring finds the
	// load balancer by it.
	AnnotationLoadBalancerID = "kubernetes.digitalocean.com/load-balancer-id"

	// AnnotationPrefix is the prefix of the load balancer annotations; one
	// under it (or under AnnotationPrefixGA) that mooring does not know is
	// an error.
	AnnotationPrefix   = "service.beta.kubernetes.io/do-loadbalancer-"
	AnnotationPrefixGA = "service.kubernetes.io/do-loadbalancer-"

	AnnotationName                   = AnnotationPrefix + "name"
	AnnotationProtocol               = AnnotationPrefix + "protocol"
	AnnotationHTTPPorts              = AnnotationPrefix + "http-ports"
	AnnotationTLSPorts               = AnnotationPrefix + "tls-ports"
	AnnotationHTTP2Ports             = AnnotationPrefix + "http2-ports"
	AnnotationHTTP3Port              = AnnotationPrefix + "http3-port"
	AnnotationCertificateID          = AnnotationPrefix + "certificate-id"
	AnnotationTLSPassthrough         = AnnotationPrefix + "tls-passthrough"
	AnnotationRedirectHTTPToHTTPS    = AnnotationPrefix + "redirect-http-to-https"
	AnnotationEnableProxyProtocol    = AnnotationPrefix + "enable-proxy-protocol"
	AnnotationEnableBackendKeepalive = AnnotationPrefix + "enable-backend-keepalive"
	AnnotationDisableLetsEncryptDNS  = AnnotationPrefix + "disable-lets-encrypt-dns-records"
	AnnotationSizeUnit               = AnnotationPrefix + "size-unit"
	AnnotationHTTPIdleTimeout        = AnnotationPrefix + "http-idle-timeout-seconds"
	AnnotationAllowRules             = AnnotationPrefix + "allow-rules"
	AnnotationDenyRules              = AnnotationPrefix + "deny-rules"
	AnnotationStickySessionsType     = AnnotationPrefix + "sticky-sessions-type"
	AnnotationStickyCookieName       = AnnotationPrefix + "sticky-sessions-cookie-name"
	AnnotationStickyCookieTTL        = AnnotationPrefix + "sticky-sessions-cookie-ttl"
	AnnotationAlgorithm              = AnnotationPrefix + "algorithm"
	AnnotationType                   = AnnotationPrefix + "type"
	AnnotationNetwork                = AnnotationPrefix + "network"
	// AnnotationHostname makes the Service's status the hostname alone (no
	// IP), as DigitalOcean's CCM does: traffic from inside the cluster then
	// goes through the load balancer (the workaround for PROXY protocol
	// before ipMode).
	AnnotationHostname = AnnotationPrefix + "hostname"

	AnnotationOverrideHealthCheck  = AnnotationPrefix + "override-health-check"
	AnnotationHealthCheckPath      = AnnotationPrefix + "healthcheck-path"
	AnnotationHealthCheckPort      = AnnotationPrefix + "healthcheck-port"
	AnnotationHealthCheckProtocol  = AnnotationPrefix + "healthcheck-protocol"
	AnnotationHealthCheckInterval  = AnnotationPrefix + "healthcheck-check-interval-seconds"
	AnnotationHealthCheckTimeout   = AnnotationPrefix + "healthcheck-response-timeout-seconds"
	AnnotationHealthCheckUnhealthy = AnnotationPrefix + "healthcheck-unhealthy-threshold"
	AnnotationHealthCheckHealthy   = AnnotationPrefix + "healthcheck-healthy-threshold"
)

// kubeProxyHealthPort is kube-proxy's healthz port, which DigitalOcean's
// CCM checks for Services of externalTrafficPolicy Cluster.
const kubeProxyHealthPort = 10256

// regionLabel is the Node label of its droplet's region (the node
// controller sets it).
const regionLabel = "topology.kubernetes.io/region"

// lbName is the name DigitalOcean's CCM gives svc's load balancer: its
// name annotation, else Kubernetes' default name.
func lbName(svc *v1.Service) string {
	if n := strings.TrimSpace(svc.Annotations[AnnotationName]); n != "" {
		return n
	}
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// desired is the load balancer svc and nodes call for, as DigitalOcean's
// CCM builds it from the same annotations; every problem is reported at
// once, each naming its annotation or field.
func desired(svc *v1.Service, nodes []*v1.Node) (LBSpec, error) {
	a := loadbalancer.Read(svc, AnnotationPrefix, AnnotationPrefixGA)
	a.Known(AnnotationAlgorithm) // deprecated: the API ignores it
	var errs []string
	failf := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }

	if n := a.String(AnnotationName, ""); n != "" && !lbNamePattern.MatchString(n) {
		a.Fail(AnnotationName, "1-255 letters, digits, dots and dashes, starting with a letter or digit")
	}
	hostname := strings.ToLower(a.String(AnnotationHostname, ""))
	if hostname != "" && len(validation.IsDNS1123Subdomain(hostname)) > 0 {
		a.Fail(AnnotationHostname, "a DNS name")
	}
	if t := a.String(AnnotationType, "REGIONAL"); t != "REGIONAL" {
		a.Fail(AnnotationType, "REGIONAL (mooring does not make REGIONAL_NETWORK or GLOBAL load balancers)")
	}
	if n := a.String(AnnotationNetwork, "EXTERNAL"); n != "EXTERNAL" {
		a.Fail(AnnotationNetwork, "EXTERNAL (mooring does not make INTERNAL load balancers)")
	}
	ports, err := loadbalancer.Ports(svc, v1.ProtocolTCP, v1.ProtocolUDP)
	if err != nil {
		errs = append(errs, err.Error())
	}
	spec := LBSpec{
		SizeUnit:              a.Int(AnnotationSizeUnit, 1, 1, 100),
		Redirect:              a.Bool(AnnotationRedirectHTTPToHTTPS, false),
		ProxyProtocol:         a.Bool(AnnotationEnableProxyProtocol, false),
		BackendKeepalive:      a.Bool(AnnotationEnableBackendKeepalive, false),
		DisableLetsEncryptDNS: a.Bool(AnnotationDisableLetsEncryptDNS, false),
		IdleTimeout:           a.Int(AnnotationHTTPIdleTimeout, 60, 30, 600),
		Sticky:                LBSticky{Type: a.OneOf(AnnotationStickySessionsType, "none", "none", "cookies")},
		Hostname:              hostname,
	}
	if spec.Sticky.Type == "cookies" {
		spec.Sticky.CookieName = a.String(AnnotationStickyCookieName, "")
		spec.Sticky.CookieTTL = a.Int(AnnotationStickyCookieTTL, 0, 1, 1<<31-1)
		if spec.Sticky.CookieName == "" || spec.Sticky.CookieTTL == 0 {
			failf("sticky sessions of type cookies need %s and %s", AnnotationStickyCookieName, AnnotationStickyCookieTTL)
		}
	} else {
		a.Known(AnnotationStickyCookieName, AnnotationStickyCookieTTL)
	}

	// Forwarding rules: each port's protocol from the default and the
	// port lists; TLS ends at the load balancer with a certificate, or
	// passes through.
	servicePorts := map[int32]loadbalancer.Port{}
	for _, p := range ports {
		servicePorts[p.Port] = p
	}
	listed := func(name string) []int32 {
		ps := a.Ports(name)
		for _, p := range ps {
			if _, ok := servicePorts[p]; !ok && len(ports) > 0 {
				failf("annotation %s: port %d is not a port of the Service", name, p)
			}
		}
		return ps
	}
	def := a.OneOf(AnnotationProtocol, "tcp", "tcp", "http", "https", "http2", "http3")
	if def == "http3" {
		a.Fail(AnnotationProtocol, "tcp, http, https or http2 (http3 serves one port: name it in "+AnnotationHTTP3Port+")")
	}
	httpPorts, tlsPorts, http2Ports := listed(AnnotationHTTPPorts), listed(AnnotationTLSPorts), listed(AnnotationHTTP2Ports)
	for _, p := range httpPorts {
		if slices.Contains(tlsPorts, p) || slices.Contains(http2Ports, p) {
			failf("port %d is in more than one of %s*-ports", p, AnnotationPrefix)
		}
	}
	for _, p := range tlsPorts {
		if slices.Contains(http2Ports, p) {
			failf("port %d is in more than one of %s*-ports", p, AnnotationPrefix)
		}
	}
	cert := a.String(AnnotationCertificateID, "")
	passthrough := a.Bool(AnnotationTLSPassthrough, false)
	if (cert != "" || passthrough) && len(tlsPorts) == 0 && !slices.Contains(http2Ports, 443) {
		tlsPorts = []int32{443}
	}
	for _, p := range ports {
		proto, from := def, AnnotationProtocol
		switch {
		case p.Protocol == v1.ProtocolUDP:
			proto = "udp"
		case slices.Contains(httpPorts, p.Port):
			proto = "http"
		case slices.Contains(tlsPorts, p.Port):
			proto, from = "https", AnnotationTLSPorts
		case slices.Contains(http2Ports, p.Port):
			proto, from = "http2", AnnotationHTTP2Ports
		}
		r := LBRule{EntryProtocol: proto, EntryPort: int(p.Port), TargetProtocol: proto, TargetPort: int(p.NodePort)}
		if proto == "https" || proto == "http2" {
			switch {
			case cert == "" && !passthrough:
				failf("port %d is %s (%s): set %s or %s", p.Port, proto, from, AnnotationCertificateID, AnnotationTLSPassthrough)
			case cert != "" && passthrough:
				failf("set %s or %s, not both", AnnotationCertificateID, AnnotationTLSPassthrough)
			case passthrough:
				r.TLSPassthrough = true
			default:
				r.CertificateID, r.TargetProtocol = cert, "http"
			}
		}
		spec.Rules = append(spec.Rules, r)
	}
	if a.Has(AnnotationHTTP3Port) {
		h3 := a.Int(AnnotationHTTP3Port, 0, 1, 65535)
		p, ok := servicePorts[int32(h3)]
		switch {
		case h3 == 0:
		case !ok:
			failf("annotation %s: port %d is not a port of the Service", AnnotationHTTP3Port, h3)
		case passthrough:
			failf("annotation %s: http3 cannot pass TLS through (%s)", AnnotationHTTP3Port, AnnotationTLSPassthrough)
		case cert == "":
			failf("annotation %s: http3 needs %s", AnnotationHTTP3Port, AnnotationCertificateID)
		default:
			spec.Rules = append(spec.Rules, LBRule{EntryProtocol: "http3", EntryPort: h3, TargetProtocol: "http",
				TargetPort: int(p.NodePort), CertificateID: cert})
		}
	}

	// Health check: kube-proxy's healthz (policy Cluster) or the Service's
	// health check node port (Local), unless overridden.
	path, port, local := loadbalancer.HealthCheckNodePort(svc)
	if !local {
		path, port = "/healthz", kubeProxyHealthPort
	}
	spec.Health = LBHealth{Protocol: "http", Port: int(port), Path: path,
		Interval:  a.Int(AnnotationHealthCheckInterval, 3, 3, 300),
		Timeout:   a.Int(AnnotationHealthCheckTimeout, 5, 3, 300),
		Unhealthy: a.Int(AnnotationHealthCheckUnhealthy, 3, 2, 10),
		Healthy:   a.Int(AnnotationHealthCheckHealthy, 5, 2, 10)}
	hcPath := a.String(AnnotationHealthCheckPath, "")
	if hcPath != "" && !strings.HasPrefix(hcPath, "/") {
		a.Fail(AnnotationHealthCheckPath, "a path starting with /")
	}
	hcProto := a.OneOf(AnnotationHealthCheckProtocol, "", "tcp", "http", "https")
	hcPorts := a.Ports(AnnotationHealthCheckPort)
	if len(hcPorts) > 1 {
		a.Fail(AnnotationHealthCheckPort, "one port")
	}
	if a.Has(AnnotationOverrideHealthCheck) {
		spec.Health.Protocol = cmp.Or(hcProto, "tcp")
		if hcProto == "" && hcPath != "" {
			spec.Health.Protocol = "http"
		}
		spec.Health.Path = ""
		if spec.Health.Protocol != "tcp" {
			spec.Health.Path = cmp.Or(hcPath, "/")
		}
		spec.Health.Port = 0
		if len(hcPorts) == 1 {
			switch p, ok := servicePorts[hcPorts[0]]; {
			case !ok:
				failf("annotation %s: port %d is not a port of the Service", AnnotationHealthCheckPort, hcPorts[0])
			case p.Protocol == v1.ProtocolUDP:
				failf("annotation %s: port %d is UDP; health checks are TCP", AnnotationHealthCheckPort, hcPorts[0])
			default:
				spec.Health.Port = int(p.NodePort)
			}
		} else {
			for _, p := range ports {
				if p.Protocol == v1.ProtocolTCP {
					spec.Health.Port = int(p.NodePort)
					break
				}
			}
			if spec.Health.Port == 0 && len(ports) > 0 {
				failf("the Service has no TCP port to health-check (set %s)", AnnotationHealthCheckPort)
			}
		}
		spec.Health.ProxyProtocol = spec.ProxyProtocol
	}

	// Firewall: loadBalancerSourceRanges, else the allow rules; the deny
	// rules.
	ranges, err := loadbalancer.SourceRanges(svc)
	if err != nil {
		errs = append(errs, err.Error())
	}
	for _, r := range ranges {
		spec.Allow = append(spec.Allow, "cidr:"+r)
	}
	allow, deny := a.List(AnnotationAllowRules), a.List(AnnotationDenyRules)
	for name, rules := range map[string][]string{AnnotationAllowRules: allow, AnnotationDenyRules: deny} {
		for _, r := range rules {
			if !validFirewallRule(r) {
				a.Fail(name, "comma-separated rules ip:<address> or cidr:<prefix>")
				break
			}
		}
	}
	if len(ranges) == 0 {
		spec.Allow = allow
	}
	spec.Deny = deny

	// Targets: the nodes' droplets, and their region.
	for _, t := range loadbalancer.Targets(nodes) {
		id, err := ParseProviderID(t.ProviderID)
		if err != nil {
			klog.V(2).InfoS("Leaving a node out of a load balancer: its providerID is not a droplet's", "node", t.Node,
				"providerID", t.ProviderID, "service", klog.KObj(svc))
			continue
		}
		spec.Droplets = append(spec.Droplets, id)
	}
	for _, n := range nodes {
		if r := n.Labels[regionLabel]; r != "" && spec.Region == "" {
			spec.Region = r
		}
	}
	if err := a.Err(); err != nil {
		errs = append([]string{err.Error()}, errs...)
	} else if len(errs) > 0 && !strings.HasPrefix(errs[0], "service ") {
		errs[0] = fmt.Sprintf("service %s/%s: %s", svc.Namespace, svc.Name, errs[0])
	}
	if len(errs) > 0 {
		return LBSpec{}, errors.New(strings.Join(errs, "; "))
	}
	return spec.normal(), nil
}

func validFirewallRule(r string) bool {
	kind, val, _ := strings.Cut(r, ":")
	switch kind {
	case "ip":
		_, err := netip.ParseAddr(val)
		return err == nil
	case "cidr":
		_, err := netip.ParsePrefix(val)
		return err == nil
	}
	return false
}
