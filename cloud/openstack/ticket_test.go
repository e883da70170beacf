package openstack

import (
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/csrapprover/approvertest"
)

// A join with a ticket goes through the approver as mooring-csr-approver
// and mooring-ccm build it (csrapprover.NewFromCloud over this Attester,
// which has no evidence verifier, and --ticket-keys-file): approved for the
// server created within the ticket's life, denied for one created before
// it, and for one that is not the cluster's.
func TestTicketJoinThroughTheApprover(t *testing.T) {
	w := newWorld(t, openstacktest.Options{}, nil)
	a := approvertest.Start(t, w.cloud)
	w.os.Put(openstacktest.Server{Name: "old-1", Tags: []string{testTag}, Created: time.Now().Add(-time.Hour)})
	goodTicket, oldTicket, untaggedTicket := a.Issue("new-1"), a.Issue("old-1"), a.Issue("untagged-1")
	w.add("new-1", 10)
	w.add("untagged-1", 11, "some-other-tag")

	for _, tc := range []struct {
		node   string
		ticket []byte
		want   string
	}{
		{"new-1", goodTicket, csrapprover.ReasonApproved},
		{"old-1", oldTicket, csrapprover.ReasonInstanceCreatedOutsideTicket},
		{"untagged-1", untaggedTicket, csrapprover.ReasonInstanceNotInCluster},
	} {
		if got := a.Join(tc.node, tc.ticket); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.node, got, tc.want)
		}
	}
}
