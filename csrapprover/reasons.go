package csrapprover

import "github.com/mooring-dev/mooring/internal/csrreason"

// Reasons a CSR is approved or denied: the condition's reason, machine-
// readable. The table lives in internal/csrreason, which the node agent
// reads too (it says which denials are final); docs/csrapprover.md explains
// each.
const (
	ReasonApproved = csrreason.Approved

	ReasonMalformedRequest     = csrreason.MalformedRequest
	ReasonRequestTooLarge      = csrreason.RequestTooLarge
	ReasonBadSubject           = csrreason.BadSubject
	ReasonBadUsages            = csrreason.BadUsages
	ReasonBadExtension         = csrreason.BadExtension
	ReasonWeakKey              = csrreason.WeakKey
	ReasonExpirationTooLong    = csrreason.ExpirationTooLong
	ReasonSANsOnClientCert     = csrreason.SANsOnClientCert
	ReasonRequesterNotAllowed  = csrreason.RequesterNotAllowed
	ReasonRequesterMismatch    = csrreason.RequesterMismatch
	ReasonNoEvidence           = csrreason.NoEvidence
	ReasonUnknownEvidence      = csrreason.UnknownEvidence
	ReasonEvidenceReplayed     = csrreason.EvidenceReplayed
	ReasonInstanceNotInCluster = csrreason.InstanceNotInCluster
	ReasonInstanceNotRunning   = csrreason.InstanceNotRunning
	ReasonInstanceIdentity     = csrreason.InstanceIdentity
	ReasonNodeNameMismatch     = csrreason.NodeNameMismatch
	ReasonNodeNameTaken        = csrreason.NodeNameTaken
	ReasonNodeAlreadyJoined    = csrreason.NodeAlreadyJoined
	ReasonNodeNotFound         = csrreason.NodeNotFound
	ReasonNodeNotInitialized   = csrreason.NodeNotInitialized
	ReasonBadSAN               = csrreason.BadSAN
	ReasonTooManySANs          = csrreason.TooManySANs
	ReasonReservedName         = csrreason.ReservedName
	ReasonSANNotOfInstance     = csrreason.SANNotOfInstance
	ReasonSANAsserted          = csrreason.SANAsserted
	ReasonAddressClaimedTwice  = csrreason.AddressClaimedTwice

	ReasonInstanceNameAmbiguous        = csrreason.InstanceNameAmbiguous
	ReasonInstanceCreatedOutsideTicket = csrreason.InstanceCreatedOutsideTicket
	ReasonTicketSpent                  = csrreason.TicketSpent

	// Evidence verdicts come from the verifier.
	ReasonEvidenceMalformed = csrreason.EvidenceMalformed
	ReasonEvidenceSignature = csrreason.EvidenceSignature
	ReasonEvidenceExpired   = csrreason.EvidenceExpired
	ReasonEvidenceNotBound  = csrreason.EvidenceNotBound
	ReasonEvidenceIssuer    = csrreason.EvidenceIssuer
	ReasonEvidenceCluster   = csrreason.EvidenceCluster

	// TPM evidence (cloud/tpm): the policy wants it and none came; the
	// verifier's verdicts; the credential activation round.
	ReasonTPMEvidenceRequired  = csrreason.TPMEvidenceRequired
	ReasonTPMQuoteInvalid      = csrreason.TPMQuoteInvalid
	ReasonTPMKeyNotOfInstance  = csrreason.TPMKeyNotOfInstance
	ReasonTPMPCRsOutsidePolicy = csrreason.TPMPCRsOutsidePolicy
	ReasonTPMChallenge         = csrreason.TPMChallenge
)
