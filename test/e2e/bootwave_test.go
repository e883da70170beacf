package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// A boot wave of nodes sharing one bootstrap token while the cloud's API
// fails: the approver's flood guard used to deny every join beyond the
// 10th TooManyPendingRequests, and the agents stopped for good. Now the
// excess waits its turn, and every join is approved once the cloud answers.
func TestBootWaveDuringCloudOutage(t *testing.T) {
	const nodes, perRequester = 24, 4
	approverBin := harness.BuildBinary(t, "csrapprover/cmd/mooring-csr-approver")
	cloudBin := harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud")
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	lc := harness.StartLocalCloud(t, c, cloudBin)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var metadata []string
	for i := range nodes {
		in, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: fmt.Sprintf("wave-%02d", i), Cluster: e2eCluster})
		if err != nil {
			t.Fatal(err)
		}
		metadata = append(metadata, in.MetadataURL)
	}
	// The cloud's list fails (the approver's only cloud call); the
	// instances' metadata services still answer, as they do on real clouds
	// when the control API is down.
	if err := lc.Client.SetFaults(ctx, api.Faults{Operations: map[string]api.OperationFault{"ListInstances": {ErrorRate: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := lc.Client.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	// The joins share one bootstrap token, each claiming its own machine:
	// the token's share for attested joins holds them back.
	harness.StartApprover(t, c, approverBin, lc, e2eCluster, fmt.Sprintf("--max-pending-attested-per-requester=%d", perRequester))
	names := make([]string, nodes)
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for i := range nodes {
		wg.Go(func() {
			j, err := harness.Join(ctx, c, fmt.Sprintf("wave-%02d", i), metadata[i])
			if err != nil {
				errs <- err
				return
			}
			names[i] = j.Name
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	time.Sleep(15 * time.Second)
	for _, name := range names {
		csr, err := c.Client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(csr.Status.Conditions) != 0 {
			t.Fatalf("%s decided during the outage: %+v", name, csr.Status.Conditions)
		}
	}
	st, err := lc.Client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Faulted == 0 {
		t.Fatal("no cloud call failed: the outage did not happen")
	}
	t.Logf("outage: %d cloud calls failed by the fault, %d ListInstances calls in 15 s for %d waiting joins", st.Faulted, st.Calls["ListInstances"], nodes)
	if err := lc.Client.ClearFaults(ctx); err != nil {
		t.Fatal(err)
	}
	recovered := time.Now()
	for _, name := range names {
		csr, err := harness.WaitForDecision(ctx, c.Client, name)
		if err != nil {
			t.Fatal(err)
		}
		if cond := harness.Condition(csr, certificatesv1.CertificateApproved); cond == nil {
			t.Fatalf("%s: %+v, want approved", name, csr.Status.Conditions)
		}
	}
	t.Logf("all %d joins approved %.1fs after the cloud recovered, none denied", nodes, time.Since(recovered).Seconds())
}
