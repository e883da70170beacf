package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	awsagentid "github.com/mooring-dev/mooring/cloud/aws/agentid"
	"github.com/mooring-dev/mooring/cloud/aws/awstest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/tpm/node"
	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// awsTPMRequired (TestBootedMachines/aws, whose approver runs with
// --tpm=required): the STS evidence alone is denied TPMEvidenceRequired,
// for an instance without NitroTPM and for the booted NitroTPM instance's
// own (what a process that reaches its IMDS but not its TPM gets); the
// booted instance's STS evidence with another TPM's quote is denied
// TPMKeyNotOfInstance (its EK is not the one EC2 reports); with another
// TPM's quote that claims the instance's EK, the approver challenges, and
// that TPM cannot activate the challenge (it does not hold the EK). booted
// is the booted machine's name.
func awsTPMRequired(t *testing.T, c *testbed.Cluster, a *harness.AWSCloud, booted string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stsOf := func(in awstest.Instance) func(string) []evidence.Block {
		return func(binding string) []evidence.Block {
			md, err := a.IMDS(in.ID)
			if err != nil {
				t.Fatal(err)
			}
			id, err := awsagentid.NewNodeIdentity(nodeid.Config{MetadataURL: md, Settings: map[string]string{awsagentid.SettingSTSEndpoint: a.Endpoint()}})
			if err != nil {
				t.Fatal(err)
			}
			b, err := id.Evidence(ctx, binding)
			if err != nil {
				t.Fatal(err)
			}
			return []evidence.Block{b}
		}
	}
	nitro, ok := a.InstanceOf(booted)
	if !ok || nitro.NitroTPM == nil {
		t.Fatalf("the booted instance of %s has no NitroTPM: %+v", booted, nitro)
	}
	plain := a.AddNode(e2eCluster, "boot-aws-no-tpm")
	sim := tpmtest.Start(t, t.TempDir())
	rw, err := sim.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	withQuote := func(claimEK bool) func(string) []evidence.Block {
		return func(binding string) []evidence.Block {
			q, err := node.Quote(rw, (&awsagentid.NodeIdentity{}).TPMKey(), binding, time.Now(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if claimEK {
				e, err := tpm.Parse(q.Data)
				if err != nil {
					t.Fatal(err)
				}
				e.EKPublic = nitro.NitroTPM.RSA
				if q.Data, err = e.Marshal(); err != nil {
					t.Fatal(err)
				}
			}
			return append(stsOf(nitro)(binding), q)
		}
	}
	runAttacks(ctx, t, c, []attack{
		{"an instance without NitroTPM, its STS evidence alone", plain.PrivateDNSName, stsOf(plain), "TPMEvidenceRequired"},
		{"the NitroTPM instance's STS evidence without its TPM's quote", nitro.PrivateDNSName, stsOf(nitro), "TPMEvidenceRequired"},
		{"the NitroTPM instance's STS evidence with another TPM's quote", nitro.PrivateDNSName, withQuote(false), "TPMKeyNotOfInstance"},
		{"... with another TPM's quote claiming the instance's EK", nitro.PrivateDNSName, withQuote(true), "TPMCredentialChallenge"},
	})
	// The challenge of that last CSR is sealed to the instance's EK: the
	// other TPM cannot activate it.
	challenge := challengeOfAttack(ctx, t, c)
	if _, err := node.Activate(rw, (&awsagentid.NodeIdentity{}).TPMKey(), challenge); err == nil {
		t.Error("another TPM activated a credential the approver sealed to the instance's EK")
	} else {
		t.Logf("another TPM cannot answer the challenge sealed to the instance's EK: %v", err)
	}
}

// challengeOfAttack is the credential activation challenge the approver
// wrote on the one attack CSR (harness.JoinWith's node-csr-...) it denied
// TPMCredentialChallenge.
func challengeOfAttack(ctx context.Context, t *testing.T, c *testbed.Cluster) []byte {
	t.Helper()
	list, err := c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var found []byte
	for i := range list.Items {
		csr := &list.Items[i]
		denied := harness.Condition(csr, certificatesv1.CertificateDenied)
		if !strings.HasPrefix(csr.Name, "node-csr-") || denied == nil || denied.Reason != csrreason.TPMChallenge {
			continue
		}
		if found != nil {
			t.Fatal("more than one attack CSR was challenged")
		}
		if found, err = tpm.DecodeAnnotation(csr.Annotations[tpm.ChallengeAnnotation]); err != nil || len(found) == 0 {
			t.Fatalf("CSR %s: its challenge annotation: %v", csr.Name, err)
		}
	}
	if found == nil {
		t.Fatal("no attack CSR was challenged")
	}
	return found
}
