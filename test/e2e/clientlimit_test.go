package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/internal/clientlimit"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestClientLimitFollowsAPF: a real kube-apiserver names the FlowSchema of
// every request while it runs API Priority and Fairness, and names none with
// --enable-priority-and-fairness=false, so mooring's clients run without a
// client-side limit on the first and keep the default one on the second.
// (That mooring-ccm then runs unlimited: TestNodeInitPromptAfterCloudOutage
// reads mooring_apiserver_client_qps_limit -1 from its /metrics.)
func TestClientLimitFollowsAPF(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, apf := range []bool{true, false} {
		opts := testbed.Options{}
		if !apf {
			opts.APIServerArgs = []string{"--enable-priority-and-fairness=false"}
		}
		c := testbed.Start(t, opts)
		fs, err := clientlimit.Probe(ctx, c.AdminConfig)
		if err != nil {
			t.Fatal(err)
		}
		if (fs != "") != apf {
			t.Errorf("APF %v: the apiserver named FlowSchema %q", apf, fs)
		}
		d := clientlimit.Decide(ctx, c.AdminConfig, false, 500, 1000)
		if want := map[bool]float32{true: clientlimit.Unlimited, false: 500}[apf]; d.QPS != want {
			t.Errorf("APF %v: decided %v QPS (%s), want %v", apf, d.QPS, d.Reason, want)
		}
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}
