// Package tpm is what every backend shares of TPM-rooted identity: the
// evidence a node's TPM makes for a CSR (a quote by an attestation key over
// a nonce that binds the CSR's key and the time), its wire form, and the
// checks that need no cloud (the quote's signature, nonce and PCRs, the
// PCR policy, an uncertified attestation key's attributes, the credential
// activation challenge). Where the attestation key comes from, and how it
// is proven to be the instance's (a certificate the cloud issued for it, or
// the cloud's API), is each backend's: the node half in its agentid, the
// check in its attest.go (cloud.TPMVerifier).
//
// The node half that talks to a TPM is in package tpm/node, and the wire
// form both halves share (the evidence, the challenge) in tpm/wire, whose
// names this package repeats: those two are all mooring-agent links. Nothing here parses a TPM structure by hand:
// go-tpm decodes them, go-attestation verifies quotes, go-tpm-tools drives
// the TPM.
package tpm
