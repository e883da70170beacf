// Package csrreason names the reasons mooring's CSR approver gives its
// decisions (the condition's reason, machine-readable) and says which
// denials are final for the node agent: a final denial means that asking
// again with the same configuration cannot succeed, or that the request was
// an attack; any other denial is retried with a fresh key after a backoff.
// The approver and the agent both read this one table; docs/csrapprover.md
// prints it.
package csrreason

// Approved is the reason of every approval.
const Approved = "MooringApproved"

// Deny reasons.
const (
	MalformedRequest     = "MalformedRequest"
	RequestTooLarge      = "RequestTooLarge"
	BadSubject           = "BadSubject"
	BadUsages            = "BadUsages"
	BadExtension         = "BadExtension"
	WeakKey              = "WeakKey"
	ExpirationTooLong    = "ExpirationTooLong"
	SANsOnClientCert     = "SANsOnClientCertificate"
	RequesterNotAllowed  = "RequesterNotAllowed"
	RequesterMismatch    = "RequesterMismatch"
	NoEvidence           = "NoEvidence"
	UnknownEvidence      = "UnknownEvidenceType"
	EvidenceReplayed     = "EvidenceReplayed"
	InstanceNotInCluster = "InstanceNotInCluster"
	InstanceNotRunning   = "InstanceNotRunning"
	NodeNameMismatch     = "NodeNameMismatch"
	NodeNameTaken        = "NodeNameTaken"
	NodeAlreadyJoined    = "NodeAlreadyJoined"
	NodeNotFound         = "NodeNotFound"
	NodeNotInitialized   = "NodeNotInitialized"
	BadSAN               = "BadSAN"
	TooManySANs          = "TooManySANs"
	ReservedName         = "ReservedName"
	SANNotOfInstance     = "SANNotOfInstance"
	// SANAsserted: the SAN is among the instance's addresses, but a guest
	// or a tenant asserts it (VMware Tools' report, OpenStack's
	// accessIPv4), and the backend is not configured to trust that source.
	SANAsserted = "SANAssertedNotAssigned"
	// AddressClaimedTwice: another instance of the cluster lists the SAN
	// too, or another Node carries it as its name or address.
	AddressClaimedTwice = "AddressClaimedTwice"
	// Join tickets name their instance: the name must be of one instance,
	// created while the ticket was valid.
	InstanceNameAmbiguous        = "InstanceNameAmbiguous"
	InstanceCreatedOutsideTicket = "InstanceCreatedOutsideTicket"
	// TicketSpent: the join ticket was recorded as spent by another CSR,
	// which may have been deleted since (tickets stay spent until expiry).
	TicketSpent = "TicketSpent"
	// The instance's current cloud identity (on AWS, its IAM instance
	// profile) is not one the configuration gives nodes.
	InstanceIdentity = "InstanceIdentityNotAllowed"
	// TooManyPending was the flood guard's denial before it delayed
	// instead; older approvers may still give it.
	TooManyPending = "TooManyPendingRequests"

	// Evidence verdicts, given by a cloud's evidence verifier.
	EvidenceMalformed = "EvidenceMalformed"
	EvidenceSignature = "EvidenceSignatureInvalid"
	EvidenceExpired   = "EvidenceExpired"
	EvidenceNotBound  = "EvidenceNotBoundToKey"
	EvidenceIssuer    = "EvidenceWrongIssuer"
	EvidenceCluster   = "EvidenceOtherCluster"

	// TPM evidence (cloud/tpm): the policy wants it and none came; the
	// quote does not verify; its attestation key is not proven to be the
	// instance's; its PCRs are outside the operator's policy; and the
	// approver's credential activation challenge, which the agent answers
	// with a new CSR (its annotation carries the challenge).
	TPMEvidenceRequired  = "TPMEvidenceRequired"
	TPMQuoteInvalid      = "TPMQuoteInvalid"
	TPMKeyNotOfInstance  = "TPMKeyNotOfInstance"
	TPMPCRsOutsidePolicy = "TPMPCRsOutsidePolicy"
	TPMChallenge         = "TPMCredentialChallenge"
)

// retryable are the denials a join can outlive: they depend on timing or on
// state that changes by itself, not on what the node is or asks for.
var retryable = map[string]string{
	EvidenceExpired:    "the approver judged the request after its evidence expired (approver or cloud slow or down); fresh evidence is bound to a fresh key",
	EvidenceReplayed:   "someone presented this node's evidence first; fresh evidence is bound to a fresh key",
	InstanceNotRunning: "the cloud's record still said pending or stopped; it changes as the instance boots",
	NodeAlreadyJoined:  "the Node is still Ready from this instance's previous life (a reinstalled disk); it turns NotReady within the node monitor grace period",
	TooManyPending:     "an older approver's flood guard; the backlog drains",
	TPMChallenge:       "the approver asks the TPM to activate a credential; the agent answers with a new CSR",
}

// Final reports whether a denial with this reason ends the join for good.
// Reasons not known here (a person's denial, another approver's) are final:
// somebody decided, and retrying would flood the CSR API.
func Final(reason string) bool {
	_, ok := retryable[reason]
	return !ok
}

// WhyRetry says why a non-final denial is retried ("" for a final one).
func WhyRetry(reason string) string { return retryable[reason] }

// Retryable lists the non-final reasons (for documentation and tests).
func Retryable() []string {
	out := make([]string, 0, len(retryable))
	for r := range retryable {
		out = append(out, r)
	}
	return out
}
