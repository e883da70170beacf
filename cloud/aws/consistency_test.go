package aws

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/csrapprover"
)

// advance moves a test clock on by d.
func (c *clock) advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// A join whose instance EC2 does not show yet (eventual consistency right
// after launch) is retried, not denied as not the cluster's, and approved
// once EC2 shows it; evidence older than NewInstanceWindow of an instance
// still unseen is judged as before.
func TestJoinOfInstanceNotYetVisible(t *testing.T) {
	clk := &clock{t: time.Now()}
	e := newEnvWith(t, awstest.Options{Now: clk.Now, NewInstanceDelay: 2 * time.Minute})
	w := newJoinWorldOn(t, e, func(*Config, *awstest.Cloud) {})
	in := w.node("127.0.0.61", joinRole, joinRole)
	csr := w.joinCSR(in)
	ctx := context.Background()

	for i := range 2 {
		d, err := w.decider().Decide(ctx, csr)
		var nyv *NotYetVisibleError
		if !errors.As(err, &nyv) || nyv.ID != in.ID {
			t.Fatalf("decision %d while EC2 does not show the instance: %+v, %v; want a NotYetVisibleError to retry", i, d, err)
		}
	}
	clk.advance(2 * time.Minute)
	w.decide("once EC2 shows the instance", csr, csrapprover.ReasonApproved)

	// The gate itself: the miss is believed once the evidence is older
	// than the window (the approver then denies as before).
	e.aws.SetNewInstanceDelay(time.Hour)
	never := w.node("127.0.0.63", joinRole, joinRole)
	binding := nodeidtest.NewBinding(t)
	data := w.evidence(never, binding).Data
	v := w.cloud.EvidenceVerifiers()[0]
	if _, err := v.Verify(ctx, data, binding, time.Now()); err == nil {
		t.Fatal("an unseen instance's fresh evidence: verified")
	} else if _, rejected := cloud.IsRejection(err); rejected {
		t.Fatalf("an unseen instance's fresh evidence: rejected: %v", err)
	}
	att, err := v.Verify(ctx, data, binding, time.Now().Add(NewInstanceWindow))
	if err != nil || att.InstanceID != never.ID {
		t.Fatalf("evidence as old as the window: %+v, %v; want verified (the miss is the approver's to judge)", att, err)
	}
}

// The node lifecycle path: a Node whose instance EC2 has never shown, and
// first missed less than NewInstanceWindow ago, is not gone (an error, to
// ask again); once EC2 shows it, it exists. An id still missing after the
// window is gone, and an instance seen before and then missing is gone at
// once.
func TestNodeOfInstanceNotYetVisible(t *testing.T) {
	clk := &clock{t: time.Now()}
	e := newEnvWith(t, awstest.Options{Now: clk.Now, NewInstanceDelay: 2 * time.Minute})
	p := e.provider(t, time.Nanosecond)
	tracker := &clock{t: time.Now()}
	p.ids.now = tracker.Now
	ctx := context.Background()
	fresh := e.running(t, "127.0.0.71")
	n := node("fresh", agentid.ProviderID(fresh.Zone, fresh.ID))
	n.CreationTimestamp = metav1.Now()

	for i := range 2 {
		exists, err := p.InstanceExists(ctx, n)
		var nyv *NotYetVisibleError
		if !errors.As(err, &nyv) || errors.Is(err, view.ErrNotFound) {
			t.Fatalf("check %d while EC2 does not show the instance: exists %v, %v; want a NotYetVisibleError", i, exists, err)
		}
	}
	clk.advance(2 * time.Minute)
	if exists, err := p.InstanceExists(ctx, n); err != nil || !exists {
		t.Fatalf("once EC2 shows it: exists %v, %v", exists, err)
	}

	e.aws.SetNewInstanceDelay(time.Hour)
	never := e.running(t, "127.0.0.72")
	nn := node("never", agentid.ProviderID(never.Zone, never.ID))
	if exists, err := p.InstanceExists(ctx, nn); err == nil {
		t.Fatalf("first miss: exists %v and no error", exists)
	}
	tracker.advance(NewInstanceWindow - time.Second)
	if exists, err := p.InstanceExists(ctx, nn); err == nil {
		t.Fatalf("a second before the window is over: exists %v and no error", exists)
	}
	tracker.advance(time.Second)
	if exists, err := p.InstanceExists(ctx, nn); err != nil || exists {
		t.Fatalf("after the window: exists %v, %v; want gone", exists, err)
	}

	// Seen, then missing: gone at once.
	e.aws.Delete(fresh.ID)
	p.InstanceView().Invalidate()
	if exists, err := p.InstanceExists(ctx, n); err != nil || exists {
		t.Fatalf("a seen instance deleted: exists %v, %v; want gone", exists, err)
	}
}
