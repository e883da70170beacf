package node

import (
	"fmt"
	"io"

	"github.com/google/go-tpm-tools/client"
	"github.com/google/go-tpm/legacy/tpm2"

	"github.com/mooring-dev/mooring/cloud/tpm/wire"
)

// Activate answers the approver's credential activation challenge (the
// bytes tpm.Challenger.Challenge made, as the CSR's annotation carried
// them after wire.DecodeAnnotation): TPM2_ActivateCredential with the
// key's AK as the activated object and the RSA endorsement key as the
// protector, the EK authorized by its policy (PolicySecret on the
// endorsement hierarchy, go-tpm-tools' EK session). The TPM releases the
// secret only when it holds the EK the challenge was sealed to and the
// loaded AK has the name the challenge was made for. The secret goes into
// the next CSR's evidence (wire.Activation).
func Activate(rw io.ReadWriter, key Key, challenge []byte) ([]byte, error) {
	c, err := wire.ParseChallenge(challenge)
	if err != nil {
		return nil, err
	}
	ak, err := key.Load(rw)
	if err != nil {
		return nil, fmt.Errorf("load the attestation key: %w", err)
	}
	defer ak.Close()
	ek, err := client.EndorsementKeyRSA(rw)
	if err != nil {
		return nil, fmt.Errorf("load the endorsement key: %w", err)
	}
	defer ek.Close()
	session, err := client.NewEKSession(rw)
	if err != nil {
		return nil, fmt.Errorf("start the endorsement key's policy session: %w", err)
	}
	defer session.Close()
	ekAuth, err := session.Auth()
	if err != nil {
		return nil, fmt.Errorf("satisfy the endorsement key's policy: %w", err)
	}
	// The AK of go-tpm-tools' templates has an empty auth value and no
	// policy: a password session authorizes it.
	akAuth := tpm2.AuthCommand{Session: tpm2.HandlePasswordSession, Attributes: tpm2.AttrContinueSession}
	// Generate's blobs carry their TPM2B size prefix; the command's
	// parameters are the bodies.
	secret, err := tpm2.ActivateCredentialUsingAuth(rw, []tpm2.AuthCommand{akAuth, ekAuth}, ak.Handle(), ek.Handle(), c.Credential[2:], c.Secret[2:])
	if err != nil {
		return nil, fmt.Errorf("activate the credential: %w", err)
	}
	return secret, nil
}
