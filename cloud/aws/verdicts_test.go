package aws

import (
	"context"
	"testing"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

// Issue 28: STS answers that blame the evidence are verdicts, else a
// presigned request that can never verify is retried for ever. Every code
// here was transient before.
func TestSTSEvidenceFaultsAreVerdicts(t *testing.T) {
	const acct = "123456789012"
	for code, want := range map[string]string{
		"MissingAuthenticationToken": cloud.RejectSignature,
		"ExpiredTokenException":      cloud.RejectExpired,
	} {
		t.Run(code, func(t *testing.T) {
			s, _ := fakeSTS(t, 403, errorXML(code))
			v, err := NewVerifier(VerifierOptions{STSEndpoint: s.URL, Region: "us-east-1", Account: acct, NodeRoles: []string{testRole}})
			if err != nil {
				t.Fatal(err)
			}
			b := nodeidtest.NewBinding(t)
			_, err = v.Verify(context.Background(), fakeEvidence(t, s.URL, b, t0), b, t0)
			wantReject(t, err, want)
		})
	}
}
