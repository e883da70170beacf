package csrapprover

import (
	"context"
	"errors"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/csrapprover/spent"
)

// SpentBy implements Replays from the spent-ticket record.
func (c *Controller) SpentBy(ctx context.Context, key string, csr *certificatesv1.CertificateSigningRequest) (string, error) {
	if c.opts.SpentTickets == nil {
		return "", nil // Spend refuses
	}
	by, ok, err := c.opts.SpentTickets.Spent(ctx, key, spent.Spender{Name: csr.Name, UID: csr.UID})
	if err != nil {
		return "", c.recordError(csr, err)
	}
	if !ok {
		return "", nil
	}
	return c.spender(by), nil
}

// Spend implements Replays: it records the ticket as spent before the
// approval is written. A dry run records nothing; it only reads.
func (c *Controller) Spend(ctx context.Context, key string, expiry time.Time, csr *certificatesv1.CertificateSigningRequest) (string, error) {
	if c.opts.SpentTickets == nil {
		return "", errors.New("join tickets are accepted but no spent-ticket record is set (Options.SpentTickets): a ticket that cannot be recorded as spent is not approved")
	}
	if c.opts.DryRun {
		return c.SpentBy(ctx, key, csr)
	}
	by, ok, err := c.opts.SpentTickets.Spend(ctx, key, expiry, spent.Spender{Name: csr.Name, UID: csr.UID})
	if err != nil {
		return "", c.recordError(csr, err)
	}
	if !ok {
		return "", nil
	}
	return c.spender(by), nil
}

// ReasonSpentTicketsMissing is the Event on a ticket join's CSR that
// waits because the spent-ticket ConfigMap its ticket falls in does not
// exist (the approver does not create it).
const ReasonSpentTicketsMissing = "SpentTicketsMissing"

// recordError returns err, a failure to read or write the spent-ticket
// record; a missing ConfigMap is also said on the CSR, where whoever waits
// for the join looks: nothing but the installer can fix it.
func (c *Controller) recordError(csr *certificatesv1.CertificateSigningRequest, err error) error {
	if errors.Is(err, spent.ErrMissing) {
		c.recorder.Event(csr, v1.EventTypeWarning, ReasonSpentTicketsMissing, err.Error())
	}
	return err
}

// spender names the CSR that the spent-ticket record holds as a ticket's
// spender, for a denial's message. The record keeps the CSR's UID only (its
// name is the requester's choice, and would make entries as long as the
// requester likes), so the CSR is looked up by UID among those the
// apiserver still holds; one the cleaner deleted is named by its UID. Never
// "": the ticket is spent.
func (c *Controller) spender(id types.UID) string {
	if id == spent.UnknownSpender {
		return "unknown (its entry in the spent-ticket record cannot be read)"
	}
	if csrs, err := c.csrs.List(labels.Everything()); err == nil {
		for _, csr := range csrs {
			if spent.SpenderID(csr.UID) == id {
				return fmt.Sprintf("%s (UID %s)", csr.Name, csr.UID)
			}
		}
	}
	return fmt.Sprintf("of UID %s, deleted since", id)
}
