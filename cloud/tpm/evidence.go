package tpm

import (
	"time"

	"github.com/mooring-dev/mooring/cloud/tpm/wire"
)

// The evidence's and the challenge's wire form live in cloud/tpm/wire,
// which the node agent links without the checks; these are its names here.
const (
	EvidenceType        = wire.EvidenceType
	Version             = wire.Version
	MaxCerts            = wire.MaxCerts
	MaxPCRs             = wire.MaxPCRs
	ChallengeAnnotation = wire.ChallengeAnnotation
)

type (
	Evidence   = wire.Evidence
	Activation = wire.Activation
	Challenge  = wire.Challenge
)

var (
	ErrMalformed = wire.ErrMalformed
	ErrNoTPM     = wire.ErrNoTPM
)

// Nonce is wire.Nonce: the quote's qualifying data for a binding at t.
func Nonce(binding string, t time.Time) []byte { return wire.Nonce(binding, t) }

// Parse is wire.Parse: the evidence decoded strictly, verified not at all.
func Parse(data []byte) (*Evidence, error) { return wire.Parse(data) }

// ParseChallenge is wire.ParseChallenge.
func ParseChallenge(data []byte) (*Challenge, error) { return wire.ParseChallenge(data) }

// EncodeAnnotation is wire.EncodeAnnotation.
func EncodeAnnotation(challenge []byte) string { return wire.EncodeAnnotation(challenge) }

// DecodeAnnotation is wire.DecodeAnnotation.
func DecodeAnnotation(v string) ([]byte, error) { return wire.DecodeAnnotation(v) }
