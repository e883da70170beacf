package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	gceagentid "github.com/mooring-dev/mooring/cloud/gce/agentid"
	"github.com/mooring-dev/mooring/cloud/gce/gcetest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// gceNodesJoin (TestSignedClouds/GCE): mooring on GCE, against the GCE-compatible endpoint
// (cloud/gce/gcetest: Compute API aggregatedList, Google-format published
// keys, a metadata server per instance) with the real Google client
// libraries in every binary. Three instances labelled as the cluster's join
// the shared bed: each mooring-agent (cloud: gce) reads its metadata server
// and sends the identity token (audience = its CSR key's binding,
// format=full) as evidence; the standalone mooring-csr-approver
// (--cloud-provider=gce) verifies it against the published keys and the
// Compute API's record; mooring-ccm (--cloud-provider=gce) initializes the
// Nodes with gce:// providerIDs; serving certificates are approved. Then
// GCE-specific attacks are denied by the real approver.
func gceNodesJoin(t *testing.T, bed *signedBed) {
	j := joinThreeWith(t, bed, harness.StartGCECloud, "GCE instances", "gce",
		joinOptions{CCMArgs: gceRouteCCMArgs, CCMConfig: gceUpstreamConfig + gceLBUpstreamLines})
	c, gce, ctx, start, fleet := j.C, j.Cloud, j.Ctx, j.Start, j.Fleet

	for _, m := range fleet.Machines {
		name := m.Name
		node := waitInitialized(ctx, t, c, name)
		wantPID := "gce://" + gcetest.DefaultProject + "/" + gcetest.DefaultZone + "/" + name
		if node.Spec.ProviderID != wantPID || node.Labels[corev1.LabelTopologyZone] != gcetest.DefaultZone ||
			node.Labels[corev1.LabelTopologyRegion] != "us-central1" || node.Labels[corev1.LabelInstanceTypeStable] != gcetest.DefaultMachineType {
			t.Fatalf("%s: providerID %q, labels %v", name, node.Spec.ProviderID, node.Labels)
		}
		var internal string
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = a.Address
			}
		}
		if !strings.HasPrefix(internal, "127.0.79.") {
			t.Fatalf("%s: addresses %v", name, node.Status.Addresses)
		}
		servingApprovedByMooring(ctx, t, c, name)
	}
	t.Logf("3 nodes Ready, initialized with gce:// providerIDs, serving certificates approved, %v after the agents started",
		time.Since(start).Round(time.Millisecond))
	if n := gce.Calls("identity"); n < 3 {
		t.Errorf("the metadata servers issued %d identity tokens, want at least one per join", n)
	}
	t.Logf("cloud calls: aggregatedList %d, get %d, identity %d, certs %d",
		gce.Calls("aggregatedList"), gce.Calls("get"), gce.Calls("identity"), gce.Calls("certs"))

	var names []string
	for _, m := range fleet.Machines {
		names = append(names, m.Name)
	}
	gceRoutes(ctx, t, c, gce, names)

	gceAttacks(ctx, t, c, gce, fleet.Machines[0].Name)

	// Service load balancers, the upstream GCE provider's (gce_lb_test.go).
	testCloudLB(ctx, t, c, names, gceLB(t, gce, c))
}

// gceAttacks joins through the real approver with GCE evidence an attacker
// can get or make: each CSR is denied with its reason, and a good one
// passes. joined is a machine's node name.
func gceAttacks(ctx context.Context, t *testing.T, c *testbed.Cluster, gce *harness.GCECloud, joined string) {
	t.Helper()
	mine := gce.AddNode(e2eCluster, "attacker")
	otherCluster := gce.AddInstance("other-cluster-node", map[string]string{harness.GCELabel: "another-cluster"})
	otherProject := gce.Put(gcetest.Instance{Project: "another-project", Name: "intruder", InternalIP: "127.0.79.250",
		Labels: map[string]string{harness.GCELabel: e2eCluster}})
	identity := func(in gcetest.Instance) nodeid.Identity {
		md, err := gce.MetadataURL(in.Project, in.Zone, in.Name)
		if err != nil {
			t.Fatal(err)
		}
		id, err := gceagentid.NewNodeIdentity(nodeid.Config{MetadataURL: md})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	fromMetadata := func(in gcetest.Instance, binding string) []evidence.Block {
		b, err := identity(in).Evidence(ctx, binding)
		if err != nil {
			t.Fatal(err)
		}
		return []evidence.Block{b}
	}
	token := func(in gcetest.Instance, o gcetest.TokenOptions) []evidence.Block {
		o.Full = true
		tok, err := gce.Token(in, o)
		if err != nil {
			t.Fatal(err)
		}
		return []evidence.Block{{Type: gceagentid.EvidenceType, Data: []byte(tok)}}
	}
	// forgedWith re-signs the claims of a real token of mine, changed by
	// edit, with a key of the attacker's, under header options.
	forgedWith := func(binding string, alg jose.SignatureAlgorithm, key any, opts *jose.SignerOptions, edit func(map[string]any)) []evidence.Block {
		good := fromMetadata(mine, binding)[0]
		parsed, err := jwt.ParseSigned(string(good.Data), []jose.SignatureAlgorithm{jose.RS256})
		if err != nil {
			t.Fatal(err)
		}
		var claims map[string]any
		if err := parsed.UnsafeClaimsWithoutVerification(&claims); err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(claims)
		}
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
		if err != nil {
			t.Fatal(err)
		}
		out, err := jwt.Signed(s).Claims(claims).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return []evidence.Block{{Type: gceagentid.EvidenceType, Data: []byte(out)}}
	}
	forged := func(binding string, alg jose.SignatureAlgorithm, key any, opts *jose.SignerOptions) []evidence.Block {
		return forgedWith(binding, alg, key, opts, nil)
	}
	attacker, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	googleKid := gce.KeyIDs()[len(gce.KeyIDs())-1]
	googlePub := publishedKeyPEM(t, gce.CertsURL(), googleKid)
	var replayed []evidence.Block
	runAttacks(ctx, t, c, []attack{
		{"token for another audience", mine.Name, func(string) []evidence.Block {
			return fromMetadata(mine, "an-audience-of-another-service")
		}, "EvidenceNotBoundToKey"},
		{"instance of another project", otherProject.Name, func(binding string) []evidence.Block {
			return token(otherProject, gcetest.TokenOptions{Audience: binding})
		}, "EvidenceWrongIssuer"},
		{"expired token", mine.Name, func(binding string) []evidence.Block {
			return token(mine, gcetest.TokenOptions{Audience: binding, IssuedAt: time.Now().Add(-2 * time.Hour)})
		}, "EvidenceExpired"},
		{"alg switched to HS256 keyed with Google's public key", mine.Name, func(binding string) []evidence.Block {
			return forged(binding, jose.HS256, googlePub, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", googleKid))
		}, "EvidenceSignatureInvalid"},
		{"key injected in the token header", mine.Name, func(binding string) []evidence.Block {
			return forged(binding, jose.RS256, attacker, (&jose.SignerOptions{EmbedJWK: true}).WithType("JWT"))
		}, "EvidenceMalformed"},
		{"signed by another key under Google's key id", mine.Name, func(binding string) []evidence.Block {
			return forged(binding, jose.RS256, attacker, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", googleKid))
		}, "EvidenceSignatureInvalid"},
		{"instance of another cluster's label", otherCluster.Name, func(binding string) []evidence.Block {
			return fromMetadata(otherCluster, binding)
		}, "InstanceNotInCluster"},
		{"another instance's node name", joined, func(binding string) []evidence.Block {
			return fromMetadata(mine, binding)
		}, "NodeNameMismatch"},
		{"good evidence", mine.Name, func(binding string) []evidence.Block {
			replayed = fromMetadata(mine, binding)
			return replayed
		}, ""},
		{"the approved token copied onto another key", mine.Name, func(string) []evidence.Block { return replayed }, "EvidenceNotBoundToKey"},
	})

	// Evidence that can never verify must not jam its bootstrap token: more
	// tokens than the approver decides at once for one requester (32), each
	// under a key id Google never published and without iat, filed at
	// once, then a good join with the same token. Before, the approver
	// looked each key up first, retried them for ever, and they held every
	// place of the token: the good join waited for ever.
	const jam = 40
	unsigned := func(binding, kid string) []evidence.Block {
		return forgedWith(binding, jose.RS256, attacker, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid),
			func(c map[string]any) { delete(c, "iat") })
	}
	began := time.Now()
	names := make([]string, jam)
	errs := make(chan error, jam)
	for i := range jam {
		go func() {
			req, err := harness.JoinWith(ctx, c, mine.Name, func(binding string) ([]evidence.Block, error) {
				return unsigned(binding, fmt.Sprintf("never-published-%d", i)), nil
			})
			if err == nil {
				names[i] = req.Name
			}
			errs <- err
		}()
	}
	for range jam {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	jctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := harness.JoinWith(jctx, c, mine.Name, func(binding string) ([]evidence.Block, error) { return fromMetadata(mine, binding), nil })
	if err != nil {
		t.Fatal(err)
	}
	decided, err := harness.WaitForDecision(jctx, c.Client, req.Name)
	if err != nil {
		t.Fatalf("a good join behind %d tokens that can never verify, of the same bootstrap token: %v", jam, err)
	}
	if harness.Condition(decided, certificatesv1.CertificateApproved) == nil {
		t.Fatalf("the good join behind them: %+v", decided.Status.Conditions)
	}
	for _, n := range names {
		d, err := harness.WaitForDecision(jctx, c.Client, n)
		if err != nil {
			t.Fatalf("a token that can never verify is still retried: %v", err)
		}
		if cond := harness.Condition(d, certificatesv1.CertificateDenied); cond == nil || cond.Reason == "" {
			t.Fatalf("%s: %+v", n, d.Status.Conditions)
		}
	}
	t.Logf("%d tokens under unknown key ids without iat denied, and a good join of the same token approved, in %v",
		jam, time.Since(began).Round(time.Millisecond))
}

// publishedKeyPEM is the public key of kid from a JWK set, PEM-encoded (the
// bytes an alg-confusion attacker would use as an HMAC secret).
func publishedKeyPEM(t *testing.T, url, kid string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		t.Fatal(err)
	}
	keys := set.Key(kid)
	if len(keys) != 1 {
		t.Fatalf("kid %s: %d keys", kid, len(keys))
	}
	der, err := x509.MarshalPKIXPublicKey(keys[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// gceTPMRequired (TestBootedMachines/gce, whose approver runs with
// --tpm=required): the cloud's evidence alone is denied
// TPMEvidenceRequired, for an instance without a vTPM and for the booted
// Shielded VM's own token (what a process that reaches its metadata server
// but not its TPM gets); booted is the booted machine's instance name.
func gceTPMRequired(t *testing.T, c *testbed.Cluster, gce *harness.GCECloud, booted string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tokenOf := func(in gcetest.Instance) func(string) []evidence.Block {
		return func(binding string) []evidence.Block {
			md, err := gce.MetadataURL(in.Project, in.Zone, in.Name)
			if err != nil {
				t.Fatal(err)
			}
			id, err := gceagentid.NewNodeIdentity(nodeid.Config{MetadataURL: md})
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
	plain := gce.AddNode(e2eCluster, "boot-gce-no-vtpm")
	shielded, ok := gce.Get(gcetest.DefaultProject, gcetest.DefaultZone, booted)
	if !ok || shielded.Shielded == nil || !shielded.Shielded.VTPM {
		t.Fatalf("the booted instance %s is no Shielded VM with a vTPM: %+v", booted, shielded)
	}
	runAttacks(ctx, t, c, []attack{
		{"an instance without a vTPM, its token alone", plain.Name, tokenOf(plain), "TPMEvidenceRequired"},
		{"the Shielded VM's token without its TPM's quote", shielded.Name, tokenOf(shielded), "TPMEvidenceRequired"},
	})
}
