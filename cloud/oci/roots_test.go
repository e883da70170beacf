package oci_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oracle/oci-go-sdk/v65/common"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/oci"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
)

// fakeClock is the roots' clock, moved by the test; the endpoint and the
// certificates keep the real one (the endpoint refuses requests dated
// more than 5 minutes off its clock).
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time      { return c.t }
func (c *fakeClock) Add(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Now()} }

// authClient is a client of the endpoint's auth service signing with the
// endpoint's API key (as mooring's provider makes it).
func authClient(t *testing.T, ep *ocitest.Cloud) *common.BaseClient {
	t.Helper()
	cfgFile, err := ep.WriteAPIConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := common.ConfigurationProviderFromFileWithProfile(cfgFile, "DEFAULT", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := oci.NewAuthClient(p, ep.Region(), ep.AuthEndpoint(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fetchedVerifier is a verifier whose roots the endpoint's auth service
// answers, signed with the endpoint's API key through the SDK, kept on
// clock's time.
func fetchedVerifier(t *testing.T, ep *ocitest.Cloud, clock *fakeClock) *oci.Verifier {
	t.Helper()
	roots, err := oci.NewFetchedRoots(oci.RootsOptions{Client: authClient(t, ep), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	v, err := oci.NewVerifier(oci.VerifierOptions{Roots: roots, Tenancy: ep.Tenancy(), Compartments: []string{ep.Compartment()}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// verifyNow makes the instance's evidence from its metadata service's
// current identity and verifies it.
func verifyNow(t *testing.T, v *oci.Verifier, ep *ocitest.Cloud, id string) error {
	t.Helper()
	ident, err := ep.CurrentIdentity(id)
	if err != nil {
		t.Fatal(err)
	}
	return verifyIdentity(t, v, ident)
}

func verifyIdentity(t *testing.T, v *oci.Verifier, ident ocitest.Identity) error {
	t.Helper()
	b := nodeidtest.NewBinding(t)
	data, err := ident.Evidence(b, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(context.Background(), data, b, time.Now())
	return err
}

// transient reports whether err is an error that is no verdict.
func transient(err error) bool {
	_, verdict := cloud.IsRejection(err)
	return err != nil && !verdict
}

// TestFetchedRoots: the verifier's roots come from the auth service's
// GET /v1/instancePrincipalRootCACertificates, signed with mooring's own
// API key through the SDK: fetched once, kept, fetched again for an
// unknown issuer (at most once a DefaultMinRootsRefresh), and when
// DefaultRootsRefresh old; Oracle's roots rotate (a new root of the same
// name and a new key; intermediates per device); a failed fetch is never a
// verdict, and old roots serve until DefaultMaxRootsAge.
func TestFetchedRoots(t *testing.T) {
	ep := ocitest.NewStarted(t, ocitest.Options{})
	clock := newFakeClock()
	v := fetchedVerifier(t, ep, clock)
	in := ep.Put(ocitest.Instance{DisplayName: "a", PrivateIP: "127.0.91.10"})
	old := ep.Put(ocitest.Instance{DisplayName: "old", PrivateIP: "127.0.91.11"})
	fetches := func(want int, when string) {
		t.Helper()
		if n := ep.Calls("roots"); n != want {
			t.Fatalf("%s: %d fetches of the roots, want %d", when, n, want)
		}
	}
	for _, id := range []string{in.ID, old.ID} {
		if err := verifyNow(t, v, ep, id); err != nil {
			t.Fatal(err)
		}
	}
	fetches(1, "two verifications")

	// A chain to a root OCI does not publish: fetched again once, then a
	// verdict; more of them within a minute fetch nothing.
	rogue, err := ocitest.NewCA("rogue", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	forged, err := rogue.Issue(ep.Subject(in), time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * oci.DefaultMinRootsRefresh)
	for range 3 {
		if err := verifyIdentity(t, v, forged); !isRejection(err, cloud.RejectSignature) || !errors.Is(err, oci.ErrUnknownIssuer) {
			t.Fatalf("a root OCI does not publish: %v", err)
		}
	}
	fetches(2, "three forged chains")

	// Oracle adds a root (same name, another key): a new device's chain
	// to it is fetched for; the old root still serves the old devices.
	if _, err := ep.RotateRoots(); err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * oci.DefaultMinRootsRefresh)
	fresh := ep.Put(ocitest.Instance{DisplayName: "fresh", PrivateIP: "127.0.91.12"})
	if err := verifyNow(t, v, ep, fresh.ID); err != nil {
		t.Fatalf("a chain to the new root: %v", err)
	}
	fetches(3, "a new root")
	if err := verifyNow(t, v, ep, old.ID); err != nil {
		t.Fatalf("a chain to the old root, still published: %v", err)
	}
	fetches(3, "the old root")

	// Oracle withdraws the old root: an hour on, the roots are fetched
	// again, and the old device's chain verifies no more.
	ep.RetireRoots()
	clock.Add(oci.DefaultRootsRefresh + time.Minute)
	if err := verifyNow(t, v, ep, old.ID); !isRejection(err, cloud.RejectSignature) {
		t.Fatalf("a chain to a withdrawn root: %v", err)
	}
	fetches(4, "after an hour")

	// Intermediates rotate (per device, as OCI's): the instance's next
	// certificate comes from another intermediate of the same root,
	// and nothing is fetched for it.
	before, _ := ep.CurrentIdentity(old.ID)
	ep.RotateIntermediates()
	after, err := ep.CurrentIdentity(old.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Intermediate.Equal(before.Intermediate) || after.Intermediate.Subject.String() == before.Intermediate.Subject.String() {
		t.Fatalf("the intermediate did not change: %s", after.Intermediate.Subject)
	}
	if err := verifyIdentity(t, v, after); err != nil {
		t.Fatalf("a new intermediate: %v", err)
	}
	fetches(4, "a new intermediate")

	// The auth service fails: the roots fetched serve (refetched once
	// they are an hour old, which fails) until a day old; an unknown
	// issuer is then no verdict, nor is anything once they are too old.
	ep.Fail("roots", 1000, http.StatusServiceUnavailable)
	clock.Add(oci.DefaultRootsRefresh + time.Minute)
	if err := verifyNow(t, v, ep, fresh.ID); err != nil {
		t.Fatalf("roots 61 minutes old, the auth service down: %v", err)
	}
	clock.Add(2 * oci.DefaultMinRootsRefresh)
	if err := verifyIdentity(t, v, forged); !transient(err) {
		t.Fatalf("an unknown issuer while the auth service is down: %v, want an error that is no verdict", err)
	}
	clock.Add(oci.DefaultMaxRootsAge)
	if err := verifyNow(t, v, ep, fresh.ID); !transient(err) {
		t.Fatalf("roots a day old, the auth service down: %v, want an error that is no verdict", err)
	} else {
		t.Logf("decided later: %v", err)
	}
	ep.Fail("roots", 0, 0)
	clock.Add(2 * oci.DefaultMinRootsRefresh)
	if err := verifyNow(t, v, ep, fresh.ID); err != nil {
		t.Fatalf("the auth service back: %v", err)
	}
}

// TestRootsNeedOwnCredentials: the auth service answers signed callers
// only; mooring's fetch signed with a key the service does not know fails,
// and that is no verdict on the evidence.
func TestRootsNeedOwnCredentials(t *testing.T) {
	ep := ocitest.NewStarted(t, ocitest.Options{})
	in := ep.Put(ocitest.Instance{DisplayName: "a", PrivateIP: "127.0.91.10"})
	resp, err := http.Get(ep.AuthEndpoint() + oci.RootsPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned GET of the roots: %s, want 401", resp.Status)
	}
	// Another endpoint's API key (same tenancy), pointed at this one.
	other := ocitest.NewStarted(t, ocitest.Options{Tenancy: ep.Tenancy(), Compartment: ep.Compartment()})
	roots, err := oci.NewFetchedRoots(oci.RootsOptions{Client: authClientFor(t, other, ep.AuthEndpoint())})
	if err != nil {
		t.Fatal(err)
	}
	v, err := oci.NewVerifier(oci.VerifierOptions{Roots: roots, Tenancy: ep.Tenancy(), Compartments: []string{ep.Compartment()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyNow(t, v, ep, in.ID); !transient(err) || !strings.Contains(err.Error(), "NotAuthenticated") {
		t.Fatalf("roots fetched with a key the auth service does not know: %v, want a transient NotAuthenticated", err)
	}
	if n := ep.Calls("unauthenticated"); n != 2 {
		t.Errorf("%d requests refused for their signature, want 2", n)
	}
}

// authClientFor signs with ep's API key but calls endpoint.
func authClientFor(t *testing.T, ep *ocitest.Cloud, endpoint string) *common.BaseClient {
	t.Helper()
	c := authClient(t, ep)
	c.Host = endpoint
	return c
}

// TestRootCAFileOverrides: with rootCAFile the roots are the file's and
// the auth service is never called.
func TestRootCAFileOverrides(t *testing.T) {
	ep := ocitest.NewStarted(t, ocitest.Options{})
	dir := t.TempDir()
	cfgFile, err := ep.WriteAPIConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	rootsFile, err := ep.WriteRootCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf("tenancy: %s\ncompartments: [%s]\nregion: %s\nclusterID: %s\nconfigFile: %s\nrootCAFile: %s\nauthEndpoint: %s\ncomputeEndpoint: %s\nnetworkEndpoint: %s\n",
		ep.Tenancy(), ep.Compartment(), ep.Region(), cluster, cfgFile, rootsFile, ep.AuthEndpoint(), ep.Endpoint(), ep.Endpoint())
	cfg, err := oci.ParseConfig(strings.NewReader(yaml))
	if err != nil {
		t.Fatal(err)
	}
	c, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := verifier(t, c)
	in := ep.Put(ocitest.Instance{DisplayName: "a", PrivateIP: "127.0.91.10"})
	ident, err := ep.CurrentIdentity(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	b := nodeidtest.NewBinding(t)
	data, _ := ident.Evidence(b, time.Now())
	if _, err := v.Verify(context.Background(), data, b, time.Now()); err != nil {
		t.Fatal(err)
	}
	// A root the auth service publishes but the file does not hold.
	if _, err := ep.RotateRoots(); err != nil {
		t.Fatal(err)
	}
	ep.RotateIntermediates()
	ident, _ = ep.CurrentIdentity(in.ID)
	data, _ = ident.Evidence(b, time.Now())
	if _, err := v.Verify(context.Background(), data, b, time.Now()); !isRejection(err, cloud.RejectSignature) {
		t.Fatalf("a root not in rootCAFile: %v", err)
	}
	if n := ep.Calls("roots"); n != 0 {
		t.Errorf("the auth service was called %d times despite rootCAFile", n)
	}
}

func TestParseRootsAnswer(t *testing.T) {
	ca, err := ocitest.NewCA("p", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(ca.Root.Raw)
	rootPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root.Raw}))
	interPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Intermediate.Raw}))
	for name, answer := range map[string]string{
		// The shape Teleport's verifier reads (lib/join/oraclejoin).
		"JSON, base64 DER":            fmt.Sprintf(`{"certificates":[%q],"refreshIn":"2026-01-01T00:00:00Z"}`, b64),
		"JSON, base64 with breaks":    fmt.Sprintf(`{"certificates":[%q]}`, b64[:64]+"\n"+b64[64:]),
		"JSON, PEM":                   fmt.Sprintf(`{"certificates":[%q],"other":1}`, rootPEM),
		"PEM (Oracle's page's words)": rootPEM,
	} {
		roots, err := oci.ParseRootsAnswer([]byte(answer))
		if err != nil || len(roots) != 1 || !roots[0].Equal(ca.Root) {
			t.Errorf("%s: %v %v", name, roots, err)
		}
	}
	leaf, err := ca.Issue(ocitest.Subject{Instance: "ocid1.instance.oc1.iad.aaaa", Compartment: "ocid1.compartment.oc1..aaaa",
		Tenancy: "ocid1.tenancy.oc1..aaaa"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, answer := range map[string]string{
		"no certificate":  `{"certificates":[]}`,
		"not base64":      `{"certificates":["%%%"]}`,
		"not a CA":        fmt.Sprintf(`{"certificates":[%q]}`, base64.StdEncoding.EncodeToString(leaf.Certificate.Raw)),
		"two PEM in one":  fmt.Sprintf(`{"certificates":[%q]}`, rootPEM+interPEM),
		"a key block":     "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
		"HTML":            "<html>maintenance</html>",
		"too many":        `{"certificates":[` + strings.Repeat(fmt.Sprintf("%q,", b64), 64) + fmt.Sprintf("%q]}", b64),
		"JSON not object": `["x"]`,
	} {
		if roots, err := oci.ParseRootsAnswer([]byte(answer)); err == nil {
			t.Errorf("%s: parsed %d roots", name, len(roots))
		}
	}
}

// rootsPool is a pool of certificates.
func rootsPool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}
