package azure

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/azure/agentid"
	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
)

// A Service's share of the cluster's load balancer, read from its
// annotations (cloud-provider-azure's names) and written as its frontend
// IP configuration, rules, probes, public IP and security rules.

// AnnotationPrefix starts cloud-provider-azure's Service annotations; one
// under it that mooring does not read is refused by name.
const AnnotationPrefix = "service.beta.kubernetes.io/azure-"

// The annotations read (cloud-provider-azure's).
const (
	AnnotationInternal           = AnnotationPrefix + "load-balancer-internal"
	AnnotationInternalSubnet     = AnnotationPrefix + "load-balancer-internal-subnet"
	AnnotationPIPName            = AnnotationPrefix + "pip-name"
	AnnotationResourceGroup      = AnnotationPrefix + "load-balancer-resource-group"
	AnnotationProbeProtocol      = AnnotationPrefix + "load-balancer-health-probe-protocol"
	AnnotationProbeRequestPath   = AnnotationPrefix + "load-balancer-health-probe-request-path"
	AnnotationProbeInterval      = AnnotationPrefix + "load-balancer-health-probe-interval"
	AnnotationProbeNumOfProbe    = AnnotationPrefix + "load-balancer-health-probe-num-of-probe"
	AnnotationIdleTimeout        = AnnotationPrefix + "load-balancer-tcp-idle-timeout"
	AnnotationDisableFloatingIP  = AnnotationPrefix + "disable-load-balancer-floating-ip"
	annotationSharedSecurityRule = AnnotationPrefix + "shared-securityrule"
)

// Probe defaults, cloud-provider-azure's (and Azure's).
const (
	defaultProbeInterval = 5
	defaultProbeCount    = 2
)

// lbSpec is a Service's share of a load balancer in normal form; Held
// reads the same from what Azure holds, so that their fingerprints
// compare.
type lbSpec struct {
	// Internal: a frontend on Subnet (a subnet of the config's virtual
	// network) of the internal load balancer; else a frontend on public IP
	// PIP (in PIPGroup, lower case) of the public one.
	Internal bool   `json:"internal"`
	Subnet   string `json:"subnet,omitempty"`
	PIP      string `json:"pip,omitempty"`
	PIPGroup string `json:"pipGroup,omitempty"`
	// Rules are "<Tcp|Udp>/<port>/<node port>/<probe>", sorted, where
	// probe is "<Tcp|Http|Https>:<port>:<path>:<interval>:<count>".
	Rules []string `json:"rules"`
	// Idle is the TCP idle timeout in minutes (0: Azure's default, 4).
	Idle int `json:"idle,omitempty"`
	// Ranges are the sources the security rules allow, sorted ("Internet"
	// for every one); nil when the config names no security group.
	Ranges []string `json:"ranges,omitempty"`
	// Members are the backend pool's NIC IP configurations (lower-case
	// ids), sorted.
	Members []string `json:"members"`
}

// frontendName is cloud-provider-azure's name of svc's frontend IP
// configuration: the Service's default load balancer name ("a" and its
// UID without dashes, 32 characters), with "-<subnet>" for an internal
// one on a subnet named by annotation, cut to 75 characters (ending in a
// letter or "_").
func frontendName(svc *v1.Service, subnet string) string {
	base := defaultLBName(svc)
	if subnet == "" {
		return base
	}
	name := base + "-" + subnet
	if len(name) > 75 {
		name = name[:75]
		if last := rune(name[len(name)-1]); !('a' <= last && last <= 'z' || 'A' <= last && last <= 'Z' || last == '_') {
			name = name[:len(name)-1] + "_"
		}
	}
	return name
}

// defaultLBName is k8s.io/cloud-provider's DefaultLoadBalancerName, which
// cloud-provider-azure's names start with.
func defaultLBName(svc *v1.Service) string {
	name := "a" + strings.ReplaceAll(string(svc.UID), "-", "")
	if len(name) > 32 {
		name = name[:32]
	}
	return name
}

// desired reads svc and nodes into a spec.
func (l *lbCloud) desired(ctx context.Context, svc *v1.Service, nodes []*v1.Node) (lbSpec, error) {
	cfg := l.c.cfg
	a := loadbalancer.Read(svc, AnnotationPrefix)
	var s lbSpec
	s.Internal = a.Bool(AnnotationInternal, false)
	subnet := a.String(AnnotationInternalSubnet, "")
	if subnet != "" && !networkNameRE.MatchString(subnet) {
		a.Fail(AnnotationInternalSubnet, "a subnet name")
	}
	pipName := a.String(AnnotationPIPName, "")
	if pipName != "" && !networkNameRE.MatchString(pipName) {
		a.Fail(AnnotationPIPName, "a public IP name (1-80 letters, digits, _ . -)")
	}
	pipGroup := a.String(AnnotationResourceGroup, "")
	if pipGroup != "" && !resourceGroupRE.MatchString(pipGroup) {
		a.Fail(AnnotationResourceGroup, "a resource group name")
	}
	if s.Internal {
		if subnet == "" {
			subnet = cfg.SubnetName
		}
		if subnet == "" {
			a.Fail(AnnotationInternal, "a subnet: the cloud config's vnetName and subnetName, or the "+AnnotationInternalSubnet+" annotation")
		}
		if cfg.VnetName == "" && subnet != "" {
			a.Fail(AnnotationInternalSubnet, "the cloud config's vnetName (the subnet's virtual network)")
		}
		if pipName != "" {
			a.Fail(AnnotationPIPName, "no public IP on an internal load balancer")
		}
		s.Subnet = subnet
	} else {
		if a.Has(AnnotationInternalSubnet) {
			a.Fail(AnnotationInternalSubnet, AnnotationInternal+": true as well")
		}
		if pipName == "" {
			pipName = cfg.LoadBalancerName + "-" + defaultLBName(svc)
		}
		s.PIP, s.PIPGroup = pipName, strings.ToLower(orGroup(pipGroup, cfg.lbGroup()))
	}
	probeProto := a.OneOf(AnnotationProbeProtocol, "Tcp", "Tcp", "Http", "Https")
	path := a.String(AnnotationProbeRequestPath, "/")
	if probeProto == "Tcp" && a.Has(AnnotationProbeRequestPath) {
		a.Fail(AnnotationProbeRequestPath, AnnotationProbeProtocol+": Http or Https as well")
	}
	if !strings.HasPrefix(path, "/") {
		a.Fail(AnnotationProbeRequestPath, "a path starting with /")
	}
	interval := a.Int(AnnotationProbeInterval, defaultProbeInterval, 5, 2147483646)
	count := a.Int(AnnotationProbeNumOfProbe, defaultProbeCount, 2, 2147483646)
	if interval*count >= 2147483647 {
		a.Fail(AnnotationProbeNumOfProbe, "an interval times number of probes under 2^31")
	}
	s.Idle = a.Int(AnnotationIdleTimeout, 0, 4, 100)
	if s.Idle == 4 {
		s.Idle = 0 // Azure's default, as a rule without the annotation holds it
	}
	// Floating IP (direct server return) is not written: rules forward to
	// the node ports.
	if a.Has(AnnotationDisableFloatingIP) && !a.Bool(AnnotationDisableFloatingIP, true) {
		a.Fail(AnnotationDisableFloatingIP, "true: mooring writes rules without floating IP (to the node ports) only")
	}
	a.Bool(annotationSharedSecurityRule, false) // one rule per port is written either way
	ports, err := loadbalancer.Ports(svc, v1.ProtocolTCP, v1.ProtocolUDP)
	if err := a.Err(); err != nil {
		return s, err
	}
	if err != nil {
		return s, err
	}
	hcPath, hcPort, local := loadbalancer.HealthCheckNodePort(svc)
	for _, p := range ports {
		probe := fmt.Sprintf("%s:%d:%s:%d:%d", probeProto, p.NodePort, path, interval, count)
		if probeProto == "Tcp" {
			probe = fmt.Sprintf("Tcp:%d::%d:%d", p.NodePort, interval, count)
		}
		if local {
			// kube-proxy's health check of the node's endpoints, as
			// cloud-provider-azure probes a Local Service.
			probe = fmt.Sprintf("Http:%d:%s:%d:%d", hcPort, hcPath, interval, count)
		}
		proto := map[v1.Protocol]string{v1.ProtocolTCP: "Tcp", v1.ProtocolUDP: "Udp"}[p.Protocol]
		if proto == "Udp" && !local {
			// As cloud-provider-azure: no probe of a UDP node port (a TCP
			// probe there would find nothing listening); every member
			// gets the traffic.
			probe = ""
		}
		s.Rules = append(s.Rules, fmt.Sprintf("%s/%d/%d/%s", proto, p.Port, p.NodePort, probe))
	}
	slices.Sort(s.Rules)
	if !slices.ContainsFunc(s.Rules, func(r string) bool { return strings.HasPrefix(r, "Tcp/") }) {
		s.Idle = 0 // only TCP rules have an idle timeout
	}
	if cfg.SecurityGroupName != "" {
		ranges, err := loadbalancer.SourceRanges(svc)
		if err != nil {
			return s, err
		}
		if len(ranges) == 0 {
			ranges = []string{"Internet"}
			if s.Internal {
				ranges = []string{"*"}
			}
		}
		s.Ranges = ranges
	}
	if s.Members, err = l.members(ctx, nodes); err != nil {
		return s, err
	}
	return s, nil
}

// members are the nodes' NIC IP configurations: each node's VM's primary
// NIC's primary IP configuration, lower case, sorted.
func (l *lbCloud) members(ctx context.Context, nodes []*v1.Node) ([]string, error) {
	var vms []string
	for _, t := range loadbalancer.Targets(nodes) {
		if t.ProviderID == "" {
			continue // not initialized yet: its VM is not known
		}
		r, err := agentid.ParseProviderID(t.ProviderID)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", t.Node, err)
		}
		if r.ScaleSet != "" {
			return nil, fmt.Errorf("node %s is a VM of scale set %s: scale-set VMs join a backend pool through their scale set's model, which mooring does not write (docs/azure.md)", t.Node, r.ScaleSet)
		}
		vms = append(vms, strings.ToLower(r.ID()))
	}
	if len(vms) == 0 {
		return []string{}, nil
	}
	idx, err := l.nics(ctx, vms)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, vm := range vms {
		if cfg, ok := idx.byVM[vm]; ok {
			out = append(out, cfg)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
