package tpm

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/legacy/tpm2/credactivation"
)

// challengeDomain separates the challenge secret's HMAC input from any
// other use of the key.
const challengeDomain = "mooring tpm credential activation v1"

// Challenger makes and checks credential activation challenges without
// keeping state: the challenge's secret is an HMAC, under a key the
// Challenger draws at random when it is made, over the CSR the challenge is
// written on (its UID), the CSR key's binding, the AK's name and the EK's
// name. Only a TPM holding that EK's private key, with that AK loaded, can
// recover it (TPM2_ActivateCredential checks the AK's name), and the answer
// is good for that CSR key only. The secret opens with the Challenger's
// random id, so that an answer to another Challenger's challenge (an
// approver process since restarted, another leader) is told from a wrong
// one: Verify challenges such an answer again, and the agent's join costs
// one more round.
type Challenger struct {
	id  []byte // challengerIDSize random bytes, not secret
	key []byte
}

// The secret: the Challenger's id, then the HMAC-SHA-256 truncated to 24
// bytes; 32 bytes in all, the largest secret every TPM 2.0 takes (the
// size of a SHA-256 digest).
const (
	challengerIDSize = 8
	secretMACSize    = 24
)

// NewChallenger makes a Challenger with a fresh random key and id.
func NewChallenger() (*Challenger, error) {
	b := make([]byte, challengerIDSize+32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("TPM challenger key: %w", err)
	}
	return &Challenger{id: b[:challengerIDSize], key: b[challengerIDSize:]}, nil
}

// keys decodes the EK's and AK's public areas (TPMT_PUBLIC) and checks
// what the challenge needs of them: an AK with the attributes of one
// (CheckAKAttributes), an RSA EK that is a restricted decryption key with
// an AES symmetric scheme (the TCG EK templates). A *Rejection says which
// is wrong.
func keys(ekPublic, akPublic []byte) (ek tpm2.Public, akName, ekName tpm2.Name, err error) {
	if err = CheckAKAttributes(akPublic); err != nil {
		return
	}
	ak, err := tpm2.DecodePublic(akPublic)
	if err != nil {
		err = Reject(RejectMalformed, "attestation key: %v", err)
		return
	}
	if akName, err = ak.Name(); err != nil || akName.Digest == nil {
		err = Reject(RejectMalformed, "attestation key's name: %v", err)
		return
	}
	if len(ekPublic) == 0 {
		err = Reject(RejectMalformed, "no endorsement key public area for credential activation")
		return
	}
	if ek, err = tpm2.DecodePublic(ekPublic); err != nil {
		err = Reject(RejectMalformed, "endorsement key: %v", err)
		return
	}
	if ek.Type != tpm2.AlgRSA || ek.RSAParameters == nil {
		err = Reject(RejectKey, "the endorsement key is of type 0x%04x; credential activation here needs an RSA EK", uint16(ek.Type))
		return
	}
	want := tpm2.FlagRestricted | tpm2.FlagDecrypt | tpm2.FlagFixedTPM | tpm2.FlagFixedParent
	if ek.Attributes&want != want || ek.Attributes&tpm2.FlagSign != 0 {
		err = Reject(RejectKey, "the endorsement key's attributes %#x are not a restricted decryption key's (fixedTPM, fixedParent)", uint32(ek.Attributes))
		return
	}
	if sym := ek.RSAParameters.Symmetric; sym == nil || sym.Alg != tpm2.AlgAES || (sym.KeyBits != 128 && sym.KeyBits != 256) {
		err = Reject(RejectKey, "the endorsement key has no AES-128 or AES-256 symmetric scheme")
		return
	}
	if ekName, err = ek.Name(); err != nil || ekName.Digest == nil {
		err = Reject(RejectMalformed, "endorsement key's name: %v", err)
		return
	}
	return ek, akName, ekName, nil
}

// secret is the HMAC for one challenge: each part length-prefixed.
func (c *Challenger) secret(csrUID, binding string, akName, ekName tpm2.Name) ([]byte, error) {
	an, err := akName.Digest.Encode()
	if err != nil {
		return nil, err
	}
	en, err := ekName.Digest.Encode()
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, c.key)
	for _, p := range [][]byte{[]byte(challengeDomain), c.id, []byte(csrUID), []byte(binding), an, en} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		m.Write(n[:])
		m.Write(p)
	}
	return append(bytes.Clone(c.id), m.Sum(nil)[:secretMACSize]...), nil
}

// Challenge makes the credential activation challenge for the AK and EK
// (TPMT_PUBLIC each) of the CSR csrUID whose key has binding: go-tpm's
// credactivation.Generate seals the secret to the EK, for the AK's name.
// It returns the challenge's wire form (ParseChallenge;
// EncodeAnnotation for the CSR's annotation). An AK that is not a
// restricted TPM-resident signing key, or an EK unfit for it, is a
// *Rejection: no challenge is made for them.
func (c *Challenger) Challenge(ekPublic, akPublic []byte, csrUID, binding string) ([]byte, error) {
	if csrUID == "" || binding == "" {
		return nil, errors.New("TPM challenge: no CSR UID or binding")
	}
	ek, akName, ekName, err := keys(ekPublic, akPublic)
	if err != nil {
		return nil, err
	}
	secret, err := c.secret(csrUID, binding, akName, ekName)
	if err != nil {
		return nil, fmt.Errorf("TPM challenge: %w", err)
	}
	pub, err := ek.Key()
	if err != nil {
		return nil, Reject(RejectMalformed, "endorsement key: %v", err)
	}
	if _, ok := pub.(*rsa.PublicKey); !ok {
		return nil, Reject(RejectKey, "the endorsement key is no RSA key")
	}
	cred, encSecret, err := credactivation.Generate(akName.Digest, pub, int(ek.RSAParameters.Symmetric.KeyBits)/8, secret)
	if err != nil {
		return nil, Reject(RejectKey, "credential activation to this endorsement key: %v", err)
	}
	return json.Marshal(Challenge{Credential: cred, Secret: encSecret})
}

// Check checks a node's answer (a) to a challenge made for these AK and
// EK public areas and the CSR key's binding, on the CSR a names. The
// comparison is constant-time. A wrong or missing answer is a *Rejection
// with RejectKey; so is an answer to another Challenger's challenge, which
// Verify challenges again instead.
func (c *Challenger) Check(ekPublic, akPublic []byte, a *Activation, binding string) error {
	if a == nil {
		return Reject(RejectKey, "no answer to the credential activation challenge")
	}
	_, akName, ekName, err := keys(ekPublic, akPublic)
	if err != nil {
		return err
	}
	want, err := c.secret(a.ChallengeUID, binding, akName, ekName)
	if err != nil {
		return fmt.Errorf("TPM challenge: %w", err)
	}
	if !hmac.Equal(want, a.Secret) {
		if c.another(a) {
			return Reject(RejectKey, "the answer to the credential activation challenge on CSR %q answers another approver process's challenge (one that restarted since, or another leader)", a.ChallengeCSR)
		}
		return Reject(RejectKey, "the answer to the credential activation challenge on CSR %q is not the secret issued for this attestation key, endorsement key and CSR key", a.ChallengeCSR)
	}
	return nil
}

// another: a's secret has the shape of a secret, made by another
// Challenger.
func (c *Challenger) another(a *Activation) bool {
	return len(a.Secret) == challengerIDSize+secretMACSize && !bytes.Equal(a.Secret[:challengerIDSize], c.id)
}

// Verify is a backend's whole credential activation step once it has
// checked the quote and that the EK is the instance's: without an answer
// (a nil), or with an answer to another Challenger's challenge, it makes a
// challenge for this CSR (csrUID) and returns *ChallengeNeeded; with an
// answer, Check's verdict. An answer to another Challenger's challenge is
// not refused: its approver may have restarted between the two rounds,
// which costs the agent one more round, not its join; it cannot pass
// either.
func (c *Challenger) Verify(ekPublic, akPublic []byte, a *Activation, csrUID, binding string) error {
	if a != nil {
		err := c.Check(ekPublic, akPublic, a, binding)
		if err == nil || !c.another(a) {
			return err
		}
	}
	challenge, err := c.Challenge(ekPublic, akPublic, csrUID, binding)
	if err != nil {
		return err
	}
	return &ChallengeNeeded{Challenge: challenge}
}
