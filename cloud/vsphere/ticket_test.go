package vsphere

import (
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/vsphere/vspheretest"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/csrapprover/approvertest"
)

// A join with a ticket goes through the approver as mooring-csr-approver
// and mooring-ccm build it (csrapprover.NewFromCloud over this Attester,
// which has no evidence verifier, and --ticket-keys-file): approved for the
// VM created within the ticket's life, denied for one created before.
func TestTicketJoinThroughTheApprover(t *testing.T) {
	w := newWorld(t, nil)
	a := approvertest.Start(t, w.cloud)
	// The old VM predates its ticket; the new one is made after.
	w.sim.SetCreated(w.add(t, vspheretest.VM{Name: "old-1", UUID: uuid(1), IP: "127.0.90.51"}), time.Now().Add(-time.Hour))
	goodTicket, oldTicket := a.Issue("new-1"), a.Issue("old-1")
	w.add(t, vspheretest.VM{Name: "new-1", UUID: uuid(2), IP: "127.0.90.52"})

	for _, tc := range []struct {
		node   string
		ticket []byte
		want   string
	}{
		{"new-1", goodTicket, csrapprover.ReasonApproved},
		{"old-1", oldTicket, csrapprover.ReasonInstanceCreatedOutsideTicket},
	} {
		if got := a.Join(tc.node, tc.ticket); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.node, got, tc.want)
		}
	}
}
