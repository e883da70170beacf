package agentid

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// testRole is the node role of the test worlds' instances.
const testRole = "mooring-node"

// t0 is the test worlds' start time.
var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// clock is a settable clock shared by a test cloud and its agents.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// world is one AWS stand-in with one node instance and its agent (the
// approver's side of the evidence is tested in package aws).
type world struct {
	t     *testing.T
	clk   *clock
	cloud *awstest.Cloud
	in    awstest.Instance
	agent *NodeIdentity
}

func newWorld(t *testing.T, opts awstest.Options) *world {
	t.Helper()
	w := &world{t: t, clk: &clock{t: t0}}
	opts.Now = w.clk.Now
	w.cloud = awstest.NewStarted(t, opts)
	w.in = w.cloud.Put(awstest.Instance{PrivateIP: "127.0.0.10", Role: testRole, Tags: map[string]string{"Name": "node-a"}, MetadataTags: true})
	w.agent = w.agentOf(w.in.ID, map[string]string{SettingSTSEndpoint: w.cloud.Endpoint()})
	return w
}

// agentOf is the node agent of an instance, on the world's clock.
func (w *world) agentOf(id string, settings map[string]string) *NodeIdentity {
	w.t.Helper()
	url, err := w.cloud.IMDS(id)
	if err != nil {
		w.t.Fatal(err)
	}
	a, err := NewNodeIdentity(nodeid.Config{MetadataURL: url, Settings: settings}, WithClock(w.clk.Now))
	if err != nil {
		w.t.Fatal(err)
	}
	return a
}

// evidenceOf is an agent's evidence for binding.
func (w *world) evidenceOf(a *NodeIdentity, binding string) []byte {
	w.t.Helper()
	b, err := a.Evidence(context.Background(), binding)
	if err != nil {
		w.t.Fatal(err)
	}
	if b.Type != EvidenceType {
		w.t.Fatalf("evidence type %q", b.Type)
	}
	return b.Data
}
