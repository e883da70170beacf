package provider

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/local/agentid"
	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/attest"
	"github.com/mooring-dev/mooring/cloud/local/localtest"
	"github.com/mooring-dev/mooring/cloud/local/server"
	"github.com/mooring-dev/mooring/cloud/view"
)

// The local cloud's provider keeps the kit's promises
// (cloud/cloudtest/conformance), with either instance lookup.
func TestConformance(t *testing.T) {
	for _, lookup := range []string{InstanceLookupView, InstanceLookupDirect} {
		t.Run(lookup, func(t *testing.T) {
			conformance.Run(t, conformance.Backend{
				Name:           agentid.Name,
				EveryNameANode: true, // the cloud takes only lower-case DNS-1123 labels
				BadProviderIDs: []string{"local://", "local:///i-1", "local://i-1/x"},
				Evidence:       []string{attest.Type},
				LoadBalancer:   true, Routes: true, LBAnnotationPrefixes: []string{annotationPrefix},
				New: func(t *testing.T, o conformance.Options) conformance.Bed { return newBed(t, lookup) },
				// No registry check: cloud/local registers this package's
				// provider, and cloud/all's tests build every backend by name.
			})
		})
	}
}

// bed is a local cloud in the test process whose clock the bed moves (to
// make an instance at a given time; to forget a terminated one), and a
// provider of it.
type bed struct {
	*env
	mu      sync.Mutex
	offset  time.Duration
	at      time.Time // when set, the clock stands there
	foreign int       // foreign routes added (AddForeignRoute)
}

func newBed(t *testing.T, lookup string) *bed {
	b := &bed{}
	lc := localtest.Start(t, func(c *server.Config) {
		c.BootDelay = 0
		c.Now = func() time.Time {
			b.mu.Lock()
			defer b.mu.Unlock()
			if !b.at.IsZero() {
				return b.at
			}
			return time.Now().Add(b.offset)
		}
	})
	cfg, err := ParseConfig(strings.NewReader(fmt.Sprintf(
		"endpoint: %s\ntokenFile: %s\ncluster: %s\nminRefreshInterval: 1ms\ninstanceLookup: %s\n",
		lc.URL, lc.TokenFile, cluster, lookup)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.env = &env{cloud: lc, provider: p}
	return b
}

func (b *bed) Provider() conformance.Provider { return b.provider }

func (b *bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	cl := cluster
	if s.Foreign {
		cl = "c2"
	}
	b.mu.Lock()
	b.at = s.Created
	b.mu.Unlock()
	in, err := b.cloud.Client.CreateInstance(context.Background(), api.CreateInstanceRequest{Name: s.Name, Cluster: cl})
	b.mu.Lock()
	b.at = time.Time{}
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	m := conformance.Made{Spec: s, ProviderID: agentid.ProviderID(in.ID), ID: in.ID, NodeName: strings.ToLower(in.Name)}
	for _, a := range in.Addresses {
		if a.Type == api.InternalIP {
			m.InternalIP = a.Address
		}
	}
	return m
}

func (b *bed) Delete(t testing.TB, m conformance.Made) {
	if _, err := b.cloud.Client.TerminateInstance(context.Background(), m.ID); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.offset += 2 * server.DefaultRetention
	now := time.Now().Add(b.offset)
	b.mu.Unlock()
	b.cloud.Server.CollectTerminated(now)
}

func (b *bed) SetState(t testing.TB, m conformance.Made, s view.State) bool {
	var err error
	switch s {
	case view.StateStopped:
		_, err = b.cloud.Client.StopInstance(context.Background(), m.ID)
	case view.StateTerminated:
		_, err = b.cloud.Client.TerminateInstance(context.Background(), m.ID)
	default:
		return false // with no boot delay, an instance is never pending
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func (b *bed) Fail(t testing.TB, f conformance.Failure) func() {
	ctx := context.Background()
	clear := func() {
		if err := b.cloud.Client.ClearFaults(ctx); err != nil {
			t.Fatal(err)
		}
	}
	switch f {
	case conformance.Outage:
		if err := b.cloud.Client.SetFaults(ctx, api.Faults{ErrorRate: 1}); err != nil {
			t.Fatal(err)
		}
		return clear
	case conformance.GetFails:
		ops := map[string]api.OperationFault{"GetInstance": {ErrorRate: 1}}
		if err := b.cloud.Client.SetFaults(ctx, api.Faults{Operations: ops}); err != nil {
			t.Fatal(err)
		}
		return clear
	case conformance.Throttled:
		ops := map[string]api.OperationFault{}
		for _, op := range []string{"ListInstances", "GetInstance", "ListLoadBalancers", "GetLoadBalancer", "EnsureLoadBalancer", "DeleteLoadBalancer",
			"ListRoutes", "GetRoute", "CreateRoute", "DeleteRoute"} {
			ops[op] = api.OperationFault{ErrorRate: 1, Status: 429}
		}
		if err := b.cloud.Client.SetFaults(ctx, api.Faults{Operations: ops}); err != nil {
			t.Fatal(err)
		}
		return clear
	}
	// Unauthorized: the provider reads its token once, at start.
	return nil
}

func (b *bed) Calls(c conformance.Call) int {
	// The test's own t is not at hand: a failed Stats call counts nothing.
	st, err := b.cloud.Client.Stats(context.Background())
	if err != nil {
		return -1
	}
	if c == conformance.LBCreate {
		return -1 // not told from updates: lbCalls
	}
	if op, ok := lbCalls[c]; ok {
		return int(st.Calls[op])
	}
	if op, ok := routeOps[c]; ok {
		return int(st.Calls[op])
	}
	if c == conformance.List {
		return int(st.Calls["ListInstances"])
	}
	return int(st.Calls["GetInstance"])
}
