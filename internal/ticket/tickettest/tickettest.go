// Package tickettest makes the tokens an attacker would try on the join
// ticket checks: any claims, signed through go-jose with any key, algorithm,
// kid and header. Only for tests.
package tickettest

import (
	"encoding/json"

	jose "github.com/go-jose/go-jose/v4"
)

// Sign signs claims (marshalled as JSON) with key under alg, naming kid in
// the header, with opts' extra header fields, and returns the compact form.
func Sign(key any, alg jose.SignatureAlgorithm, kid string, opts *jose.SignerOptions, claims any) (string, error) {
	if opts == nil {
		opts = &jose.SignerOptions{}
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, opts)
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}
