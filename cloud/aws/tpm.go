package aws

// The approver's check of a join proven by the instance's NitroTPM
// (cloud/tpm). AWS certifies no attestation key (AK), and documents no
// endorsement key (EK) certificate for NitroTPM: what vouches for the
// TPM is EC2's GetInstanceTpmEkPub, which names the EK of the instance
// the cloud's evidence proved. The AK is proven to be in that TPM by
// credential activation: a challenge sealed to that EK for the AK's name,
// which only that TPM, holding that AK, can answer.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/google/go-tpm/legacy/tpm2"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/view"
)

// EndorsementKeyAPI is the EC2 call VerifyTPM makes; the SDK's *ec2.Client
// has it.
type EndorsementKeyAPI interface {
	GetInstanceTpmEkPub(ctx context.Context, in *ec2.GetInstanceTpmEkPubInput, optFns ...func(*ec2.Options)) (*ec2.GetInstanceTpmEkPubOutput, error)
}

var _ cloud.TPMVerifier = (*Cloud)(nil)

// maxEKPublic bounds the endorsement key EC2 answers with (an RSA 2048
// key's TPMT_PUBLIC is about 300 bytes).
const maxEKPublic = 4 << 10

// VerifyTPM checks a join's TPM evidence for the instance the cloud's
// evidence named (att) and the view found (in):
//   - EC2 describes the instance with NitroTPM (tpmSupport v2.0): no key
//     of any other instance's TPM is vouched for by AWS;
//   - the quote verifies for the CSR key's binding, in its window and
//     under the PCR policy (tpm.VerifyQuote), by an AK with the
//     attributes of one a TPM made and keeps (tpm.CheckAKAttributes);
//   - the evidence's EK is the key GetInstanceTpmEkPub returns for the
//     instance (rsa-2048, tpmt);
//   - the AK is in the TPM of that EK (tpm.Challenger.Verify): without an
//     answer, or with an answer to another approver process's challenge,
//     a challenge sealed to EC2's EK for the AK's name
//     (*tpm.ChallengeNeeded); with an answer to this one's, the answer.
//
// Verdicts are *tpm.Rejection; an EC2 call that fails (throttling, an
// instance EC2 does not show yet, an answer that cannot be read) is
// transient.
func (c *Cloud) VerifyTPM(ctx context.Context, req cloud.TPMRequest, att cloud.Attestation, in view.Instance) error {
	e, err := tpm.Parse(req.Data)
	if err != nil {
		return tpm.Reject(tpm.RejectMalformed, "%v", err)
	}
	if !in.VTPM {
		return tpm.Reject(tpm.RejectKey, "EC2 describes instance %s without NitroTPM (tpmSupport is not %s): AWS vouches for no TPM of it", in.ID, nitroTPMSupport)
	}
	if att.InstanceID == "" || att.InstanceID != in.ID {
		return fmt.Errorf("the cloud's evidence names instance %q, the view found %q", att.InstanceID, in.ID)
	}
	if len(e.EKPublic) == 0 {
		return tpm.Reject(tpm.RejectMalformed, "no endorsement key: a NitroTPM's attestation key is proven through the endorsement key EC2 reports")
	}
	if _, err := tpm.VerifyQuote(e, req.Binding, req.Now, req.Quote); err != nil {
		return err
	}
	if err := tpm.CheckAKAttributes(e.AKPublic); err != nil {
		return err
	}
	ek, err := c.endorsementKey(ctx, in.ID)
	if err != nil {
		return err
	}
	if err := sameEK(e.EKPublic, ek); err != nil {
		return err
	}
	if err := c.challenger.Verify(ek, e.AKPublic, e.Activation, req.CSRUID, req.Binding); err != nil {
		var ch *tpm.ChallengeNeeded
		if errors.As(err, &ch) {
			klog.V(2).InfoS("NitroTPM credential activation challenge issued", "instance", in.ID, "csr", req.CSR)
		}
		return err
	}
	klog.V(4).InfoS("NitroTPM evidence verified", "instance", in.ID, "csr", req.CSR, "challengeCSR", e.Activation.ChallengeCSR)
	return nil
}

// sameEK rejects an evidence EK that is not the key EC2 reports (the
// public areas' keys are compared: EC2's tpmt form and the node's may
// differ in encoding, not in key).
func sameEK(evidence, ec2EK []byte) error {
	pub, err := tpm2.DecodePublic(evidence)
	if err != nil {
		return tpm.Reject(tpm.RejectMalformed, "endorsement key: %v", err)
	}
	got, err := pub.Key()
	if err != nil {
		return tpm.Reject(tpm.RejectMalformed, "endorsement key: %v", err)
	}
	want, _ := tpm2.DecodePublic(ec2EK) // endorsementKey decoded it
	wantKey, _ := want.Key()
	if !tpm.SameKey(got, wantKey) {
		return tpm.Reject(tpm.RejectKey, "the evidence's endorsement key is not the one EC2 reports for the instance (GetInstanceTpmEkPub): another TPM's")
	}
	return nil
}

// endorsementKey asks EC2 for the instance's RSA 2048 endorsement key in
// TPM 2.0 form (TPMT_PUBLIC). Every failure is transient: a throttled or
// failed call, an instance EC2 does not show yet (its eventual
// consistency after launch), an answer that is not an RSA key's public
// area.
func (c *Cloud) endorsementKey(ctx context.Context, id string) ([]byte, error) {
	api, ok := c.ec2.(EndorsementKeyAPI)
	if !ok {
		return nil, fmt.Errorf("the EC2 client (%T) cannot call GetInstanceTpmEkPub", c.ec2)
	}
	if t := c.cfg.RequestTimeout.Duration; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	out, err := api.GetInstanceTpmEkPub(ctx, &ec2.GetInstanceTpmEkPubInput{
		InstanceId: aws.String(id),
		KeyType:    ec2types.EkPubKeyTypeRsa2048,
		KeyFormat:  ec2types.EkPubKeyFormatTpmt,
	})
	if err != nil {
		return nil, fmt.Errorf("ec2 GetInstanceTpmEkPub %s: %w", id, err)
	}
	bad := func(format string, args ...any) ([]byte, error) {
		return nil, fmt.Errorf("ec2 GetInstanceTpmEkPub %s: "+format, append([]any{id}, args...)...)
	}
	switch {
	case aws.ToString(out.InstanceId) != id:
		return bad("the answer is for instance %q", aws.ToString(out.InstanceId))
	case out.KeyType != ec2types.EkPubKeyTypeRsa2048 || out.KeyFormat != ec2types.EkPubKeyFormatTpmt:
		return bad("the answer is a %s key in %s form, want rsa-2048 in tpmt", out.KeyType, out.KeyFormat)
	case len(aws.ToString(out.KeyValue)) > base64.StdEncoding.EncodedLen(maxEKPublic):
		return bad("a key value over %d bytes", maxEKPublic)
	}
	public, err := base64.StdEncoding.DecodeString(aws.ToString(out.KeyValue))
	if err != nil {
		return bad("the key value is not base64: %v", err)
	}
	pub, err := tpm2.DecodePublic(public)
	if err != nil {
		return bad("the key value is not a TPMT_PUBLIC: %v", err)
	}
	if pub.Type != tpm2.AlgRSA {
		return bad("the key value is a key of type 0x%04x, not RSA", uint16(pub.Type))
	}
	if _, err := pub.Key(); err != nil {
		return bad("the key value: %v", err)
	}
	return public, nil
}
