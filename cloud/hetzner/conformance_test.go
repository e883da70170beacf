package hetzner

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/hetzner/agentid"
	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Hetzner Cloud's provider keeps the kit's promises (cloud/cloudtest/conformance).
// Its machines join with join tickets (Run's Tickets): the approver
// over its record of the instance a ticket names. A project's server
// names are unique.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend{Name: ProviderName, UniqueNames: true, Zones: true,
		LoadBalancer: true, LBAnnotationPrefixes: []string{AnnotationPrefix}, Routes: true,
		BadProviderIDs: []string{"hcloud://", "hcloud://0", "hcloud://-1", "hcloud://007", "hcloud://bm-42", "hrobot://42",
			"hcloud://42/x", "hcloud:// 42", "hcloud://99999999999999999999"},
		Config: func(t *testing.T, b conformance.Bed) string {
			return fmt.Sprintf("clusterID: %s\ntokenFile: %s\nendpoint: %s\n", testCluster, b.(*bed).tokenFile, b.(*bed).hz.Endpoint())
		},
		New: func(t *testing.T, o conformance.Options) conformance.Bed {
			// The library's retries (of a 429) a millisecond apart, not seconds.
			quick := hcloud.WithRetryOpts(hcloud.RetryOpts{BackoffFunc: hcloud.ConstantBackoff(time.Millisecond), MaxRetries: maxRetries})
			// Actions polled a millisecond apart, not half a second.
			poll := hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(time.Millisecond)})
			// Routes are the configured network's (Options.Routes).
			var routed func(*Config)
			if o.Routes {
				routed = func(c *Config) { c.Network = NetworkRef{ID: hetznertest.DefaultNetworkID} }
			}
			w := newWorld(t, hetznertest.Options{PageLimit: o.PageSize}, routed, quick, poll)
			if o.Routes {
				w.hz.PutNetwork(hetznertest.Network{ID: hetznertest.DefaultNetworkID, Name: "k8s-net"})
			}
			// An outage hangs up every call; a refused token and a spent
			// budget are the API's own answers (401 unauthorized, 429
			// rate_limit_exceeded) to every list and get (the token is read
			// once, at New).
			return &bed{world: w, Endpoint: conformance.Endpoint{Cloud: w.cloud, Counter: &w.hz.Counter, Faults: &w.hz.Faults, List: []string{"list"}, Get: []string{"get"},
				Own: map[conformance.Failure]func(testing.TB) func(){conformance.Outage: conformance.Switch(w.hz.SetDown)},
				Codes: map[conformance.Failure]string{conformance.Unauthorized: string(hcloud.ErrorCodeUnauthorized),
					conformance.Throttled: string(hcloud.ErrorCodeRateLimitExceeded), conformance.GetFails: string(hcloud.ErrorCodeServiceError)},
				Statuses: map[view.State]string{view.StateStopped: string(hcloud.ServerStatusOff),
					view.StatePending: string(hcloud.ServerStatusInitializing), view.StateTerminated: string(hcloud.ServerStatusDeleting)},
				SetStatus: func(m conformance.Made, status string) error { return w.hz.SetStatus(int64(m.IntID(t)), status) },
				LB:        lbCalls, Route: routeCalls}}
		},
	})
}

// bed is the conformance suite's view of a world.
type bed struct {
	*world
	conformance.Endpoint

	mu      sync.Mutex
	servers map[string]string // the made servers' ids by their network addresses
}

func (b *bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	srv := b.hz.Put(hetznertest.Server{Name: s.Name, Labels: map[string]string{DefaultClusterLabel: s.Cluster(testCluster, "c2")}, Created: s.Created,
		PublicIPv4:  s.Addr("127.0.86"),
		PrivateNets: []hetznertest.PrivateNet{{Network: hetznertest.DefaultNetworkID, IP: s.Addr("127.0.85")}}})
	b.mu.Lock()
	if b.servers == nil {
		b.servers = map[string]string{}
	}
	b.servers[srv.PrivateNets[0].IP] = fmt.Sprint(srv.ID)
	b.mu.Unlock()
	return conformance.Made{Spec: s, ProviderID: agentid.ProviderID(srv.ID), ID: fmt.Sprint(srv.ID),
		NodeName: agentid.NodeName(srv.Name), InternalIP: srv.PrivateNets[0].IP}
}

func (b *bed) Delete(t testing.TB, m conformance.Made) { b.hz.Delete(int64(m.IntID(t))) }

func (b *bed) BeforePage(f func(page int)) { b.hz.OnList(f) }
