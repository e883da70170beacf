package csrapprover

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/internal/ticket"
)

// TicketKeys gives the keys join tickets are verified with, by kid; an
// error means they cannot be had now (the CSR is retried).
type TicketKeys interface {
	Keys() (map[string]*ecdsa.PublicKey, error)
}

// ticketVerifier is the cloud.EvidenceVerifier of join tickets
// (internal/ticket), the same for every backend: the decider then checks
// the instance the ticket names against the cloud's record.
type ticketVerifier struct {
	keys    TicketKeys
	cluster string
}

// NewTicketVerifier verifies the join tickets of cluster with keys.
func NewTicketVerifier(keys TicketKeys, cluster string) cloud.EvidenceVerifier {
	return &ticketVerifier{keys: keys, cluster: cluster}
}

// ticketReplayPrefix keeps ticket ids apart from other evidence's replay
// keys.
const ticketReplayPrefix = "ticket/"

func (v *ticketVerifier) Type() string { return ticket.BlockType }

// Verify checks the ticket; binding is not: a ticket is written into
// user-data before the CSR key exists, so it cannot be bound to it.
//
// Verdicts (*cloud.Rejection): a malformed ticket, claims that fail
// (lifetime, cluster, times: checked before the keys are read, so a ticket
// that can never pass is denied even while they cannot be), a bad
// signature, and a kid not among the keys (read at most the key file's
// reload interval ago: a kid the admin has not published there yet is
// denied, and the node files a new CSR). Transient (the CSR is retried):
// the keys cannot be read.
func (v *ticketVerifier) Verify(_ context.Context, data []byte, _ string, now time.Time) (cloud.Attestation, error) {
	want := ticket.Expect{Cluster: v.cluster, Now: now, Skew: TicketClockSkew}
	if _, err := ticket.Check(data, want); err != nil {
		return cloud.Attestation{}, ticketRejection(err)
	}
	keys, err := v.keys.Keys()
	if err != nil {
		return cloud.Attestation{}, err
	}
	c, err := ticket.Verify(data, keys, want)
	if err != nil {
		return cloud.Attestation{}, ticketRejection(err)
	}
	return cloud.Attestation{
		InstanceName: c.Name, ReplayKey: ticketReplayPrefix + c.ID,
		IssuedAt: c.IssuedAt, ExpiresAt: c.Expiry,
	}, nil
}

func ticketRejection(err error) error {
	switch {
	case errors.Is(err, ticket.ErrSignature), errors.Is(err, ticket.ErrUnknownKey):
		return cloud.Reject(cloud.RejectSignature, err)
	case errors.Is(err, ticket.ErrExpired), errors.Is(err, ticket.ErrNotYetValid), errors.Is(err, ticket.ErrLifetime):
		return cloud.Reject(cloud.RejectExpired, err)
	case errors.Is(err, ticket.ErrCluster):
		return cloud.Reject(cloud.RejectCluster, err)
	default:
		return cloud.Reject(cloud.RejectMalformed, err)
	}
}

// Peek reads the ticket's id; a ticket claims no binding.
func (v *ticketVerifier) Peek(data []byte) (replayKey, binding string, err error) {
	c, err := ticket.Peek(data)
	if err != nil {
		return "", "", err
	}
	return ticketReplayPrefix + c.ID, "", nil
}

// PeekMachine reads the instance name the ticket is for, without verifying
// it, in lower case (names match case-insensitively).
func (v *ticketVerifier) PeekMachine(data []byte) (string, error) {
	c, err := ticket.Peek(data)
	if err != nil {
		return "", err
	}
	if c.Name == "" {
		return "", errors.New("ticket names no instance")
	}
	return strings.ToLower(c.Name), nil
}
