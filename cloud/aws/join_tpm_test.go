package aws

// Joins proven by the instance's NitroTPM, judged by the approver's own
// decision code (csrapprover.Decider) under --tpm=required over this
// backend: the STS evidence first, the TPM's quote after it, and the
// credential activation round between two CSRs.

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/tpm"
	tpmnode "github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/csrapprover"
	"github.com/mooring-dev/mooring/internal/evidence"
)

// tpmDecider judges with the TPM policy mode over the world's Cloud.
func (w *joinWorld) tpmDecider(mode string) *csrapprover.Decider {
	return csrapprover.NewDecider(csrapprover.Config{Cluster: w.cloud.ClusterTag(), TPM: csrapprover.TPMPolicy{Mode: mode, Verifier: w.cloud}},
		w.cloud.EvidenceVerifiers(), w.cloud.InstanceView(), w.nodes, noReplays{})
}

// tpmCSR is a join CSR of the instance for key, its STS evidence made now
// and, when seed is not 0, that TPM's quote (with the answer) after it.
func (w *joinWorld) tpmCSR(in awstest.Instance, key *ecdsa.PrivateKey, binding, name string, seed int64, answer *tpm.Activation) *certificatesv1.CertificateSigningRequest {
	w.t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + in.PrivateDNSName, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		w.t.Fatal(err)
	}
	blocks := []evidence.Block{w.evidence(in, binding)}
	if seed != 0 {
		blocks = append(blocks, evidence.Block{Type: tpm.EvidenceType, Data: quoteWith(w.t, seed, nil, binding, time.Now(), answer)})
	}
	req, err := evidence.Encode(der, blocks...)
	if err != nil {
		w.t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: req, SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Username: "system:bootstrap:abcdef", Groups: []string{"system:bootstrappers", "system:authenticated"},
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}

// TestJoinProvenByNitroTPM: under --tpm=required an instance with NitroTPM
// joins in two CSRs (challenge, then the answer), each with fresh STS
// evidence; its metadata evidence alone is denied; so is a join whose TPM
// is not the one EC2 reports, and (under preferred) an instance EC2 says
// has NitroTPM that leaves its TPM evidence out.
func TestJoinProvenByNitroTPM(t *testing.T) {
	w := newJoinWorld(t, func(*Config, *awstest.Cloud) {})
	in := w.env.put(t, awstest.Instance{PrivateIP: "127.0.0.41", Role: joinRole, Tags: map[string]string{clusterTag: "owned"}, NitroTPM: nitroTPM(t, tpmA)})
	key, binding := nodeidtest.BoundKey(t)
	ctx := context.Background()
	decide := func(what string, d *csrapprover.Decider, csr *certificatesv1.CertificateSigningRequest, want string) csrapprover.Decision {
		t.Helper()
		dec, err := d.Decide(ctx, csr)
		if err != nil {
			t.Fatalf("%s: no decision: %v", what, err)
		}
		if dec.Reason != want || dec.Approve != (want == csrapprover.ReasonApproved) {
			t.Fatalf("%s: %s (%s), want %s", what, dec.Reason, dec.Message, want)
		}
		return dec
	}
	required := w.tpmDecider(csrapprover.TPMRequired)

	decide("the metadata evidence alone", required, w.tpmCSR(in, key, binding, "join-0", 0, nil), csrapprover.ReasonTPMEvidenceRequired)
	decide("another TPM's evidence", required, w.tpmCSR(in, key, binding, "join-b", tpmB, nil), tpm.RejectKey)

	first := decide("first round", required, w.tpmCSR(in, key, binding, "join-1", tpmA, nil), csrapprover.ReasonTPMChallenge)
	var secret []byte
	var err error
	withTPM(t, tpmA, func(rw io.ReadWriter) { secret, err = tpmnode.Activate(rw, tpmnode.DefaultKey, first.Challenge) })
	if err != nil {
		t.Fatal(err)
	}
	answer := &tpm.Activation{ChallengeCSR: "join-1", ChallengeUID: "uid-join-1", Secret: secret}
	second := decide("second round", required, w.tpmCSR(in, key, binding, "join-2", tpmA, answer), csrapprover.ReasonApproved)
	t.Logf("approved: %s", second.Message)

	// The answer is the CSR key's: another key's CSR with it is denied.
	otherKey, otherBinding := nodeidtest.BoundKey(t)
	decide("the answer with another CSR key", required, w.tpmCSR(in, otherKey, otherBinding, "join-3", tpmA, answer), tpm.RejectKey)

	// Under preferred, EC2's tpmSupport makes the TPM evidence necessary.
	decide("preferred, NitroTPM, no TPM evidence", w.tpmDecider(csrapprover.TPMPreferred), w.tpmCSR(in, key, binding, "join-4", 0, nil), csrapprover.ReasonTPMEvidenceRequired)
	plain := w.node("127.0.0.42", "", joinRole)
	k2, b2 := nodeidtest.BoundKey(t)
	decide("preferred, no NitroTPM, no TPM evidence", w.tpmDecider(csrapprover.TPMPreferred), w.tpmCSR(plain, k2, b2, "join-5", 0, nil), csrapprover.ReasonApproved)
}
