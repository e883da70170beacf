package hetzner

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/hetzner/agentid"
	"github.com/mooring-dev/mooring/cloud/hetzner/hetznertest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Hetzner Cloud's provider keeps the kit's promises (cloud/cloudtest/conformance).
func TestConformance(t *testing.T) { conformance.RunInstances(t, backend()) }

// Its machines join with join tickets: the approver over its record of
// the instance a ticket names.
func TestTickets(t *testing.T) { conformance.RunTickets(t, backend()) }

func backend() conformance.Backend {
	return conformance.Backend{
		Name:        ProviderName,
		UniqueNames: true, // a project's server names are unique
		BadProviderIDs: []string{"hcloud://", "hcloud://0", "hcloud://-1", "hcloud://007", "hcloud://bm-42", "hrobot://42",
			"hcloud://42/x", "hcloud:// 42", "hcloud://99999999999999999999"},
		NameWithoutNode: "under_score",
		Zones:           true,
		New: func(t *testing.T, o conformance.Options) conformance.Bed {
			// The library's retries (of a 429) a millisecond apart, not seconds.
			quick := hcloud.WithRetryOpts(hcloud.RetryOpts{BackoffFunc: hcloud.ConstantBackoff(time.Millisecond), MaxRetries: maxRetries})
			return &bed{newWorld(t, hetznertest.Options{PageLimit: o.PageSize}, nil, quick)}
		},
		Config: func(t *testing.T, b conformance.Bed) string {
			w := b.(*bed).world
			return fmt.Sprintf("clusterID: %s\ntokenFile: %s\nendpoint: %s\n", testCluster, w.tokenFile, w.hz.Endpoint())
		},
	}
}

// bed is the conformance suite's view of a world.
type bed struct{ *world }

func (b *bed) Provider() conformance.Provider { return b.cloud }

func (b *bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	labels := map[string]string{DefaultClusterLabel: testCluster}
	if s.Foreign {
		labels = map[string]string{DefaultClusterLabel: "c2"}
	}
	srv := b.hz.Put(hetznertest.Server{Name: s.Name, Labels: labels, Created: s.Created,
		PublicIPv4:  fmt.Sprintf("127.0.86.%d", s.N),
		PrivateNets: []hetznertest.PrivateNet{{Network: hetznertest.DefaultNetworkID, IP: fmt.Sprintf("127.0.85.%d", s.N)}}})
	return conformance.Made{Spec: s, ProviderID: agentid.ProviderID(srv.ID), ID: fmt.Sprint(srv.ID),
		NodeName: agentid.NodeName(srv.Name), InternalIP: srv.PrivateNets[0].IP}
}

func (b *bed) id(t testing.TB, m conformance.Made) int64 {
	id, err := ParseProviderID(m.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (b *bed) Delete(t testing.TB, m conformance.Made) { b.hz.Delete(b.id(t, m)) }

func (b *bed) SetState(t testing.TB, m conformance.Made, s view.State) bool {
	status := map[view.State]hcloud.ServerStatus{view.StateStopped: hcloud.ServerStatusOff,
		view.StatePending: hcloud.ServerStatusInitializing, view.StateTerminated: hcloud.ServerStatusDeleting}[s]
	if err := b.hz.SetStatus(b.id(t, m), string(status)); err != nil {
		t.Fatal(err)
	}
	return true
}

// Fail: an outage hangs up every call; a refused token and a spent budget
// are the API's own answers (401 unauthorized, 429 rate_limit_exceeded)
// to every list and get (the token is read once, at New).
func (b *bed) Fail(t testing.TB, f conformance.Failure) func() {
	if f == conformance.Outage {
		b.hz.SetDown(true)
		return func() { b.hz.SetDown(false) }
	}
	methods := []string{"list", "get"}
	var (
		status int
		code   hcloud.ErrorCode
	)
	switch f {
	case conformance.Unauthorized:
		status, code = http.StatusUnauthorized, hcloud.ErrorCodeUnauthorized
	case conformance.Throttled:
		status, code = http.StatusTooManyRequests, hcloud.ErrorCodeRateLimitExceeded
	case conformance.GetFails:
		status, code, methods = http.StatusServiceUnavailable, hcloud.ErrorCodeServiceError, []string{"get"}
	default:
		return nil
	}
	for _, m := range methods {
		b.hz.Fail(m, 1<<20, status, string(code))
	}
	return func() { b.hz.ClearFaults("list"); b.hz.ClearFaults("get") }
}

func (b *bed) Calls(c conformance.Call) int {
	if c == conformance.List {
		return b.hz.Calls("list")
	}
	return b.hz.Calls("get")
}

func (b *bed) BeforePage(f func(page int)) { b.hz.OnList(f) }
