package linode

import (
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/csrapprover/approvertest"
)

// A join with a ticket goes through the approver as mooring-csr-approver
// and mooring-ccm build it (csrapprover.NewFromCloud over this Attester,
// which has no evidence verifier, and --ticket-keys-file): approved for the
// Linode created within the ticket's life; denied, each with its reason,
// for one created before or after it, one without the cluster tag or of
// another cluster, one offline, two Linodes of the ticket's label, and a
// ticket filed for another label.
func TestTicketJoinThroughTheApprover(t *testing.T) {
	w := newWorld(t, linodetest.Options{}, nil)
	a := approvertest.Start(t, w.cloud)
	now := time.Now()
	tickets := map[string][]byte{}
	for _, n := range []string{"new-1", "old-1", "late-1", "untagged-1", "foreign-1", "offline-1", "twin-1", "victim-1"} {
		tickets[n] = a.Issue(n)
	}
	// The old Linode predates its ticket, the late one is made after it
	// expired; the others are what an attacker on Linode can arrange.
	w.ln.Put(linodetest.Instance{Label: "old-1", Tags: []string{testTag}, Created: now.Add(-time.Hour)})
	w.ln.Put(linodetest.Instance{Label: "late-1", Tags: []string{testTag}, Created: now.Add(2 * time.Hour)})
	w.add("new-1", 10)
	w.add("untagged-1", 11, "web")
	w.add("foreign-1", 12, "k8s:c2")
	off := w.add("offline-1", 13)
	if err := w.ln.SetStatus(off.ID, linodetest.StatusOffline); err != nil {
		t.Fatal(err)
	}
	w.add("twin-1", 14)
	w.add("twin-1", 15)
	w.add("victim-1", 16)
	w.add("thief-1", 17)

	for _, tc := range []struct {
		node   string
		ticket []byte
		want   string
	}{
		{"new-1", tickets["new-1"], csrapprover.ReasonApproved},
		{"old-1", tickets["old-1"], csrapprover.ReasonInstanceCreatedOutsideTicket},
		{"late-1", tickets["late-1"], csrapprover.ReasonInstanceCreatedOutsideTicket},
		{"untagged-1", tickets["untagged-1"], csrapprover.ReasonInstanceNotInCluster},
		{"foreign-1", tickets["foreign-1"], csrapprover.ReasonInstanceNotInCluster},
		{"offline-1", tickets["offline-1"], csrapprover.ReasonInstanceNotRunning},
		{"twin-1", tickets["twin-1"], csrapprover.ReasonInstanceNameAmbiguous},
		{"thief-1", tickets["victim-1"], csrapprover.ReasonNodeNameMismatch},
	} {
		if got := a.Join(tc.node, tc.ticket); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.node, got, tc.want)
		}
	}
}
