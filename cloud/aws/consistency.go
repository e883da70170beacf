package aws

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// NewInstanceWindow is how long an instance EC2 does not show may still be
// a new one rather than a gone one. EC2's API is eventually consistent
// (EC2 API reference, "Eventual consistency in the Amazon EC2 API"): right
// after RunInstances, DescribeInstances of the new id may answer
// InvalidInstanceID.NotFound, and filtered lists may leave the instance
// out, for a while that AWS bounds only as "typically within seconds" to
// minutes. Within the window such a miss is retried, never believed: no
// Node is deleted for it and no join is denied for it. After the window a
// miss is an answer again.
//
// What "may be new" means:
//   - a join: its evidence was signed less than the window ago (the agent
//     signs on the instance, so the instance existed then; an instance STS
//     vouches for that EC2 never shows is denied once the window is over,
//     well within the signature's 15 minutes);
//   - a Node's instance: EC2 has never described the id to this process,
//     and its first InvalidInstanceID.NotFound for the id was less than
//     the window ago. An id once seen and then absent is gone at once.
const NewInstanceWindow = 5 * time.Minute

// maxTrackedIDs bounds the ids the Cloud remembers as seen or absent; past
// it they are forgotten, which only makes misses wait out the window again.
const maxTrackedIDs = 1 << 18

// idTracker remembers which instance ids EC2 has described, and when it
// first said it had none of an id never described.
type idTracker struct {
	now func() time.Time

	mu          sync.Mutex
	seen        map[string]struct{}
	firstAbsent map[string]time.Time
}

func newIDTracker(now func() time.Time) *idTracker {
	return &idTracker{now: now, seen: map[string]struct{}{}, firstAbsent: map[string]time.Time{}}
}

// described records ids EC2 has just described.
func (t *idTracker) described(ids ...string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.seen)+len(ids) > maxTrackedIDs {
		clear(t.seen)
	}
	for _, id := range ids {
		t.seen[id] = struct{}{}
		delete(t.firstAbsent, id)
	}
}

// absent records that EC2 does not know id and says until when the miss
// may be a new instance's: zero when it may not (the id was seen before,
// or its first miss is over NewInstanceWindow old).
func (t *idTracker) absent(id string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.seen[id]; ok {
		return time.Time{}
	}
	now := t.now()
	first, ok := t.firstAbsent[id]
	if !ok {
		if len(t.firstAbsent) >= maxTrackedIDs {
			clear(t.firstAbsent)
		}
		first = now
		t.firstAbsent[id] = first
	}
	if until := first.Add(NewInstanceWindow); now.Before(until) {
		return until
	}
	return time.Time{}
}

// NotYetVisibleError is a miss that may be EC2's eventual consistency: an
// instance too new to be shown. It is not a view.ErrNotFound: callers
// retry.
type NotYetVisibleError struct {
	ID    string
	Until time.Time // when a miss becomes an answer
	Why   string
}

func (e *NotYetVisibleError) Error() string {
	return fmt.Sprintf("EC2 does not show instance %s yet, which may be new (%s); not believing the miss before %s (eventual consistency)",
		e.ID, e.Why, e.Until.UTC().Format(time.RFC3339))
}

// freshInstanceGate is the Cloud's evidence verifier: the STS verifier,
// and then, for evidence signed less than NewInstanceWindow ago, the
// instance must be in the view, else the join is retried rather than
// denied as not the cluster's (the approver's answer to a miss). Any error
// is transient: never a verdict, never an approval.
type freshInstanceGate struct {
	*Verifier
	view   *view.View
	maxAge time.Duration
	// confirm asks EC2 for one id (Cloud.describeByID).
	confirm func(ctx context.Context, id string) (view.Instance, error)
}

// Verify is the STS verifier's, then the gate.
func (g freshInstanceGate) Verify(ctx context.Context, data []byte, binding string, now time.Time) (cloud.Attestation, error) {
	att, err := g.Verifier.Verify(ctx, data, binding, now)
	if err != nil {
		return att, err
	}
	until := att.IssuedAt.Add(NewInstanceWindow)
	if !now.Before(until) {
		return att, nil
	}
	_, err = g.view.ByID(ctx, att.InstanceID, g.maxAge)
	if errors.Is(err, view.ErrUnconfirmed) {
		// The view's list is older than the question and too young to
		// list again: ask EC2 for the id itself.
		_, err = g.confirm(ctx, att.InstanceID)
	}
	var nyv *NotYetVisibleError
	switch {
	case err == nil, errors.As(err, new(*kit.ForeignError)):
		// Shown (another cluster's instance is the approver's to deny).
		return att, nil
	case errors.Is(err, view.ErrNotFound), errors.As(err, &nyv):
		klog.V(2).InfoS("Instance of fresh evidence not shown by EC2 yet; retrying the join", "instance", att.InstanceID, "until", until)
		return cloud.Attestation{}, &NotYetVisibleError{ID: att.InstanceID, Until: until, Why: "its evidence was signed at " + att.IssuedAt.UTC().Format(time.RFC3339)}
	}
	return cloud.Attestation{}, fmt.Errorf("instance %s of fresh evidence: %w", att.InstanceID, err)
}

var (
	_ cloud.EvidenceVerifier = freshInstanceGate{}
	_ cloud.InstanceChecker  = freshInstanceGate{}
)
