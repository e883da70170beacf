package azure

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud"
)

// genuine is a public attested document IMDS signed (testdata/README.md).
type genuine struct {
	file, root, intermediate  string
	nonce, vmID, subscription string
	// created is the document's createdOn: when IMDS signed it, as
	// Microsoft documents the field. Its expiresOn is six hours later,
	// and so is the nonce IMDS wrote (none was sent).
	created time.Time
}

var genuineDocuments = []genuine{
	{
		file: "attested-2025-11-19-eastus.b64", root: "digicert-global-root-g2.pem",
		intermediate: "microsoft-azure-rsa-tls-issuing-ca-07-xsign.pem",
		nonce:        "20251119-185330", vmID: "ddc87bd2-3ebb-43dc-92a9-90b104cd9527",
		subscription: "8a205152-b25a-417f-a676-80465535a6c9",
		created:      time.Date(2025, 11, 19, 12, 53, 30, 0, time.UTC),
	},
	{
		file: "attested-2022-04-19-southcentralus.b64", root: "baltimore-cybertrust-root.pem",
		intermediate: "microsoft-rsa-tls-ca-01.pem",
		nonce:        "20220419-072721", vmID: "bd8e7443-24a0-41f3-b949-8baf4fd1c573",
		subscription: "5f130ffc-0a3e-4795-b691-4f56a12a5547",
		created:      time.Date(2022, 4, 19, 1, 27, 21, 0, time.UTC),
	},
}

func (g genuine) load(t *testing.T) (doc []byte, roots *x509.CertPool, inter []*x509.Certificate) {
	t.Helper()
	b64, err := os.ReadFile(filepath.Join("testdata", g.file))
	if err != nil {
		t.Fatal(err)
	}
	doc, err = base64.StdEncoding.DecodeString(strings.TrimSpace(string(b64)))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := readCerts(filepath.Join("testdata", g.root))
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(rc[0])
	inter, err = readCerts(filepath.Join("testdata", g.intermediate))
	if err != nil {
		t.Fatal(err)
	}
	return doc, roots, inter
}

// TestGenuineDocumentsVerify: documents IMDS really signed pass the
// verifier's whole path (signature, chain to the genuine root at the
// document's time, signer name, content, nonce, subscription, timestamps
// in the layout IMDS writes) with the clock pinned to their createdOn and
// up to the default maximum age and clock skew after it, and are refused
// EvidenceExpired a second later, and at their expiresOn. The clock this
// test pinned before, the timestamp IMDS wrote as nonce, is that
// expiresOn: were it the time of the request (what this test assumed
// before, and what only a real VM can settle, docs/azure.md), genuine
// documents would reach the approver six hours old and be refused.
func TestGenuineDocumentsVerify(t *testing.T) {
	ctx := context.Background()
	for _, g := range genuineDocuments {
		t.Run(g.file, func(t *testing.T) {
			doc, roots, inter := g.load(t)
			v, err := NewVerifier(VerifierOptions{Roots: roots, Intermediates: inter, Subscriptions: []string{g.subscription}})
			if err != nil {
				t.Fatal(err)
			}
			last := g.created.Add(DefaultMaxDocumentAge + DefaultMaxClockSkew)
			for _, now := range []time.Time{g.created.Add(-DefaultMaxClockSkew), g.created, g.created.Add(time.Minute), last} {
				att, err := v.verify(ctx, doc, g.nonce, now)
				if err != nil {
					t.Fatalf("at %s: %v", now, err)
				}
				if att.InstanceID != g.vmID || !att.IssuedAt.Equal(g.created) || !att.ExpiresAt.Equal(g.created.Add(DefaultMaxDocumentAge)) {
					t.Fatalf("attestation %+v", att)
				}
			}
			for name, now := range map[string]time.Time{
				"a second past the maximum age and the skew": last.Add(time.Second),
				"a second too early for the skew":            g.created.Add(-DefaultMaxClockSkew - time.Second),
				"at its expiresOn (the nonce IMDS wrote)":    g.created.Add(6 * time.Hour),
			} {
				if _, err := v.verify(ctx, doc, g.nonce, now); !isReason(err, cloud.RejectExpired) {
					t.Errorf("%s: %v, want %s", name, err, cloud.RejectExpired)
				}
			}
			// The same document against another nonce, another
			// subscription, another root, or without its intermediate.
			if _, err := v.verify(ctx, doc, "e3b0c44298fc1c149afbf4c8996fb924", g.created); !isReason(err, cloud.RejectBinding) {
				t.Errorf("another nonce: %v", err)
			}
			other, _ := NewVerifier(VerifierOptions{Roots: roots, Intermediates: inter, Subscriptions: []string{"11111111-2222-4333-8444-555555555555"}})
			if _, err := other.verify(ctx, doc, g.nonce, g.created); !isReason(err, cloud.RejectIssuer) {
				t.Errorf("another subscription: %v", err)
			}
			bare, _ := NewVerifier(VerifierOptions{Roots: roots, Subscriptions: []string{g.subscription}})
			if _, err := bare.verify(ctx, doc, g.nonce, g.created); !isReason(err, cloud.RejectIssuer) {
				t.Errorf("without the intermediate and AIA: %v", err)
			}
			foreign, _ := NewVerifier(VerifierOptions{Roots: x509.NewCertPool(), Intermediates: inter, Subscriptions: []string{g.subscription}})
			if _, err := foreign.verify(ctx, doc, g.nonce, g.created); !isReason(err, cloud.RejectIssuer) {
				t.Errorf("another root: %v", err)
			}
		})
	}
}

// TestGenuineTimestampsParse: the timeStamp values of the genuine
// documents, and of Microsoft's documented examples, are read as the UTC
// instants they write; expiresOn is six hours after createdOn in the
// genuine ones.
func TestGenuineTimestampsParse(t *testing.T) {
	for _, g := range genuineDocuments {
		doc, _, _ := g.load(t)
		p7, err := parse(doc)
		if err != nil {
			t.Fatal(err)
		}
		d, err := parseDocument(p7.Content)
		if err != nil {
			t.Fatal(err)
		}
		created, expires, err := d.TimeStamp.Times()
		if err != nil || !created.Equal(g.created) || !expires.Equal(g.created.Add(6*time.Hour)) || created.Location() != time.UTC {
			t.Errorf("%s: %+v: %v, %v, %v", g.file, d.TimeStamp, created, expires, err)
		}
	}
	// Microsoft's "Attested data" examples (not signed by Azure).
	for value, want := range map[string]time.Time{
		"11/28/18 00:16:17 -0000": time.Date(2018, 11, 28, 0, 16, 17, 0, time.UTC),
		"11/30/20 21:19:24 -0000": time.Date(2020, 11, 30, 21, 19, 24, 0, time.UTC),
	} {
		got, _, err := TimeStamp{CreatedOn: value, ExpiresOn: value}.Times()
		if err != nil || !got.Equal(want) {
			t.Errorf("%s: %v, %v; want %v", value, got, err, want)
		}
	}
}

// TestGenuineSignerAIAURLs: the genuine signers' CA Issuers URLs are on
// the default allow-list, and a fetch off it is refused before any
// request.
func TestGenuineSignerAIAURLs(t *testing.T) {
	allowed, err := parseAIAAllowed(DefaultAIAAllowedHosts)
	if err != nil {
		t.Fatal(err)
	}
	f := newAIAFetcher(allowed, nil, 0)
	for _, g := range genuineDocuments {
		doc, _, _ := g.load(t)
		p7, err := parse(doc)
		if err != nil {
			t.Fatal(err)
		}
		signer := p7.GetOnlySigner()
		if len(signer.IssuingCertificateURL) == 0 {
			t.Fatalf("%s: no CA Issuers URL", g.file)
		}
		for _, raw := range signer.IssuingCertificateURL {
			u, _ := url.Parse(raw)
			if !f.allows(u) {
				t.Errorf("%s: %s is not on the default allow-list", g.file, raw)
			}
		}
	}
	for _, raw := range []string{"http://evil.example/pkiops/certs/x.crt", "http://www.microsoft.com.evil.example/pkiops/x.crt",
		"http://www.microsoft.com/other/x.crt", "http://www.microsoft.com/pkiops/../x.crt", "ftp://www.microsoft.com/pkiops/x.crt",
		"http://user@www.microsoft.com/pkiops/x.crt", "http://www.microsoft.com:8080/pkiops/x.crt"} {
		if _, err := f.get(context.Background(), raw); !errors.Is(err, errAIARefused) {
			t.Errorf("%s: %v, want refused", raw, err)
		}
	}
}

func isReason(err error, reason string) bool {
	r, ok := cloud.IsRejection(err)
	return ok && r.Reason == reason
}
