package linode

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/kit/loadbalancer"
	"github.com/mooring-dev/mooring/cloud/linode/agentid"
	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Linode's provider keeps the kit's promises (cloud/cloudtest/conformance).
// Its pages hold 25 Linodes at least (MinPageSize): the suite's page
// subtests make enough for several.
// Its machines join with join tickets (Run's Tickets): the approver
// over its record of the instance a ticket names.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend{Name: ProviderName,
		LoadBalancer: true, LBAnnotationPrefixes: []string{AnnotationPrefix},
		BadProviderIDs: []string{"linode://", "linode://0", "linode://012", "linode://-5", "linode://+5", "linode://5x",
			"linode:///5", "linode://99999999999999999999"},
		New: func(t *testing.T, o conformance.Options) conformance.Bed {
			size := 0
			if o.PageSize > 0 {
				size = max(o.PageSize, MinPageSize)
			}
			w := newWorld(t, linodetest.Options{}, func(c *Config) { c.PageSize = size })
			return &bed{world: w, size: size, Endpoint: conformance.Endpoint{Cloud: w.cloud, Counter: &w.ln.Counter, Faults: &w.ln.Faults,
				List: []string{linodetest.MethodList}, Get: []string{linodetest.MethodGet},
				Own: map[conformance.Failure]func(testing.TB) func(){conformance.Outage: conformance.Switch(w.ln.SetOutage),
					conformance.Unauthorized: conformance.WrongSecret(w.tokenFile, w.ln.Token())},
				Statuses: map[view.State]string{view.StateStopped: linodetest.StatusOffline, view.StatePending: linodetest.StatusProvisioning,
					view.StateTerminated: linodetest.StatusDeleting},
				SetStatus: func(m conformance.Made, status string) error { return w.ln.SetStatus(m.IntID(t), status) },
				LB: map[conformance.Call][]string{conformance.LBList: {linodetest.MethodLBList}, conformance.LBGet: {linodetest.MethodLBGet},
					conformance.LBCreate: {linodetest.MethodLBCreate}, conformance.LBUpdate: {linodetest.MethodLBUpdate},
					conformance.LBDelete: {linodetest.MethodLBDelete}}}}
		},
		Config: func(t *testing.T, b conformance.Bed) string {
			// The token from the environment, as the tests' worlds read it from a file.
			w := b.(*bed).world
			t.Setenv("MOORING_TEST_LINODE_TOKEN", w.ln.Token())
			return fmt.Sprintf("clusterID: %s\ntokenEnv: MOORING_TEST_LINODE_TOKEN\napiEndpoint: %s\n", testCluster, w.ln.Endpoint())
		},
	})
}

// bed is the conformance suite's view of a world: an outage answers 503
// to every call; the token file is read at every request.
type bed struct {
	*world
	conformance.Endpoint
	size int
}

func (b *bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	in := b.ln.Put(linodetest.Instance{ID: s.FirstID(), Label: s.Name, PublicIP: s.Addr("127.0.98"), PrivateIP: s.Addr("127.0.97"),
		Tags: []string{s.Cluster(testTag, "k8s:c2")}, Created: s.Created})
	return conformance.Made{Spec: s, ProviderID: agentid.ProviderID(in.ID), ID: strconv.Itoa(in.ID),
		NodeName: agentid.NodeName(in.Label), InternalIP: in.PrivateIP}
}

func (b *bed) Delete(t testing.TB, m conformance.Made) { b.ln.Delete(m.IntID(t)) }

func (b *bed) PageSize() int { return b.size }

func (b *bed) BeforePage(f func(page int)) { b.ln.BeforePage(f) }

// LBs are the endpoint's NodeBalancers: a target is a node address of
// any of its configs.
func (b *bed) LBs(t testing.TB) []conformance.LB {
	var out []conformance.LB
	for _, n := range b.ln.NodeBalancers() {
		l := conformance.LB{ID: strconv.Itoa(n.ID), Name: n.Label, IP: n.IPv4, Hostname: n.Hostname}
		ips := map[string]bool{}
		for _, cf := range n.Configs {
			l.Ports = append(l.Ports, int32(cf.Port))
			for _, nd := range cf.Nodes {
				ips[strings.Split(nd.Address, ":")[0]] = true
			}
		}
		slices.Sort(l.Ports)
		l.Targets = len(ips)
		out = append(out, l)
	}
	return out
}

func lbOf(n linodetest.NodeBalancer) conformance.LB {
	l := conformance.LB{ID: strconv.Itoa(n.ID), Name: n.Label, IP: n.IPv4, Hostname: n.Hostname}
	for _, cf := range n.Configs {
		l.Ports = append(l.Ports, int32(cf.Port))
		l.Targets = max(l.Targets, len(cf.Nodes))
	}
	slices.Sort(l.Ports)
	return l
}

// ccmNodeBalancer is the NodeBalancer Linode's CCM makes for svc: a label
// of "ccm-" and 12 hex digits of the clock, its cluster name's tag
// ("kubernetes" by default), a tcp config per port with a connection
// check, each node's private address at the node port.
func ccmNodeBalancer(svc *v1.Service, nodes []*v1.Node) linodetest.NodeBalancer {
	stamp := strconv.FormatInt(time.Now().UnixNano(), 16)
	n := linodetest.NodeBalancer{Label: "ccm-" + stamp[len(stamp)-12:], Tags: []string{"kubernetes"}}
	for _, p := range svc.Spec.Ports {
		cf := linodetest.NBConfig{Port: int(p.Port), Protocol: "tcp", Algorithm: "roundrobin", Check: "connection",
			CheckInterval: 5, CheckTimeout: 3, CheckAttempts: 2, CheckPassive: true}
		for _, node := range nodes {
			for _, a := range node.Status.Addresses {
				if a.Type == v1.NodeInternalIP {
					cf.Nodes = append(cf.Nodes, linodetest.NBNode{Address: fmt.Sprintf("%s:%d", a.Address, p.NodePort),
						Label: nodeLabel(node.Name), Weight: 100, Mode: "accept"})
				}
			}
		}
		n.Configs = append(n.Configs, cf)
	}
	return n
}

// MadeByCloudCCM makes the NodeBalancer Linode's CCM makes, and writes
// its address in svc's status as Linode's CCM does: how it finds it again.
func (b *bed) MadeByCloudCCM(t testing.TB, svc *v1.Service, nodes []*v1.Node) conformance.LB {
	n := b.ln.PutNodeBalancer(ccmNodeBalancer(svc, nodes))
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: n.IPv4, Hostname: n.Hostname}}
	return lbOf(n)
}

func (b *bed) MadeForOtherCluster(t testing.TB, svc *v1.Service) conformance.LB {
	n := ccmNodeBalancer(svc, nil)
	n.Label = (&nodeBalancers{c: b.cloud}).Name(svc)
	n.Tags = ownerTags.Tags(loadbalancer.Owner{Cluster: "other", UID: "5f7c9c4e-0000-4000-8000-000000000001"})
	return lbOf(b.ln.PutNodeBalancer(n))
}

// Tamper drops the last node of the NodeBalancer's first config.
func (b *bed) Tamper(t testing.TB, l conformance.LB) {
	id, _ := strconv.Atoi(l.ID)
	if err := b.ln.ChangeNodeBalancer(id, func(n *linodetest.NodeBalancer) {
		cf := &n.Configs[0]
		cf.Nodes = cf.Nodes[:len(cf.Nodes)-1]
	}); err != nil {
		t.Fatal(err)
	}
}

// TargetAddress is the Linode's private address (127.0.97.x here).
func (b *bed) TargetAddress(m conformance.Made) string { return m.InternalIP }

// Settle: a NodeBalancer is ready at its creation.
func (b *bed) Settle(testing.TB) {}
