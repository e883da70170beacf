package cloud

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/internal/csrreason"
)

// Attestation is what verified evidence proves: which instance asked, for
// which key (the binding was checked), when.
type Attestation struct {
	// InstanceID and ProviderID name the instance the cloud signed for.
	InstanceID, ProviderID string
	// InstanceName is set instead of them by evidence that names its
	// instance rather than identifying it (a join ticket, written into
	// user-data before the cloud assigns an id, and not bound to any key):
	// it holds only for the one instance of that name, created between
	// IssuedAt and ExpiresAt.
	InstanceName string
	// ReplayKey is unique per piece of evidence (a token id, a document
	// hash); the approver accepts each at most once.
	ReplayKey string
	// IssuedAt and ExpiresAt bound the evidence's validity.
	IssuedAt, ExpiresAt time.Time
	// Cluster is the cluster the cloud had the instance in when it signed,
	// for evidence that says (the local cloud's tokens carry its cluster
	// tag); empty when the evidence does not say. Evidence signed for
	// another cluster is denied without asking the cloud; evidence of this
	// cluster is still checked against the cloud's current record.
	Cluster string
	// Principal is the cloud identity the evidence was made as, when the
	// cloud names one (AWS: the ARN of the instance profile's role
	// session); for messages and the verifier's own InstanceChecker.
	Principal string
}

// EvidenceVerifier checks one kind of cloud-signed evidence. The CSR
// approver picks the verifier by the evidence block's type.
//
// Verify must check the signature against trust roots from its own
// configuration (never from the evidence), that the signed content is what
// it parses, the evidence's freshness, and that it is bound to binding (the
// CSR key's binding value) through the cloud's caller-chosen slot. A
// *Rejection means the evidence is bad and the CSR is denied; any other
// error is transient (the trust roots could not be fetched, say) and the
// CSR is retried, never approved.
type EvidenceVerifier interface {
	Type() string
	Verify(ctx context.Context, data []byte, binding string, now time.Time) (Attestation, error)
	// Peek reads the replay key and the binding evidence claims, without
	// verifying anything: only for indexing the CSRs that carry it.
	Peek(data []byte) (replayKey, binding string, err error)
}

// MachinePeeker is an EvidenceVerifier that reads, without verifying
// anything, which machine evidence claims to come from (an instance id, or
// what stands for one: a join ticket's instance name, an AWS access key
// id, which is its instance's own session's). The CSR approver bounds the
// joins decided at once per claimed machine, since a boot wave's joins
// share one requester (the bootstrap token). It is a claim: evidence of one
// machine gives one key, but anyone can write evidence that claims any.
type MachinePeeker interface {
	PeekMachine(data []byte) (string, error)
}

// InstanceChecker is an EvidenceVerifier with a check of its own on the
// cloud's current record of the instance, once the approver has found the
// instance the evidence names (and checked that it is the cluster's and
// running): that the instance may still act as what the evidence proved
// (AWS: its current instance profile is a node role's, since credentials
// outlive a swap of the profile). A *Rejection denies the join; any other
// error is transient and the CSR is retried, never approved.
type InstanceChecker interface {
	CheckInstance(att Attestation, in view.Instance) error
}

// Rejection reasons, machine-readable (the CSR approver's deny reasons).
const (
	RejectMalformed = csrreason.EvidenceMalformed
	RejectSignature = csrreason.EvidenceSignature
	RejectExpired   = csrreason.EvidenceExpired
	RejectBinding   = csrreason.EvidenceNotBound
	RejectIssuer    = csrreason.EvidenceIssuer
	RejectCluster   = csrreason.EvidenceCluster
	// RejectInstanceIdentity is InstanceChecker's: the instance's current
	// cloud identity is not one the configuration allows.
	RejectInstanceIdentity = csrreason.InstanceIdentity
)

// Rejection is a verdict on bad evidence.
type Rejection struct {
	Reason string
	Err    error
}

func (r *Rejection) Error() string { return fmt.Sprintf("%s: %v", r.Reason, r.Err) }
func (r *Rejection) Unwrap() error { return r.Err }

// Reject makes a Rejection.
func Reject(reason string, err error) error { return &Rejection{Reason: reason, Err: err} }

// IsRejection reports whether err is a verdict rather than a failure: a
// *Rejection, or an error with a RejectReason method (tpm.Rejection).
func IsRejection(err error) (*Rejection, bool) {
	var r *Rejection
	if errors.As(err, &r) {
		return r, true
	}
	var other interface{ RejectReason() string }
	if errors.As(err, &other) {
		return &Rejection{Reason: other.RejectReason(), Err: err}, true
	}
	return nil, false
}

// TPMRequest is what the approver hands a TPMVerifier: the TPM evidence
// block of a join CSR, the CSR key's binding, the CSR itself (a credential
// activation challenge is bound to the CSR it was written on), the time,
// and the operator's quote options (its PCR policy).
type TPMRequest struct {
	Data        []byte
	Binding     string
	CSR, CSRUID string
	Now         time.Time
	Quote       tpm.QuoteOptions
}

// TPMVerifier is an Attester whose instances can prove a join with their
// TPM (cloud/tpm): after the cloud's evidence named the instance (att)
// and the view found it (in), VerifyTPM checks that the TPM evidence's
// quote binds the CSR key (tpm.VerifyQuote) and that its attestation key
// is resident in that instance's TPM (a certificate the cloud issued for
// it, the cloud's API, credential activation). nil: proven. A rejection
// (*Rejection, *tpm.Rejection) denies; a *tpm.ChallengeNeeded asks the
// approver to write the challenge on the CSR and deny it (the agent
// answers with a new CSR); any other error is transient.
type TPMVerifier interface {
	VerifyTPM(ctx context.Context, req TPMRequest, att Attestation, in view.Instance) error
}

// Attester is a cloud backend that can back the CSR approver: it verifies
// its evidence and shares its instance view, whose instances carry the Node
// name the backend's node name policy gives them (view.Instance.NodeName).
type Attester interface {
	EvidenceVerifiers() []EvidenceVerifier
	InstanceView() *view.View
	// ClusterTag is the tag the cluster's instances carry.
	ClusterTag() string
}
