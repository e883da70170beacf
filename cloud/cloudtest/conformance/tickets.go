package conformance

import (
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/csrapprover/approvertest"
)

// RunTickets runs the join tickets' contract, for a backend whose machines
// join with join tickets (it has no evidence verifier): joins through the
// approver as mooring-csr-approver and mooring-ccm build it
// (csrapprover.NewFromCloud over the provider, --ticket-keys-file). What
// is asserted is the cloud's record of the instance a ticket names: made
// within the ticket's life, the cluster's, running, the only one of its
// name, the Node's own. The tickets themselves (forged, expired, spent,
// bound to another key) are the approver's adversarial suite's.
func RunTickets(t *testing.T, b Backend) {
	if len(b.Evidence) != 0 {
		t.Fatalf("%s verifies evidence of its own: its machines do not join with tickets", b.Name)
	}
	bed := b.New(t, Options{})
	a := approvertest.Start(t, bed.Provider())
	now := time.Now().UTC().Truncate(time.Second)
	ticket := map[string][]byte{}
	for _, n := range []string{"new-1", "old-1", "late-1", "foreign-1", "stopped-1", "twin-1", "victim-1"} {
		ticket[n] = a.Issue(n)
	}
	type join struct {
		node   string
		ticket []byte
		want   string
	}
	var joins []join
	add := func(s Spec, ticketOf, want string) Made {
		m := bed.Make(t, s)
		joins = append(joins, join{m.NodeName, ticket[ticketOf], want})
		return m
	}
	add(Spec{Name: "new-1", N: 1}, "new-1", csrapprover.ReasonApproved)
	// Made before its ticket was issued, or after it expired.
	add(Spec{Name: "old-1", N: 2, Created: now.Add(-time.Hour)}, "old-1", csrapprover.ReasonInstanceCreatedOutsideTicket)
	add(Spec{Name: "late-1", N: 3, Created: now.Add(2 * time.Hour)}, "late-1", csrapprover.ReasonInstanceCreatedOutsideTicket)
	// Another cluster's (or no cluster's) instance of the ticket's name.
	add(Spec{Name: "foreign-1", N: 4, Foreign: true}, "foreign-1", csrapprover.ReasonInstanceNotInCluster)
	// Not running.
	stopped := bed.Make(t, Spec{Name: "stopped-1", N: 5})
	if bed.SetState(t, stopped, view.StateStopped) {
		joins = append(joins, join{stopped.NodeName, ticket["stopped-1"], csrapprover.ReasonInstanceNotRunning})
	}
	// Two instances of the ticket's name, where the cloud allows that.
	if !b.UniqueNames {
		bed.Make(t, Spec{Name: "twin-1", N: 6})
		add(Spec{Name: "twin-1", N: 7}, "twin-1", csrapprover.ReasonInstanceNameAmbiguous)
	}
	// A machine joining with another machine's ticket.
	bed.Make(t, Spec{Name: "victim-1", N: 8})
	add(Spec{Name: "thief-1", N: 9}, "victim-1", csrapprover.ReasonNodeNameMismatch)

	for _, j := range joins {
		if got := a.Join(j.node, j.ticket); got != j.want {
			t.Errorf("join of %s: %q, want %q", j.node, got, j.want)
		}
	}
}
