package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// The Service annotations of oci-cloud-controller-manager that mooring
// reads, with their names and meanings (docs/oci.md lists them, supported
// or not). An annotation under these prefixes that mooring does not know
// is an error.
const (
	AnnLBPrefix     = "service.beta.kubernetes.io/oci-load-balancer-"
	AnnOCIPrefix    = "oci.oraclecloud.com/"
	AnnNLBPrefix    = "oci-network-load-balancer.oraclecloud.com/"
	AnnType         = AnnOCIPrefix + "load-balancer-type"
	AnnPolicy       = AnnOCIPrefix + "loadbalancer-policy"
	AnnNSGs         = AnnOCIPrefix + "oci-network-security-groups"
	AnnIPMode       = AnnOCIPrefix + "ingress-ip-mode"
	AnnCompartment  = AnnOCIPrefix + "compartment-id"
	AnnFreeformTags = AnnOCIPrefix + "initial-freeform-tags-override"

	AnnLBInternal      = AnnLBPrefix + "internal"
	AnnLBShape         = AnnLBPrefix + "shape"
	AnnLBFlexMin       = AnnLBPrefix + "shape-flex-min"
	AnnLBFlexMax       = AnnLBPrefix + "shape-flex-max"
	AnnLBSubnet1       = AnnLBPrefix + "subnet1"
	AnnLBSubnet2       = AnnLBPrefix + "subnet2"
	AnnLBRetries       = AnnLBPrefix + "health-check-retries"
	AnnLBTimeout       = AnnLBPrefix + "health-check-timeout"
	AnnLBInterval      = AnnLBPrefix + "health-check-interval"
	AnnLBIdleTimeout   = AnnLBPrefix + "connection-idle-timeout"
	AnnLBProxyProtocol = AnnLBPrefix + "connection-proxy-protocol-version"
	AnnLBProtocol      = AnnLBPrefix + "backend-protocol"
	AnnLBSSLPorts      = AnnLBPrefix + "ssl-ports"
	AnnLBTLSSecret     = AnnLBPrefix + "tls-secret"

	AnnNLBInternal       = AnnNLBPrefix + "internal"
	AnnNLBSubnet         = AnnNLBPrefix + "subnet"
	AnnNLBNSGs           = AnnNLBPrefix + "oci-network-security-groups"
	AnnNLBFreeformTags   = AnnNLBPrefix + "initial-freeform-tags-override"
	AnnNLBRetries        = AnnNLBPrefix + "health-check-retries"
	AnnNLBTimeout        = AnnNLBPrefix + "health-check-timeout"
	AnnNLBInterval       = AnnNLBPrefix + "health-check-interval"
	AnnNLBPolicy         = AnnNLBPrefix + "backend-policy"
	AnnNLBPreserveSource = AnnNLBPrefix + "is-preserve-source"
	AnnNLBPPv2           = AnnNLBPrefix + "is-ppv2-enabled"
)

// Types of load balancer (AnnType).
const (
	TypeLB  = "lb"
	TypeNLB = "nlb"
)

// OCI's CCM's defaults.
const (
	healthPath      = "/healthz"
	healthPort      = 10256 // kube-proxy's
	defaultRetries  = 3
	defaultTimeout  = 3000
	defaultInterval = 10000
	defaultFlexMin  = 10
	defaultFlexMax  = 100
	maxFlexMbps     = 8000
	maxNSGs         = 5
)

// lbSpec is what a Service's load balancer is, in normal form. Fields
// tagged "-" are not compared: they count at creation only (the subnets,
// the compartment, internal: OCI cannot change them), or only for the
// Service's status.
type lbSpec struct {
	Type string
	// Shape (LB): flexible with FlexMin/FlexMax, or a fixed shape.
	Shape            string `json:",omitempty"`
	FlexMin, FlexMax int    `json:",omitempty"`
	NSGs             []string
	Listeners        []lbListener
	BackendSets      []lbBackendSet
	// Certificates (LB) are the names of the TLS Secrets' certificates.
	Certificates []string `json:",omitempty"`
	// Rules is the security rules' mode and a hash of their RuleSet, kept
	// in a freeform tag: a change of sources or mode is a change.
	Rules string

	Internal    bool     `json:"-"`
	Subnets     []string `json:"-"`
	Compartment string   `json:"-"`
	Proxy       bool     `json:"-"`
	tags        map[string]string
	attached    []string // every NSG a held one has
	rules       RuleSet
	certs       map[string]certKey
}

type lbListener struct {
	Name, Protocol, BackendSet string
	Port                       int
	Certificate                string `json:",omitempty"`
	IdleTimeout                int64  `json:",omitempty"`
	ProxyProtocol              int    `json:",omitempty"`
	PPv2                       bool   `json:",omitempty"`
}

type lbBackendSet struct {
	Name, Policy   string
	Check          lbCheck
	PreserveSource bool `json:",omitempty"`
	// Backends are ip:port, sorted.
	Backends []string
	// targets are the backends' instance OCIDs by ip:port (NLB).
	targets map[string]string
}

type lbCheck struct {
	Protocol, Path                                   string
	Port, ReturnCode, Retries, TimeoutMs, IntervalMs int
}

// certKey is a TLS Secret's certificate and key; behind a pointer-free
// map entry that no log prints.
type certKey struct{ cert, key, ca, passphrase string }

// lbType is the Service's load balancer type.
func lbType(svc *v1.Service) string {
	if strings.EqualFold(strings.TrimSpace(svc.Annotations[AnnType]), TypeNLB) {
		return TypeNLB
	}
	return TypeLB
}

// Desired is the load balancer svc and nodes call for.
func (l *lbCloud) Desired(ctx context.Context, svc *v1.Service, nodes []*v1.Node) (lbSpec, error) {
	a := loadbalancer.Read(svc, AnnLBPrefix, AnnOCIPrefix, AnnNLBPrefix)
	spec := lbSpec{Type: a.OneOf(AnnType, TypeLB, TypeLB, TypeNLB)}
	nlb := spec.Type == TypeNLB
	cfg := l.c.cfg.LoadBalancer
	// The other type's annotations, and the rule annotations read by
	// RuleModeOf and BackendNSGsOf, are known.
	a.Known(AnnotationRuleMode, AnnotationLBListMode, AnnotationNLBListMode, AnnotationBackendNSGs)
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	spec.Compartment = a.String(AnnCompartment, cfg.Compartment)
	if !slices.Contains(l.c.cfg.Compartments, spec.Compartment) {
		fail("annotation %s=%q: not one of the cloud config's compartments (those are listed)", AnnCompartment, spec.Compartment)
	}
	ports, err := loadbalancer.Ports(svc, v1.ProtocolTCP, v1.ProtocolUDP)
	if err != nil {
		return spec, err
	}
	if svc.Spec.SessionAffinity != "" && svc.Spec.SessionAffinity != v1.ServiceAffinityNone {
		fail("spec.sessionAffinity %s: OCI's load balancers have none (as OCI's CCM refuses it)", svc.Spec.SessionAffinity)
	}
	tagsAnn, nsgAnn, retriesAnn, timeoutAnn, intervalAnn := AnnFreeformTags, AnnNSGs, AnnLBRetries, AnnLBTimeout, AnnLBInterval
	minInterval := 1000
	if nlb {
		tagsAnn, nsgAnn, retriesAnn, timeoutAnn, intervalAnn = AnnNLBFreeformTags, AnnNLBNSGs, AnnNLBRetries, AnnNLBTimeout, AnnNLBInterval
		minInterval = 10000
		a.Known(AnnPolicy, AnnNSGs, AnnFreeformTags, AnnLBInternal, AnnLBShape, AnnLBFlexMin, AnnLBFlexMax, AnnLBSubnet1, AnnLBSubnet2,
			AnnLBRetries, AnnLBTimeout, AnnLBInterval, AnnLBIdleTimeout, AnnLBProxyProtocol, AnnLBProtocol, AnnLBSSLPorts, AnnLBTLSSecret)
	} else {
		a.Known(AnnNLBInternal, AnnNLBSubnet, AnnNLBNSGs, AnnNLBFreeformTags, AnnNLBRetries, AnnNLBTimeout, AnnNLBInterval, AnnNLBPolicy,
			AnnNLBPreserveSource, AnnNLBPPv2)
	}
	if v := a.String(tagsAnn, ""); v != "" {
		if err := json.Unmarshal([]byte(v), &spec.tags); err != nil {
			a.Fail(tagsAnn, "a JSON object of strings")
		}
	}
	for _, id := range a.List(nsgAnn) {
		if !validOCID(id, "networksecuritygroup") {
			a.Fail(nsgAnn, "NSG OCIDs, comma separated")
			break
		}
		if !slices.Contains(spec.NSGs, id) {
			spec.NSGs = append(spec.NSGs, id)
		}
	}
	slices.Sort(spec.NSGs)
	if len(spec.NSGs) > maxNSGs {
		a.Fail(nsgAnn, fmt.Sprintf("at most %d NSGs", maxNSGs))
	}
	check := lbCheck{Protocol: "HTTP", Path: healthPath, Port: healthPort, ReturnCode: 200,
		Retries: a.Int(retriesAnn, defaultRetries, 1, 10), TimeoutMs: a.Int(timeoutAnn, defaultTimeout, 1, 600000),
		IntervalMs: a.Int(intervalAnn, defaultInterval, minInterval, 1800000)}
	local := false
	if path, port, ok := loadbalancer.HealthCheckNodePort(svc); ok {
		check.Path, check.Port, local = path, int(port), true
	}
	switch v := strings.ToLower(a.String(AnnIPMode, "")); v {
	case "", "vip":
	case "proxy":
		spec.Proxy = true
	default:
		a.Fail(AnnIPMode, "proxy or vip")
	}
	policy, preserve := "", false
	if nlb {
		spec.Internal = a.Bool(AnnNLBInternal, false)
		spec.Subnets = []string{a.String(AnnNLBSubnet, cfg.Subnet1)}
		policy = a.OneOf(AnnNLBPolicy, "FIVE_TUPLE", "TWO_TUPLE", "THREE_TUPLE", "FIVE_TUPLE")
		preserve = local
		if a.Has(AnnNLBPreserveSource) {
			preserve = a.Bool(AnnNLBPreserveSource, local)
			if !local {
				fail("annotation %s cannot be set when externalTrafficPolicy is Cluster", AnnNLBPreserveSource)
			}
		}
	} else {
		spec.Internal = a.Bool(AnnLBInternal, false)
		s1, s2 := a.String(AnnLBSubnet1, cfg.Subnet1), a.String(AnnLBSubnet2, cfg.Subnet2)
		spec.Subnets = []string{s1}
		if s2 != "" && !spec.Internal {
			spec.Subnets = append(spec.Subnets, s2)
		}
		policy = a.OneOf(AnnPolicy, "ROUND_ROBIN", "ROUND_ROBIN", "LEAST_CONNECTIONS", "IP_HASH")
		switch shape := a.String(AnnLBShape, "flexible"); {
		case strings.EqualFold(shape, "flexible"):
			spec.Shape = "flexible"
			spec.FlexMin = a.Int(AnnLBFlexMin, defaultFlexMin, 10, maxFlexMbps)
			spec.FlexMax = a.Int(AnnLBFlexMax, max(defaultFlexMax, spec.FlexMin), spec.FlexMin, maxFlexMbps)
		case slices.Contains([]string{"10Mbps", "100Mbps", "400Mbps", "8000Mbps"}, shape):
			spec.Shape = shape
			if a.Has(AnnLBFlexMin) || a.Has(AnnLBFlexMax) {
				fail("annotations %s and %s are for shape flexible", AnnLBFlexMin, AnnLBFlexMax)
			}
		default:
			a.Fail(AnnLBShape, "flexible, 10Mbps, 100Mbps, 400Mbps or 8000Mbps")
		}
	}
	for _, s := range spec.Subnets {
		if s == "" {
			fail("no subnet for the load balancer: set %s (or %s for an NLB), or loadBalancer.subnet1 in the cloud config", AnnLBSubnet1, AnnNLBSubnet)
		} else if !validOCID(s, "subnet") {
			fail("subnet %q is not a subnet's OCID", s)
		}
	}
	// Listeners and backend sets per port, named as OCI's CCM names them.
	proto := "TCP"
	var idle int64
	proxyVersion := 0
	var sslPorts []int32
	secret := ""
	if !nlb {
		proto = a.OneOf(AnnLBProtocol, "TCP", "TCP", "HTTP")
		idle = int64(a.Int(AnnLBIdleTimeout, 0, 1, 7200))
		proxyVersion = a.Int(AnnLBProxyProtocol, 0, 1, 2)
		if proxyVersion != 0 && idle == 0 {
			idle = 300
			if proto == "HTTP" {
				idle = 60
			}
		}
		if proxyVersion != 0 {
			spec.Proxy = true
		}
		sslPorts = a.Ports(AnnLBSSLPorts)
		secret = a.String(AnnLBTLSSecret, "")
		if len(sslPorts) > 0 && secret == "" {
			fail("annotation %s needs %s (the Secret of the listeners' certificate)", AnnLBSSLPorts, AnnLBTLSSecret)
		}
	}
	ppv2 := nlb && strings.EqualFold(a.String(AnnNLBPPv2, ""), "true")
	byPort := map[int32][]loadbalancer.Port{}
	for _, p := range ports {
		if p.Protocol == v1.ProtocolUDP && !nlb {
			fail("port %d: OCI load balancers do not support UDP (set %s: nlb)", p.Port, AnnType)
		}
		byPort[p.Port] = append(byPort[p.Port], p)
	}
	targets := loadbalancer.Targets(nodes)
	for _, port := range slices.Sorted(maps.Keys(byPort)) {
		ps := byPort[port]
		setProto := string(ps[0].Protocol)
		if len(ps) > 1 {
			setProto = "TCP_AND_UDP"
			if ps[0].NodePort != ps[1].NodePort {
				fail("port %d: TCP and UDP on different node ports (%d, %d): an NLB's backend set has one", port, ps[0].NodePort, ps[1].NodePort)
			}
		}
		set := lbBackendSet{Name: fmt.Sprintf("%s-%d", setProto, port), Policy: policy, Check: check, PreserveSource: preserve,
			targets: map[string]string{}}
		for _, t := range targets {
			if t.Address() == "" {
				continue
			}
			be := fmt.Sprintf("%s:%d", t.Address(), ps[0].NodePort)
			set.Backends = append(set.Backends, be)
			if id, err := ParseProviderID(t.ProviderID); err == nil {
				set.targets[be] = id
			}
		}
		slices.Sort(set.Backends)
		spec.BackendSets = append(spec.BackendSets, set)
		lproto := setProto
		if !nlb {
			lproto = proto
		}
		ln := lbListener{Name: fmt.Sprintf("%s-%d", lproto, port), Protocol: lproto, BackendSet: set.Name, Port: int(port),
			IdleTimeout: idle, ProxyProtocol: proxyVersion, PPv2: ppv2}
		if slices.Contains(sslPorts, port) {
			ln.Certificate = secretName(secret)
			spec.Proxy = true
		}
		spec.Listeners = append(spec.Listeners, ln)
	}
	// Security rules: the mode and its inputs, as a RuleSet.
	mode, err := RuleModeOf(svc.Annotations, spec.Type)
	if err != nil {
		fail("%v", err)
	}
	backendNSGs, err := BackendNSGsOf(svc.Annotations)
	if err != nil {
		fail("%v", err)
	}
	sources, err := loadbalancer.SourceRanges(svc)
	if err != nil {
		return spec, err
	}
	if len(sources) == 0 {
		sources = []string{"0.0.0.0/0"}
	}
	rs := RuleSet{UID: string(svc.UID), Mode: mode, LBSubnets: spec.Subnets, NodeSubnets: cfg.NodeSubnets,
		SourceCIDRs: sources, HealthCheckPort: int32(check.Port), BackendNSGs: backendNSGs,
		Namespace: svc.Namespace, Name: svc.Name, Compartment: spec.Compartment, PreserveSource: preserve}
	for _, p := range ports {
		rs.Ports = append(rs.Ports, RulePort{Listener: p.Port, NodePort: p.NodePort, Protocol: string(p.Protocol)})
	}
	if mode == RuleModeAll && len(cfg.NodeSubnets) == 0 {
		fail("security rule mode All needs loadBalancer.nodeSubnets in the cloud config (the nodes' subnets); or set %s: None, SL-Frontend or NSG", AnnotationRuleMode)
	}
	if err := rs.ProtocolErr(); err != nil {
		fail("%v", err)
	}
	spec.rules = rs
	spec.Rules = rulesTag(rs)
	if err := a.Err(); err != nil {
		errs = append([]string{err.Error()}, errs...)
	}
	if len(errs) > 0 {
		if len(errs) == 1 && strings.HasPrefix(errs[0], "service ") {
			return spec, fmt.Errorf("%s", errs[0])
		}
		return spec, fmt.Errorf("service %s/%s: %s", svc.Namespace, svc.Name, strings.Join(errs, "; "))
	}
	if secret != "" && len(sslPorts) > 0 {
		ck, err := l.certificate(ctx, svc, secret)
		if err != nil {
			return spec, err
		}
		spec.certs = map[string]certKey{secretName(secret): ck}
		spec.Certificates = []string{secretName(secret)}
	}
	return spec, nil
}

// rulesTag is the RuleSet's mode and a short hash of what it says.
func rulesTag(rs RuleSet) string {
	data, _ := json.Marshal(struct {
		Mode                   string
		LBSubnets, NodeSubnets []string
		Sources                []string
		Ports                  []RulePort
		Health                 int32
		Backend                []string
		Preserve               bool
	}{rs.Mode, rs.LBSubnets, rs.NodeSubnets, rs.SourceCIDRs, rs.Ports, rs.HealthCheckPort, rs.BackendNSGs, rs.PreserveSource})
	sum := sha256.Sum256(data)
	return rs.Mode + "-" + hex.EncodeToString(sum[:6])
}

// secretName is the name part of a tls-secret annotation (namespace/name
// or name): the certificate's name, as OCI's CCM names it.
func secretName(ref string) string {
	if _, name, ok := strings.Cut(ref, "/"); ok {
		return name
	}
	return ref
}

func validOCID(s, kind string) bool {
	return strings.HasPrefix(s, "ocid1."+kind+".") && len(s) <= 255 && !strings.ContainsAny(s, " ,/")
}
