package csrapprover

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// Decision is the approver's verdict on one CSR.
type Decision struct {
	Approve bool
	// Check is the check that decided (the one that failed, or "all").
	Check string
	// Reason is machine-readable: ReasonApproved or a deny reason.
	Reason  string
	Message string
	// Challenge is the TPM credential activation challenge of a denial
	// with ReasonTPMChallenge: the controller writes it on the CSR
	// (annotation tpm.ChallengeAnnotation) before it records the denial.
	Challenge []byte
}

func deny(check, reason, format string, args ...any) Decision {
	return Decision{Check: check, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Instances is the cloud's record, read through the shared view.
type Instances interface {
	ByID(ctx context.Context, id string, maxAge time.Duration) (view.Instance, error)
	ByProviderID(ctx context.Context, providerID string, maxAge time.Duration) (view.Instance, error)
	// Named lists every instance of a name (join tickets name theirs).
	Named(ctx context.Context, name string, maxAge time.Duration) ([]view.Instance, error)
	// WithAddress lists every instance not terminated that lists an
	// address or name (view.AddressKey) among its addresses or as its
	// node name.
	WithAddress(ctx context.Context, address string, maxAge time.Duration) ([]view.Instance, error)
}

// Nodes reads Nodes (a lister).
type Nodes interface {
	Get(name string) (*v1.Node, error)
	// WithAddress lists the Nodes that carry an address (view.AddressKey)
	// in status.addresses.
	WithAddress(address string) ([]*v1.Node, error)
}

// Replays tells whether evidence was presented on an earlier CSR, and
// keeps join tickets spent after the CSRs that spent them are deleted.
type Replays interface {
	// EarlierHolder names a CSR created before csr whose evidence verifies
	// and carries the same replay key, or "". An error means the answer is
	// unknown: the CSR is retried, never approved.
	EarlierHolder(ctx context.Context, replayKey string, csr *certificatesv1.CertificateSigningRequest) (string, error)
	// SpentBy names the CSR, other than csr, recorded as having spent the
	// join ticket of replayKey, or "". It may miss a record another
	// approver just wrote: Spend is what decides. An error means unknown.
	SpentBy(ctx context.Context, replayKey string, csr *certificatesv1.CertificateSigningRequest) (string, error)
	// Spend records the join ticket of replayKey, valid until expiry, as
	// spent by csr, unless another CSR spent it first: then it names that
	// CSR. Once it returns "" and no error the ticket is recorded for csr
	// (a retry of csr finds its own record). An error means it is not
	// recorded, and the ticket must not be approved.
	Spend(ctx context.Context, replayKey string, expiry time.Time, csr *certificatesv1.CertificateSigningRequest) (string, error)
}

// Config is what the checks need to know of the cluster and the cloud.
type Config struct {
	// Cluster is the cloud cluster tag instances must carry.
	Cluster string
	// InstanceMaxAge bounds how old the cloud's record may be.
	InstanceMaxAge time.Duration
	// MaxSANs caps a serving CSR's subject alternative names.
	MaxSANs int
	// ReservedNames are DNS names and IPs no serving certificate may carry
	// (other apiservers', say), besides the cluster's built-in names.
	ReservedNames []string
	// MaxExpiration caps spec.expirationSeconds; 0: no cap beyond the
	// signer's own.
	MaxExpiration time.Duration
	// APIServerNames, when set, are the names and IPs of the apiserver's
	// serving certificate: no serving certificate may carry one, whatever
	// the instance's record says, and no serving CSR is decided until they
	// are known.
	APIServerNames *APIServerNames
	// TPM is the policy on TPM evidence in joins.
	TPM TPMPolicy
}

// TPM policies (--tpm): what a join's TPM evidence (cloud/tpm) must prove.
const (
	// TPMOff, the default: a TPM evidence block is ignored; joins rest on
	// the cloud's evidence (or a join ticket) alone. The default, so that
	// an upgrade changes no decision: under TPMPreferred, agents older than
	// TPM support on instances with a vTPM are denied, and the approver
	// needs the cloud permissions of the TPM checks (GCE
	// getShieldedInstanceIdentity, EC2 GetInstanceTpmEkPub).
	TPMOff = "off"
	// TPMPreferred: a TPM evidence block present must verify; a join
	// without one is judged on the cloud's evidence alone, unless the
	// cloud's record says the instance has a virtual TPM (view.Instance.
	// VTPM): then it is denied, so leaving the block out gains nothing.
	TPMPreferred = "preferred"
	// TPMRequired: every join must carry TPM evidence that verifies.
	TPMRequired = "required"
)

// ParseTPMMode reads a TPM policy; "" is TPMOff, the default.
func ParseTPMMode(s string) (string, error) {
	switch s {
	case "":
		return TPMOff, nil
	case TPMOff, TPMPreferred, TPMRequired:
		return s, nil
	}
	return "", fmt.Errorf("TPM policy %q: want %s, %s or %s", s, TPMOff, TPMPreferred, TPMRequired)
}

// TPMPolicy is the approver's policy on TPM evidence in joins
// (docs/attestation.md, "TPM-rooted identity").
type TPMPolicy struct {
	// Mode is TPMOff, TPMPreferred or TPMRequired; "" is TPMOff.
	Mode string
	// Verifier checks TPM evidence for the cloud backend (its Attester, a
	// cloud.TPMVerifier); nil when the backend verifies none: a TPM block
	// is then refused, and under TPMRequired every join is denied.
	Verifier cloud.TPMVerifier
	// Quote are the quote checks' options: the operator's PCR policy,
	// the quote's time window.
	Quote tpm.QuoteOptions
}

// Decider runs the checks of docs/csrapprover.md. It never approves on an
// error: cloud and API failures are returned to be retried.
type Decider struct {
	cfg         Config
	reservedSet map[string]bool // cfg.ReservedNames, normalized
	verifiers   map[string]cloud.EvidenceVerifier
	instances   Instances
	nodes       Nodes
	replays     Replays
	now         func() time.Time
}

// NewDecider wires the checks.
func NewDecider(cfg Config, verifiers []cloud.EvidenceVerifier, instances Instances, nodes Nodes, replays Replays) *Decider {
	if cfg.MaxSANs == 0 {
		cfg.MaxSANs = 16
	}
	d := &Decider{cfg: cfg, reservedSet: map[string]bool{}, verifiers: map[string]cloud.EvidenceVerifier{}, instances: instances, nodes: nodes, replays: replays, now: time.Now}
	for _, r := range cfg.ReservedNames {
		if ip := net.ParseIP(r); ip != nil {
			d.reservedSet[ip.String()] = true
		} else {
			d.reservedSet[normalizeName(r)] = true
		}
	}
	for _, v := range verifiers {
		d.verifiers[v.Type()] = v
	}
	return d
}

const (
	groupBootstrappers = "system:bootstrappers"
	groupNodes         = "system:nodes"
	nodeUserPrefix     = "system:node:"
)

// Decide judges a CSR of one of the two signers.
func (d *Decider) Decide(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (Decision, error) {
	x509csr, blocks, err := evidence.Decode(csr.Spec.Request)
	if err != nil {
		reason := ReasonMalformedRequest
		if errors.Is(err, evidence.ErrTooLarge) {
			reason = ReasonRequestTooLarge
		}
		return deny("request", reason, "spec.request: %v", err), nil
	}
	if dd := d.requestShape(csr, x509csr); dd != nil {
		return *dd, nil
	}
	switch csr.Spec.SignerName {
	case certificatesv1.KubeAPIServerClientKubeletSignerName:
		return d.decideClient(ctx, csr, x509csr, blocks)
	case certificatesv1.KubeletServingSignerName:
		return d.decideServing(ctx, csr, x509csr)
	}
	return Decision{}, fmt.Errorf("signer %q is not the approver's", csr.Spec.SignerName)
}

// OIDs the checks name.
var (
	oidCommonName   = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidOrganization = asn1.ObjectIdentifier{2, 5, 4, 10}
	oidSAN          = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidBasicConstr  = asn1.ObjectIdentifier{2, 5, 29, 19}
)

// requestShape checks what both signers share beyond the subject: a key
// the signer should certify, no requested extension but subject
// alternative names (never a CA), and a bounded lifetime.
func (d *Decider) requestShape(csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest) *Decision {
	if dd := keyStrength(req.PublicKey); dd != nil {
		return dd
	}
	for _, ext := range req.Extensions {
		switch {
		case ext.Id.Equal(oidSAN):
		case ext.Id.Equal(oidBasicConstr):
			dd := deny("extensions", ReasonBadExtension, "the request asks for basic constraints (a CA certificate)")
			return &dd
		default:
			dd := deny("extensions", ReasonBadExtension, "requested extension %s is not allowed (only subject alternative names)", ext.Id)
			return &dd
		}
	}
	if es := csr.Spec.ExpirationSeconds; es != nil && d.cfg.MaxExpiration > 0 && time.Duration(*es)*time.Second > d.cfg.MaxExpiration {
		dd := deny("expiration", ReasonExpirationTooLong, "spec.expirationSeconds %d is over the limit of %s", *es, d.cfg.MaxExpiration)
		return &dd
	}
	return nil
}

// keyStrength accepts RSA of 2048 to 8192 bits, ECDSA P-256 and P-384, and
// Ed25519.
func keyStrength(pub any) *Decision {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < 2048 || n > 8192 {
			dd := deny("key", ReasonWeakKey, "RSA key of %d bits; 2048 to 8192 are accepted", n)
			return &dd
		}
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			dd := deny("key", ReasonWeakKey, "ECDSA curve %s; P-256 and P-384 are accepted", k.Curve.Params().Name)
			return &dd
		}
	case ed25519.PublicKey:
	default:
		dd := deny("key", ReasonWeakKey, "key type %T is not accepted", pub)
		return &dd
	}
	return nil
}

// nodeSubject checks the subject shared by both signers: O exactly
// system:nodes, CN system:node:NAME, and no other attribute.
func nodeSubject(req *x509.CertificateRequest) (string, *Decision) {
	cns := 0
	for _, atv := range req.Subject.Names {
		switch {
		case atv.Type.Equal(oidCommonName):
			cns++
		case atv.Type.Equal(oidOrganization):
		default:
			dd := deny("subject", ReasonBadSubject, "subject attribute %s is not allowed; only CN and O", atv.Type)
			return "", &dd
		}
	}
	if cns != 1 {
		dd := deny("subject", ReasonBadSubject, "the subject must hold exactly one CN, it holds %d", cns)
		return "", &dd
	}
	if !slices.Equal(req.Subject.Organization, []string{groupNodes}) {
		dd := deny("subject", ReasonBadSubject, "organization must be exactly [%s], got %q", groupNodes, req.Subject.Organization)
		return "", &dd
	}
	name, ok := strings.CutPrefix(req.Subject.CommonName, nodeUserPrefix)
	if !ok || name == "" {
		dd := deny("subject", ReasonBadSubject, "common name must be %sNAME, got %q", nodeUserPrefix, req.Subject.CommonName)
		return "", &dd
	}
	return name, nil
}

// usagesExactly checks spec.usages against want, plus key encipherment for
// RSA keys.
func usagesExactly(csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest, want certificatesv1.KeyUsage) *Decision {
	allowed := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, want}
	if _, isRSA := req.PublicKey.(*rsa.PublicKey); isRSA {
		allowed = append(allowed, certificatesv1.UsageKeyEncipherment)
	}
	seen := map[certificatesv1.KeyUsage]bool{}
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(allowed, u) || seen[u] {
			dd := deny("usages", ReasonBadUsages, "usage %q is not allowed (allowed: %v)", u, allowed)
			return &dd
		}
		seen[u] = true
	}
	if !seen[certificatesv1.UsageDigitalSignature] || !seen[want] {
		dd := deny("usages", ReasonBadUsages, "usages must include %q and %q, got %v", certificatesv1.UsageDigitalSignature, want, csr.Spec.Usages)
		return &dd
	}
	return nil
}

func (d *Decider) decideClient(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest, blocks []evidence.Block) (Decision, error) {
	name, bad := nodeSubject(req)
	if bad != nil {
		return *bad, nil
	}
	if n := len(req.DNSNames) + len(req.IPAddresses) + len(req.EmailAddresses) + len(req.URIs); n > 0 {
		return deny("sans", ReasonSANsOnClientCert, "a client certificate request carries no SANs, this one has %d", n), nil
	}
	if dd := usagesExactly(csr, req, certificatesv1.UsageClientAuth); dd != nil {
		return *dd, nil
	}
	switch {
	case csr.Spec.Username == nodeUserPrefix+name && slices.Contains(csr.Spec.Groups, groupNodes):
		return d.decideRenewal(ctx, name)
	case strings.HasPrefix(csr.Spec.Username, nodeUserPrefix):
		return deny("requester", ReasonRequesterMismatch, "node %q may only renew its own certificate, not %q's", csr.Spec.Username, name), nil
	case !slices.Contains(csr.Spec.Groups, groupBootstrappers):
		return deny("requester", ReasonRequesterNotAllowed, "requester %q is neither in %s nor the node itself", csr.Spec.Username, groupBootstrappers), nil
	}
	return d.decideJoin(ctx, csr, req, name, blocks)
}

func (d *Decider) decideJoin(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest, name string, blocks []evidence.Block) (Decision, error) {
	if len(blocks) == 0 {
		return deny("evidence", ReasonNoEvidence, "a join needs cloud-signed evidence or a join ticket after the CSR in spec.request; none found"), nil
	}
	// The cloud's evidence (or a join ticket) first, then at most one TPM
	// evidence block.
	var tpmBlock *evidence.Block
	switch {
	case blocks[0].Type == tpm.EvidenceType:
		return deny("evidence", ReasonMalformedRequest, "the first piece of evidence is a %s block; the cloud's evidence (or a join ticket) comes first and the TPM's after it", tpm.EvidenceType), nil
	case len(blocks) == 2 && blocks[1].Type == tpm.EvidenceType:
		tpmBlock = &blocks[1]
	case len(blocks) > 1:
		return deny("evidence", ReasonMalformedRequest, "exactly one piece of cloud evidence (or a join ticket) is expected, and at most one %s block after it; got %d blocks", tpm.EvidenceType, len(blocks)), nil
	}
	v, ok := d.verifiers[blocks[0].Type]
	if !ok {
		return deny("evidence", ReasonUnknownEvidence, "evidence type %q is not accepted here", blocks[0].Type), nil
	}
	binding, err := evidence.Binding(req.PublicKey)
	if err != nil {
		return deny("evidence", ReasonMalformedRequest, "%v", err), nil
	}
	att, err := v.Verify(ctx, blocks[0].Data, binding, d.now())
	if r, rejected := cloud.IsRejection(err); rejected {
		return deny("evidence", r.Reason, "%v", r.Err), nil
	}
	if err != nil {
		return Decision{}, err
	}
	holder, err := d.replays.EarlierHolder(ctx, att.ReplayKey, csr)
	if err != nil {
		return Decision{}, fmt.Errorf("replay check: %w", err)
	}
	if holder != "" {
		return deny("replay", ReasonEvidenceReplayed, "this evidence was already presented on CSR %s", holder), nil
	}
	if att.Cluster != "" && d.cfg.Cluster != "" && att.Cluster != d.cfg.Cluster {
		// The cloud said so itself: no lookup (nor a List of the cloud, for
		// an instance the view does not hold) is needed to deny it.
		return deny("instance", ReasonInstanceNotInCluster, "the cloud signed this evidence for instance %s of cluster %q, not %q", att.InstanceID, att.Cluster, d.cfg.Cluster), nil
	}
	find, attested := d.signedInstance, "attested by the cloud; evidence bound to the CSR key"
	ticketJoin := att.InstanceName != ""
	if ticketJoin {
		find, attested = d.ticketInstance, "holds a join ticket for its name (tickets are not bound to a key)"
		// The CSR that spent the ticket may be gone (the CSR cleaner
		// deletes decided CSRs after an hour; a ticket lives up to a day).
		holder, err := d.replays.SpentBy(ctx, att.ReplayKey, csr)
		if err != nil {
			return Decision{}, fmt.Errorf("spent-ticket check: %w", err)
		}
		if holder != "" {
			return deny("replay", ReasonTicketSpent, "this join ticket was spent by CSR %s (tickets stay spent until they expire, also after that CSR is deleted)", holder), nil
		}
	}
	in, dd, err := find(ctx, att)
	if dd != nil || err != nil {
		return orZero(dd), err
	}
	if dd := d.instanceUsable(in); dd != nil {
		return *dd, nil
	}
	if dd, err := verifierAllows(v, att, in); dd != nil || err != nil {
		return orZero(dd), err
	}
	tpmProven, dd, err := d.checkTPM(ctx, csr, tpmBlock, binding, att, in)
	if dd != nil || err != nil {
		return orZero(dd), err
	}
	if tpmProven {
		attested += "; TPM-proven (a quote bound to the CSR key by an attestation key of the instance's TPM)"
	}
	if in.NodeName == "" || in.NodeName != name {
		return deny("nodename", ReasonNodeNameMismatch, "instance %s may join only as node %q, not %q", in.ID, in.NodeName, name), nil
	}
	node, err := d.nodes.Get(name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return Decision{}, err
	case node.Spec.ProviderID != "" && node.Spec.ProviderID != in.ProviderID:
		return deny("takeover", ReasonNodeNameTaken, "node %s belongs to %s, not to instance %s", name, node.Spec.ProviderID, in.ID), nil
	case nodeReady(node):
		return deny("takeover", ReasonNodeAlreadyJoined, "node %s is Ready; a running node renews, it does not join again", name), nil
	}
	if ticketJoin {
		// Last, so that only an approval spends the ticket; a ticket that
		// cannot be recorded is not approved.
		holder, err := d.replays.Spend(ctx, att.ReplayKey, att.ExpiresAt, csr)
		if err != nil {
			return Decision{}, fmt.Errorf("record the join ticket as spent: %w", err)
		}
		if holder != "" {
			return deny("replay", ReasonTicketSpent, "this join ticket was spent by CSR %s", holder), nil
		}
	}
	return Decision{Approve: true, Check: "all", Reason: ReasonApproved,
		Message: fmt.Sprintf("instance %s (%s) %s", in.ID, in.Name, attested)}, nil
}

// checkTPM applies the TPM policy to a join whose instance is found and
// usable: proven reports that TPM evidence verified. Under TPMPreferred a
// missing block denies only an instance the cloud says has a vTPM. A
// *tpm.ChallengeNeeded becomes a denial carrying the challenge; any error
// that is no verdict is returned to be retried.
func (d *Decider) checkTPM(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, blk *evidence.Block, binding string,
	att cloud.Attestation, in view.Instance) (proven bool, dd *Decision, err error) {
	p := d.cfg.TPM
	mode, err := ParseTPMMode(p.Mode)
	if err != nil {
		return false, nil, err
	}
	if mode == TPMOff {
		return false, nil, nil
	}
	if blk == nil {
		switch {
		case mode == TPMRequired:
			dd := deny("tpm", ReasonTPMEvidenceRequired, "the approver's TPM policy is %s and the request carries no %s block: instance %s must prove its join with its TPM", TPMRequired, tpm.EvidenceType, in.ID)
			return false, &dd, nil
		case in.VTPM:
			dd := deny("tpm", ReasonTPMEvidenceRequired, "the cloud's record says instance %s has a virtual TPM, and the request carries no %s block: under the TPM policy %s such an instance proves its join with its TPM", in.ID, tpm.EvidenceType, TPMPreferred)
			return false, &dd, nil
		}
		return false, nil, nil
	}
	if p.Verifier == nil {
		reason := ReasonUnknownEvidence
		if mode == TPMRequired {
			reason = ReasonTPMEvidenceRequired
		}
		dd := deny("tpm", reason, "the request carries a %s block, and this cloud backend verifies no TPM evidence", tpm.EvidenceType)
		return false, &dd, nil
	}
	if att.InstanceID == "" && att.InstanceName != "" {
		// A join ticket names its instance; the lookup found which one
		// (by name, created within the ticket's life). The TPM evidence
		// must be that instance's, as it must be the signed evidence's.
		att.InstanceID, att.ProviderID = in.ID, in.ProviderID
	}
	err = p.Verifier.VerifyTPM(ctx, cloud.TPMRequest{
		Data: blk.Data, Binding: binding, CSR: csr.Name, CSRUID: string(csr.UID), Now: d.now(), Quote: p.Quote,
	}, att, in)
	var challenge *tpm.ChallengeNeeded
	if errors.As(err, &challenge) {
		if len(challenge.Challenge) == 0 {
			return false, nil, fmt.Errorf("instance %s: the TPM verifier asked for a credential activation round without a challenge", in.ID)
		}
		dd := deny("tpm", ReasonTPMChallenge, "the attestation key of instance %s is proven by credential activation: the challenge is in the annotation %s; the node answers with a new CSR", in.ID, tpm.ChallengeAnnotation)
		dd.Challenge = challenge.Challenge
		return false, &dd, nil
	}
	var tr *tpm.Rejection
	if errors.As(err, &tr) {
		dd := deny("tpm", tr.Reason, "TPM evidence of instance %s: %v", in.ID, tr.Err)
		return false, &dd, nil
	}
	if r, rejected := cloud.IsRejection(err); rejected {
		dd := deny("tpm", r.Reason, "TPM evidence of instance %s: %v", in.ID, r.Err)
		return false, &dd, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("TPM evidence of instance %s: %w", in.ID, err)
	}
	return true, nil, nil
}

// verifierAllows runs the verifier's own check of the instance's current
// record, when it has one (cloud.InstanceChecker): a rejection denies, any
// other error is returned to be retried.
func verifierAllows(v cloud.EvidenceVerifier, att cloud.Attestation, in view.Instance) (*Decision, error) {
	c, ok := v.(cloud.InstanceChecker)
	if !ok {
		return nil, nil
	}
	err := c.CheckInstance(att, in)
	if r, rejected := cloud.IsRejection(err); rejected {
		dd := deny("instance", r.Reason, "%v", r.Err)
		return &dd, nil
	}
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", in.ID, err)
	}
	return nil, nil
}

// signedInstance finds the instance the cloud signed for, by its id; a
// providerID the verifier derived must agree with the cloud's record.
func (d *Decider) signedInstance(ctx context.Context, att cloud.Attestation) (view.Instance, *Decision, error) {
	in, err := d.instances.ByID(ctx, att.InstanceID, d.cfg.InstanceMaxAge)
	if errors.Is(err, view.ErrNotFound) {
		dd := deny("instance", ReasonInstanceNotInCluster, "instance %s is not an instance of cluster %q", att.InstanceID, d.cfg.Cluster)
		return in, &dd, nil
	}
	if err != nil {
		return in, nil, err
	}
	if att.ProviderID != "" && att.ProviderID != in.ProviderID {
		dd := deny("instance", ReasonInstanceNotInCluster, "the evidence names %s, the cloud's record of instance %s is %s", att.ProviderID, in.ID, in.ProviderID)
		return in, &dd, nil
	}
	return in, nil, nil
}

// TicketClockSkew is tolerated between the clocks of the ticket's issuer,
// the approver and the cloud: on a ticket's iat and exp, and on the
// instance's creation time against them.
const TicketClockSkew = time.Minute

// ticketInstance finds the instance a join ticket names: the one instance
// of that name in the cloud's record (terminated ones aside: they hold no
// ticket any more), created after the ticket was issued and before it
// expired, so made for it and not before it.
func (d *Decider) ticketInstance(ctx context.Context, att cloud.Attestation) (view.Instance, *Decision, error) {
	all, err := d.instances.Named(ctx, att.InstanceName, d.cfg.InstanceMaxAge)
	if errors.Is(err, view.ErrNotFound) || (err == nil && len(all) == 0) {
		dd := deny("instance", ReasonInstanceNotInCluster, "no instance named %q in cluster %q", att.InstanceName, d.cfg.Cluster)
		return view.Instance{}, &dd, nil
	}
	if err != nil {
		return view.Instance{}, nil, err
	}
	var live []view.Instance
	for _, in := range all {
		if in.State != view.StateTerminated {
			live = append(live, in)
		}
	}
	if len(live) > 1 {
		ids := make([]string, len(live))
		for i, in := range live {
			ids[i] = in.ID
		}
		dd := deny("instance", ReasonInstanceNameAmbiguous, "%d instances are named %q (%s); a ticket holds for one", len(live), att.InstanceName, strings.Join(ids, ", "))
		return view.Instance{}, &dd, nil
	}
	in := all[0] // terminated: instanceUsable denies it
	if len(live) == 1 {
		in = live[0]
	}
	switch {
	case in.Created.IsZero():
		dd := deny("instance", ReasonInstanceCreatedOutsideTicket, "the cloud does not say when instance %s was created; a join ticket needs it", in.ID)
		return in, &dd, nil
	case in.Created.Before(att.IssuedAt.Add(-TicketClockSkew)), in.Created.After(att.ExpiresAt.Add(TicketClockSkew)):
		dd := deny("instance", ReasonInstanceCreatedOutsideTicket, "instance %s was created at %s, outside the ticket's life (%s to %s)", in.ID,
			in.Created.UTC().Format(time.RFC3339), att.IssuedAt.UTC().Format(time.RFC3339), att.ExpiresAt.UTC().Format(time.RFC3339))
		return in, &dd, nil
	}
	return in, nil, nil
}

func (d *Decider) decideRenewal(ctx context.Context, name string) (Decision, error) {
	in, dd, err := d.namedNodeInstance(ctx, name)
	if dd != nil || err != nil {
		return orZero(dd), err
	}
	return Decision{Approve: true, Check: "all", Reason: ReasonApproved,
		Message: fmt.Sprintf("renewal by node %s of instance %s, running in the cloud", name, in.ID)}, nil
}

// namedNodeInstance finds Node name and checks the instance behind it.
func (d *Decider) namedNodeInstance(ctx context.Context, name string) (view.Instance, *Decision, error) {
	node, err := d.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		dd := deny("node", ReasonNodeNotFound, "node %s does not exist", name)
		return view.Instance{}, &dd, nil
	}
	if err != nil {
		return view.Instance{}, nil, err
	}
	return d.nodeInstance(ctx, node)
}

func orZero(d *Decision) Decision {
	if d == nil {
		return Decision{}
	}
	return *d
}

// nodeInstance finds and checks the instance behind a Node's providerID.
func (d *Decider) nodeInstance(ctx context.Context, node *v1.Node) (view.Instance, *Decision, error) {
	if node.Spec.ProviderID == "" {
		dd := deny("instance", ReasonNodeNotInitialized, "node %s has no providerID yet", node.Name)
		return view.Instance{}, &dd, nil
	}
	in, err := d.instances.ByProviderID(ctx, node.Spec.ProviderID, d.cfg.InstanceMaxAge)
	if errors.Is(err, view.ErrNotFound) {
		dd := deny("instance", ReasonInstanceNotInCluster, "no instance %s in cluster %q", node.Spec.ProviderID, d.cfg.Cluster)
		return view.Instance{}, &dd, nil
	}
	if err != nil {
		return view.Instance{}, nil, err
	}
	if dd := d.instanceUsable(in); dd != nil {
		return in, dd, nil
	}
	if in.NodeName == "" || in.NodeName != node.Name {
		dd := deny("nodename", ReasonNodeNameMismatch, "node %s carries the providerID of instance %s, whose node is %q", node.Name, in.ID, in.NodeName)
		return in, &dd, nil
	}
	return in, nil, nil
}

func (d *Decider) instanceUsable(in view.Instance) *Decision {
	if in.Cluster != d.cfg.Cluster {
		dd := deny("instance", ReasonInstanceNotInCluster, "instance %s belongs to cluster %q, not %q", in.ID, in.Cluster, d.cfg.Cluster)
		return &dd
	}
	if in.State != view.StateRunning {
		dd := deny("instance", ReasonInstanceNotRunning, "instance %s is %s", in.ID, in.State)
		return &dd
	}
	return nil
}

func (d *Decider) decideServing(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest) (Decision, error) {
	var apiserver map[string]bool
	if d.cfg.APIServerNames != nil {
		var err error
		if apiserver, err = d.cfg.APIServerNames.Reserved(); err != nil {
			return Decision{}, err
		}
	}
	name, bad := nodeSubject(req)
	if bad != nil {
		return *bad, nil
	}
	if csr.Spec.Username != nodeUserPrefix+name || !slices.Contains(csr.Spec.Groups, groupNodes) {
		return deny("requester", ReasonRequesterMismatch, "a serving certificate of node %s is requested only by that node, not %q", name, csr.Spec.Username), nil
	}
	if dd := usagesExactly(csr, req, certificatesv1.UsageServerAuth); dd != nil {
		return *dd, nil
	}
	if len(req.EmailAddresses)+len(req.URIs) > 0 {
		return deny("sans", ReasonBadSAN, "email and URI SANs are not allowed"), nil
	}
	if n := len(req.DNSNames) + len(req.IPAddresses); n == 0 || n > d.cfg.MaxSANs {
		return deny("sans", ReasonTooManySANs, "%d SANs, want 1-%d", n, d.cfg.MaxSANs), nil
	}
	in, dd, err := d.namedNodeInstance(ctx, name)
	if dd != nil || err != nil {
		return orZero(dd), err
	}
	// What may back a SAN: the instance's addresses and names that the
	// cloud assigns, and the Node's own name. Those a guest or a tenant
	// asserts (view.Instance.Asserted) back none, unless the backend is
	// configured to trust their source (then it does not mark them).
	ips, names := map[string]bool{}, map[string]bool{normalizeName(name): true}
	asserted := map[string]string{}
	for _, a := range in.Addresses {
		if by, ok := in.Asserted[a.Address]; ok {
			asserted[view.AddressKey(a.Address)] = by
			continue
		}
		switch a.Type {
		case v1.NodeInternalIP, v1.NodeExternalIP:
			if ip := net.ParseIP(a.Address); ip != nil {
				ips[ip.String()] = true
			}
		case v1.NodeHostName, v1.NodeInternalDNS, v1.NodeExternalDNS:
			names[normalizeName(a.Address)] = true
		}
	}
	notOfInstance := func(kind, san string) Decision {
		if by, ok := asserted[view.AddressKey(san)]; ok {
			return deny("sans", ReasonSANAsserted, "%s SAN %s of instance %s is asserted by %s, not assigned by the cloud; the backend's configuration does not trust that source for serving certificates", kind, san, in.ID, by)
		}
		return deny("sans", ReasonSANNotOfInstance, "%s SAN %s is not an address of instance %s", kind, san, in.ID)
	}
	for _, dns := range req.DNSNames {
		n := normalizeName(dns)
		switch {
		case strings.Contains(n, "*"):
			return deny("sans", ReasonBadSAN, "wildcard DNS SAN %q", dns), nil
		case d.reserved(n):
			return deny("sans", ReasonReservedName, "DNS SAN %q is one of the cluster's own names", dns), nil
		case apiserver[n]:
			return deny("sans", ReasonReservedName, "DNS SAN %q is a name in the apiserver's serving certificate", dns), nil
		case !names[n]:
			return notOfInstance("DNS", dns), nil
		}
	}
	// Reserved IPs first: an instance the cloud lists with one of them gets
	// no certificate for it either (a released IP taken by a new instance,
	// a VIP) (docs/csrapprover.md).
	sans := slices.Clone(req.DNSNames)
	for _, ip := range req.IPAddresses {
		switch s := ip.String(); {
		case d.reservedSet[s]:
			return deny("sans", ReasonReservedName, "IP SAN %s is in --reserved-names", ip), nil
		case apiserver[s]:
			return deny("sans", ReasonReservedName, "IP SAN %s is an address in the apiserver's serving certificate", ip), nil
		case !ips[s]:
			return notOfInstance("IP", s), nil
		}
		sans = append(sans, ip.String())
	}
	if dd, err := d.claimedElsewhere(ctx, name, in, sans); dd != nil || err != nil {
		return orZero(dd), err
	}
	return Decision{Approve: true, Check: "all", Reason: ReasonApproved,
		Message: fmt.Sprintf("every SAN is an address or name of instance %s, running in the cloud", in.ID)}, nil
}

// claimedElsewhere denies a serving certificate any of whose SANs another
// instance of the cluster lists too (among its addresses or as its node
// name), or another Node carries as its name or address: whichever of the
// two is genuine, neither gets a certificate for it. A guest that reports
// another node's address, or a tenant who sets it, so gains nothing, on
// every backend and whatever it trusts (docs/security.md).
func (d *Decider) claimedElsewhere(ctx context.Context, node string, in view.Instance, sans []string) (*Decision, error) {
	for _, san := range sans {
		others, err := d.instances.WithAddress(ctx, san, d.cfg.InstanceMaxAge)
		if err != nil {
			return nil, fmt.Errorf("instances listing %s: %w", san, err)
		}
		for _, o := range others {
			if o.ProviderID != in.ProviderID || o.ID != in.ID {
				dd := deny("sans", ReasonAddressClaimedTwice, "SAN %s is listed by instance %s (%s) of node %q and by instance %s (%s) of node %q; neither gets a certificate for it",
					san, in.ID, in.Name, node, o.ID, o.Name, o.NodeName)
				return &dd, nil
			}
		}
		holders, err := d.nodes.WithAddress(view.AddressKey(san))
		if err != nil {
			return nil, fmt.Errorf("nodes carrying %s: %w", san, err)
		}
		for _, n := range holders {
			if n.Name != node {
				dd := deny("sans", ReasonAddressClaimedTwice, "SAN %s is an address of instance %s (%s) of node %q and Node %s (providerID %q) carries it; neither gets a certificate for it",
					san, in.ID, in.Name, node, n.Name, n.Spec.ProviderID)
				return &dd, nil
			}
		}
		if net.ParseIP(san) != nil {
			continue
		}
		other, err := d.nodes.Get(normalizeName(san))
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		case other.Name != node:
			dd := deny("sans", ReasonAddressClaimedTwice, "SAN %s is a name of instance %s (%s) of node %q and the name of Node %s (providerID %q); neither gets a certificate for it",
				san, in.ID, in.Name, node, other.Name, other.Spec.ProviderID)
			return &dd, nil
		}
	}
	return nil, nil
}

func normalizeName(s string) string { return strings.TrimSuffix(strings.ToLower(s), ".") }

func (d *Decider) reserved(n string) bool {
	if n == "kubernetes" || n == "localhost" || strings.HasPrefix(n, "kubernetes.default") || strings.HasSuffix(n, ".svc") ||
		strings.Contains(n, ".svc.") {
		return true
	}
	return d.reservedSet[n]
}

func nodeReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
