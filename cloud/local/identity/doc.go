// Package identity signs and verifies the local cloud's instance identity
// tokens: compact JWS (ES256) whose claims are the cloud's record of an
// instance, with an audience the caller chooses. The node agent sets the
// audience to the binding value of its CSR key, so a token proves both which
// machine asked and for which key.
//
// The JOSE formats (JWS signing and verification, JWK Sets, RFC 7638
// thumbprints for key ids) are github.com/go-jose/go-jose/v4's; this package
// adds the policy around them.
//
// The signing side (KeySet) keeps an active P-256 key and the retired keys
// whose tokens may still be valid, and publishes all of them as a JWKS.
// The verifying side (Verifier) trusts a fixed set of keys, looks a token's
// key up only by kid, accepts only ES256 (the only algorithm it hands the
// JWS parser), and refuses headers that carry their own keys or extensions,
// checking both the raw protected header and the header as parsed. Token
// ids (jti) are unique so that callers can refuse replays; ECDSA signatures
// are malleable, so replay checks must key on jti, not on the token bytes.
package identity
