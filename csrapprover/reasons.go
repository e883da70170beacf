package csrapprover

import "github.com/mooring-dev/mooring/cloud"

// Reasons a CSR is approved or denied: the condition's reason, machine-
// readable. docs/csrapprover.md explains each.
const (
	ReasonApproved = "MooringApproved"

	ReasonMalformedRequest     = "MalformedRequest"
	ReasonRequestTooLarge      = "RequestTooLarge"
	ReasonBadSubject           = "BadSubject"
	ReasonBadUsages            = "BadUsages"
	ReasonSANsOnClientCert     = "SANsOnClientCertificate"
	ReasonRequesterNotAllowed  = "RequesterNotAllowed"
	ReasonRequesterMismatch    = "RequesterMismatch"
	ReasonNoEvidence           = "NoEvidence"
	ReasonUnknownEvidence      = "UnknownEvidenceType"
	ReasonEvidenceReplayed     = "EvidenceReplayed"
	ReasonInstanceNotInCluster = "InstanceNotInCluster"
	ReasonInstanceNotRunning   = "InstanceNotRunning"
	ReasonNodeNameMismatch     = "NodeNameMismatch"
	ReasonNodeNameTaken        = "NodeNameTaken"
	ReasonNodeAlreadyJoined    = "NodeAlreadyJoined"
	ReasonNodeNotFound         = "NodeNotFound"
	ReasonNodeNotInitialized   = "NodeNotInitialized"
	ReasonBadSAN               = "BadSAN"
	ReasonTooManySANs          = "TooManySANs"
	ReasonReservedName         = "ReservedName"
	ReasonSANNotOfInstance     = "SANNotOfInstance"
	ReasonTooManyPending       = "TooManyPendingRequests"

	// Evidence verdicts come from the verifier.
	ReasonEvidenceMalformed = cloud.RejectMalformed
	ReasonEvidenceSignature = cloud.RejectSignature
	ReasonEvidenceExpired   = cloud.RejectExpired
	ReasonEvidenceNotBound  = cloud.RejectBinding
	ReasonEvidenceIssuer    = cloud.RejectIssuer
)
