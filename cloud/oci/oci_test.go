package oci_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/cloud"
	"github.com/mooring-dev/mooring/cloud/kit/kittest"
	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
	"github.com/mooring-dev/mooring/cloud/oci"
	"github.com/mooring-dev/mooring/cloud/oci/agentid"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
	"github.com/mooring-dev/mooring/cloud/view"
)

const cluster = "prod"

// setup starts an endpoint and builds the provider against it, through
// the config file as mooring-ccm reads it: the roots fetched from the
// endpoint's auth service (unless extra names a rootCAFile).
func setup(t *testing.T, opts ocitest.Options, extra string) (*ocitest.Cloud, *oci.Cloud) {
	t.Helper()
	ep := ocitest.NewStarted(t, opts)
	cfg, err := oci.ParseConfig(strings.NewReader(configYAML(t, ep, extra)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ep, c
}

// configYAML is a cloud config for a provider over ep, its API key and
// OCI config file written in a temporary directory.
func configYAML(t *testing.T, ep *ocitest.Cloud, extra string) string {
	t.Helper()
	cfgFile, err := ep.WriteAPIConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("tenancy: %s\ncompartments: [%s]\nregion: %s\nclusterID: %s\nconfigFile: %s\nauthEndpoint: %s\ncomputeEndpoint: %s\nnetworkEndpoint: %s\nnetworkLoadBalancerEndpoint: %s\nminRefreshInterval: 1ms\n%s",
		ep.Tenancy(), ep.Compartment(), ep.Region(), cluster, cfgFile, ep.AuthEndpoint(), ep.Endpoint(), ep.Endpoint(), ep.Endpoint(), extra)
}

func tagged(c string) map[string]string { return map[string]string{oci.DefaultClusterTag: c} }

func TestViewListsTheClustersInstances(t *testing.T) {
	ep, c := setup(t, ocitest.Options{MaxPageSize: 2}, "")
	var mine []ocitest.Instance
	for i := range 5 {
		mine = append(mine, ep.Put(ocitest.Instance{DisplayName: fmt.Sprintf("Node-%d", i), PrivateIP: fmt.Sprintf("127.0.91.%d", 10+i),
			PublicIP: fmt.Sprintf("127.0.92.%d", 10+i), FreeformTags: tagged(cluster)}))
	}
	ep.Put(ocitest.Instance{DisplayName: "other", PrivateIP: "127.0.91.50", FreeformTags: tagged("another")})
	ep.Put(ocitest.Instance{DisplayName: "untagged", PrivateIP: "127.0.91.51"})
	ep.Put(ocitest.Instance{DisplayName: "elsewhere", PrivateIP: "127.0.91.52", FreeformTags: tagged(cluster),
		Compartment: "ocid1.compartment.oc1..aaaaotherotherother"})
	if err := ep.SetState(mine[4].ID, "TERMINATED"); err != nil {
		t.Fatal(err)
	}
	if err := ep.SetState(mine[3].ID, "STOPPED"); err != nil {
		t.Fatal(err)
	}

	list, err := c.InstanceView().List(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 5 {
		t.Fatalf("listed %d instances, want the cluster's 5: %+v", len(list), list)
	}
	byID := map[string]view.Instance{}
	for _, in := range list {
		byID[in.ID] = in
	}
	got := byID[mine[0].ID]
	want := view.Instance{ProviderID: "oci://" + mine[0].ID, ID: mine[0].ID, Name: "Node-0", NodeName: "node-0",
		Zone: "US-ASHBURN-AD-1", Region: "iad", InstanceType: ocitest.DefaultShape, Cluster: cluster, State: view.StateRunning}
	if got.ProviderID != want.ProviderID || got.NodeName != want.NodeName || got.Zone != want.Zone || got.Region != want.Region ||
		got.InstanceType != want.InstanceType || got.State != want.State || got.Created.IsZero() {
		t.Errorf("instance: %+v, want %+v", got, want)
	}
	if len(got.Addresses) != 2 || got.Addresses[0] != (v1.NodeAddress{Type: v1.NodeInternalIP, Address: "127.0.91.10"}) ||
		got.Addresses[1] != (v1.NodeAddress{Type: v1.NodeExternalIP, Address: "127.0.92.10"}) {
		t.Errorf("addresses %v", got.Addresses)
	}
	if got.Labels[oci.FaultDomainLabel] != ocitest.DefaultFaultDomain {
		t.Errorf("labels %v", got.Labels)
	}
	if s := byID[mine[3].ID].State; s != view.StateStopped {
		t.Errorf("stopped instance: %s", s)
	}
	if in := byID[mine[4].ID]; in.State != view.StateTerminated || len(in.Addresses) != 0 {
		t.Errorf("terminated instance: %+v", in)
	}
	// 8 instances in the compartment, pages of 2: 4 pages, read twice (a
	// list of pages is taken when the next one agrees); the VNIC
	// attachments of 6 attached instances: 3 pages.
	if n := ep.Calls("ListInstances"); n != 8 {
		t.Errorf("ListInstances calls %d, want 8", n)
	}
	if n := ep.Calls("ListVnicAttachments"); n != 3 {
		t.Errorf("ListVnicAttachments calls %d, want 3", n)
	}
	vnics := ep.Calls("GetVnic")
	if _, err := c.InstanceView().List(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if n := ep.Calls("GetVnic"); n != vnics {
		t.Errorf("a second listing read VNICs again: %d GetVnic calls, then %d", vnics, n)
	}

	// Node metadata as the OCI CCM writes it.
	md, err := c.InstanceMetadata(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}})
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "oci://"+mine[0].ID || md.Zone != "US-ASHBURN-AD-1" || md.Region != "iad" ||
		md.AdditionalLabels[oci.FaultDomainLabel] != ocitest.DefaultFaultDomain {
		t.Errorf("metadata %+v", md)
	}
}

func TestConfirmInstance(t *testing.T) {
	ep, c := setup(t, ocitest.Options{}, "")
	ctx := context.Background()
	mine := ep.Put(ocitest.Instance{DisplayName: "a", PrivateIP: "127.0.91.10", FreeformTags: tagged(cluster)})
	other := ep.Put(ocitest.Instance{DisplayName: "b", PrivateIP: "127.0.91.11", FreeformTags: tagged("another")})
	elsewhere := ep.Put(ocitest.Instance{DisplayName: "c", PrivateIP: "127.0.91.12", FreeformTags: tagged(cluster),
		Compartment: "ocid1.compartment.oc1..aaaaotherotherother"})
	in, err := c.ConfirmInstance(ctx, "oci://"+mine.ID)
	if err != nil || in.ID != mine.ID || len(in.Addresses) != 1 {
		t.Fatalf("mine: %+v, %v", in, err)
	}
	kittest.Confirms(t, "another cluster's", c.ConfirmInstance, "oci://"+other.ID, kittest.Foreign, "")
	kittest.Confirms(t, "another compartment's", c.ConfirmInstance, "oci://"+elsewhere.ID, kittest.Foreign, "")
	if err := ep.SetState(mine.ID, "TERMINATED"); err != nil {
		t.Fatal(err)
	}
	kittest.Confirms(t, "terminated", c.ConfirmInstance, "oci://"+mine.ID, kittest.Absent, "")
	ep.Fail("GetInstance", 1, http.StatusServiceUnavailable)
	kittest.Confirms(t, "an outage", c.ConfirmInstance, "oci://"+other.ID, kittest.NoVerdict, "")
}

// A list of one page is one call; one that changes between its pages at
// every listing is an error after listAttempts listings (the conformance
// suite checks that a list is whole or an error).
func TestListChangesAtEveryAttempt(t *testing.T) {
	ep, c := setup(t, ocitest.Options{MaxPageSize: 2}, "")
	for i := range 5 {
		ep.Put(ocitest.Instance{DisplayName: fmt.Sprintf("n-%d", i), PrivateIP: fmt.Sprintf("127.0.91.%d", 10+i), FreeformTags: tagged(cluster)})
	}
	n := 0
	ep.BeforePage(func(page int) {
		if page == 2 {
			n++
			ep.Put(ocitest.Instance{DisplayName: fmt.Sprintf("churn-%d", n), PrivateIP: "127.0.91.40", FreeformTags: tagged(cluster)})
		}
	})
	if _, err := c.InstanceView().List(context.Background(), 0); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("a list changing at every listing: %v", err)
	}
	if n != 3 {
		t.Errorf("%d listings, want 3", n)
	}
	ep2, c2 := setup(t, ocitest.Options{}, "")
	ep2.Put(ocitest.Instance{DisplayName: "one", PrivateIP: "127.0.91.10", FreeformTags: tagged(cluster)})
	if all, err := c2.InstanceView().List(context.Background(), 0); err != nil || len(all) != 1 || ep2.Calls("ListInstances") != 1 {
		t.Errorf("one page: %d instances, %v, %d calls", len(all), err, ep2.Calls("ListInstances"))
	}
}

func TestDefinedTag(t *testing.T) {
	ep, c := setup(t, ocitest.Options{}, "clusterTagNamespace: mooring\n")
	ep.Put(ocitest.Instance{DisplayName: "freeform", PrivateIP: "127.0.91.10", FreeformTags: tagged(cluster)})
	d := ep.Put(ocitest.Instance{DisplayName: "defined", PrivateIP: "127.0.91.11",
		DefinedTags: map[string]map[string]any{"mooring": {oci.DefaultClusterTag: cluster}}})
	list, err := c.InstanceView().List(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != d.ID {
		t.Fatalf("listed %+v, want only the instance with the defined tag", list)
	}
}

func TestRequestsMustBeSigned(t *testing.T) {
	ep := ocitest.NewStarted(t, ocitest.Options{})
	resp, err := http.Get(ep.Endpoint() + "/20160918/instances?compartmentId=" + ep.Compartment())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned: %s", resp.Status)
	}
	// Another key under the endpoint's keyId: the provider of a second
	// endpoint, pointed at the first.
	other := ocitest.NewStarted(t, ocitest.Options{Tenancy: ep.Tenancy(), Compartment: ep.Compartment()})
	dir := t.TempDir()
	cfgFile, _ := other.WriteAPIConfig(dir)
	roots, _ := ep.WriteRootCA(dir)
	yaml := fmt.Sprintf("tenancy: %s\ncompartments: [%s]\nregion: %s\nclusterID: %s\nconfigFile: %s\nrootCAFile: %s\ncomputeEndpoint: %s\nnetworkEndpoint: %s\n",
		ep.Tenancy(), ep.Compartment(), ep.Region(), cluster, cfgFile, roots, ep.Endpoint(), ep.Endpoint())
	cfg, err := oci.ParseConfig(strings.NewReader(yaml))
	if err != nil {
		t.Fatal(err)
	}
	c, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.InstanceView().List(context.Background(), 0); err == nil || !strings.Contains(err.Error(), "NotAuthenticated") {
		t.Fatalf("signed with a key the endpoint does not know: %v", err)
	}
	if ep.Calls("unauthenticated") < 2 {
		t.Errorf("unauthenticated calls %d", ep.Calls("unauthenticated"))
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := oci.ParseConfig(strings.NewReader("tenancy: x\ncompartments: [y, y]\nregion: Ashburn\nclusterTag: 'a b'\nauth: Password\nmaxClockSkew: 1h\nbogus: 1\n"))
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown field: %v", err)
	}
	_, err = oci.ParseConfig(strings.NewReader("tenancy: x\ncompartments: [y, y]\nregion: Ashburn\nclusterTag: 'a b'\nauth: Password\nmaxClockSkew: 1h\ncomputeEndpoint: http://example.com\nauthEndpoint: ftp://auth\n"))
	for _, want := range []string{"tenancy", "compartments", "region", "clusterID is required", "clusterTag", "auth", "maxClockSkew", "computeEndpoint", "authEndpoint"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error naming %s: %v", want, err)
		}
	}
	_, err = oci.ParseConfig(strings.NewReader("tenancy: ocid1.tenancy.oc1..aaaa\ncompartments: [ocid1.tenancy.oc1..aaaa]\nregion: us-ashburn-1\nclusterID: c\nauth: InstancePrincipal\nrootCAFile: /r.pem\n"))
	if err != nil {
		t.Errorf("instance principal, root compartment: %v", err)
	}
	// No rootCAFile: the roots are the auth service's.
	_, err = oci.ParseConfig(strings.NewReader("tenancy: ocid1.tenancy.oc1..aaaa\ncompartments: [ocid1.compartment.oc1..aaaa]\nregion: us-ashburn-1\nclusterID: c\nconfigFile: /c\n"))
	if err != nil {
		t.Errorf("without rootCAFile: %v", err)
	}
}

// node is an instance's node identity, as mooring-agent builds it.
func node(t *testing.T, ep *ocitest.Cloud, in ocitest.Instance) nodeid.Identity {
	t.Helper()
	build := func(cfg nodeid.Config) (nodeid.Identity, error) { return nodeid.New("oci", cfg) }
	return nodeidtest.Agent(t, build, nil)(ep.MetadataURL(in.ID))
}

func verifier(t *testing.T, c *oci.Cloud) cloud.EvidenceVerifier {
	t.Helper()
	vs := c.EvidenceVerifiers()
	if len(vs) != 1 || vs[0].Type() != agentid.EvidenceType {
		t.Fatalf("verifiers %v", vs)
	}
	return vs[0]
}

func TestAgentEvidenceVerifies(t *testing.T) {
	ep, c := setup(t, ocitest.Options{}, "")
	ctx := context.Background()
	in := ep.Put(ocitest.Instance{DisplayName: "Worker-1", PrivateIP: "127.0.91.10", FreeformTags: tagged(cluster)})
	id := node(t, ep, in)
	got, err := id.Instance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != (nodeid.Instance{ID: in.ID, Name: "Worker-1", NodeName: "worker-1", ProviderID: "oci://" + in.ID, InternalIP: "127.0.91.10"}) {
		t.Errorf("instance %+v", got)
	}
	b := nodeidtest.NewBinding(t)
	blk, err := id.Evidence(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	v := verifier(t, c)
	att, err := v.Verify(ctx, blk.Data, b, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if att.InstanceID != in.ID || att.ProviderID != "oci://"+in.ID || !strings.HasPrefix(att.ReplayKey, oci.ReplayKeyPrefix) {
		t.Errorf("attestation %+v", att)
	}
	key, claimed, err := v.Peek(blk.Data)
	if err != nil || key != att.ReplayKey || claimed != b {
		t.Errorf("peek %q %q %v", key, claimed, err)
	}
	if _, err := id.Evidence(ctx, "has space"); err == nil {
		t.Error("a binding with a space signed")
	}
	// The metadata service wants its header; a stopped instance answers
	// nothing.
	md, _ := ep.MetadataURL(in.ID)
	resp, err := http.Get(md + "/opc/v2/identity/cert.pem")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without Authorization: Bearer Oracle: %s", resp.Status)
	}
	if err := ep.SetState(in.ID, "STOPPED"); err != nil {
		t.Fatal(err)
	}
	if _, err := id.Evidence(ctx, b); err == nil {
		t.Error("a stopped instance's metadata service answered")
	}
}

// TestRotation: the metadata service serves a new certificate and key once
// the current one is RotateEvery old; evidence made with either verifies
// while the certificate is young enough, and one older than
// maxCertificateAge is refused though still valid.
func TestRotation(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	ep, c := setup(t, ocitest.Options{Now: clock, RotateEvery: time.Hour, CertLifetime: 30 * time.Hour}, "maxCertificateAge: 2h\n")
	ctx := context.Background()
	in := ep.Put(ocitest.Instance{DisplayName: "w", PrivateIP: "127.0.91.10", FreeformTags: tagged(cluster)})
	first, err := ep.CurrentIdentity(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	v := verifier(t, c)
	b := nodeidtest.NewBinding(t)
	// The roots are fetched now, while the endpoint's clock is the
	// approver's (the endpoint refuses a request dated 5 minutes off its
	// clock, which moves on below).
	if data, err := first.Evidence(b, now); err != nil {
		t.Fatal(err)
	} else if _, err := v.Verify(ctx, data, b, now); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Minute)
	if again, _ := ep.CurrentIdentity(in.ID); again.Certificate.SerialNumber.Cmp(first.Certificate.SerialNumber) != 0 {
		t.Fatal("rotated before RotateEvery")
	}
	now = now.Add(31 * time.Minute)
	second, err := ep.CurrentIdentity(in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if second.Certificate.SerialNumber.Cmp(first.Certificate.SerialNumber) == 0 || second.Key.Equal(first.Key) {
		t.Fatal("not rotated after RotateEvery")
	}
	for name, ident := range map[string]ocitest.Identity{"current": second, "superseded, an hour old": first} {
		data, err := ident.Evidence(b, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(ctx, data, b, now); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	later := now.Add(2 * time.Hour)
	data, _ := first.Evidence(b, later)
	if _, err := v.Verify(ctx, data, b, later); !isRejection(err, cloud.RejectExpired) {
		t.Errorf("a certificate superseded 3 hours ago, still valid: %v, want expired (revoked)", err)
	}
}

func isRejection(err error, reason string) bool {
	r, ok := cloud.IsRejection(err)
	return ok && r.Reason == reason
}

// TestAttacks: evidence an attacker can make or obtain. Each is first
// shown to pass a naive verifier (one that checks the signature with the
// certificate it is handed, or the chain and subject alone), then to be
// denied by the verifier with its reason.
func TestAttacks(t *testing.T) {
	ep, c := setup(t, ocitest.Options{}, "")
	v := verifier(t, c)
	ctx := context.Background()
	now := time.Now()
	mine := ep.Put(ocitest.Instance{DisplayName: "mine", PrivateIP: "127.0.91.10", FreeformTags: tagged(cluster)})
	victim := ep.Put(ocitest.Instance{DisplayName: "victim", PrivateIP: "127.0.91.11", FreeformTags: tagged(cluster)})
	myID, err := ep.CurrentIdentity(mine.ID)
	if err != nil {
		t.Fatal(err)
	}
	victimID, err := ep.CurrentIdentity(victim.ID)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(s ocitest.Subject, notBefore time.Time, life time.Duration) ocitest.Identity {
		id, err := ep.CA().Issue(s, notBefore, life)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	rogue, err := ocitest.NewCA("rogue", now)
	if err != nil {
		t.Fatal(err)
	}
	rogueID, err := rogue.Issue(ep.Subject(victim), now.Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherTenancy := ep.Subject(mine)
	otherTenancy.Tenancy = "ocid1.tenancy.oc1..aaaaanothertenancy"
	b := nodeidtest.NewBinding(t)
	sign := func(id ocitest.Identity) []byte {
		data, err := id.Evidence(b, now)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	roots := x509.NewCertPool()
	roots.AddCert(ep.CA().Root)
	for _, tc := range []struct {
		name  string
		data  []byte
		naive func([]byte) error
		want  string
	}{
		{"a certificate of another tenancy", sign(issue(otherTenancy, now.Add(-time.Minute), time.Hour)), naiveSignature, cloud.RejectIssuer},
		{"an expired certificate", sign(issue(ep.Subject(mine), now.Add(-5*time.Hour), 4*time.Hour)), naiveSignature, cloud.RejectExpired},
		{"a certificate OCI has rotated since (revoked)", sign(issue(ep.Subject(mine), now.Add(-25*time.Hour), 48*time.Hour)), naiveSignature, cloud.RejectExpired},
		{"a chain to a root not configured", sign(rogueID), naiveSignature, cloud.RejectSignature},
		{"the victim's certificate signed by my key", func() []byte {
			data, err := ocitest.SignEvidence(victimID.Certificate, victimID.Intermediate, myID.Key, b, now)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}(), naiveChain(roots), cloud.RejectSignature},
		{"evidence for another key", func() []byte {
			data, err := myID.Evidence(nodeidtest.NewBinding(t), now)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}(), naiveChain(roots), cloud.RejectBinding},
		{"evidence signed 10 minutes ago", func() []byte {
			data, _ := myID.Evidence(b, now.Add(-10*time.Minute))
			return data
		}(), naiveSignature, cloud.RejectExpired},
		{"an RSA-1024 key certified by the CA", func() []byte {
			weak, err := rsa.GenerateKey(rand.Reader, 1024)
			if err != nil {
				t.Fatal(err)
			}
			id, err := ep.CA().IssueFor(ep.Subject(mine), now.Add(-time.Minute), time.Hour, weak)
			if err != nil {
				t.Fatal(err)
			}
			return sign(id)
		}(), naiveSignature, cloud.RejectMalformed},
		{"the intermediate as the leaf", func() []byte {
			data, _ := ocitest.SignEvidence(myID.Intermediate, myID.Intermediate, myID.Key, b, now)
			return data
		}(), nil, cloud.RejectMalformed},
		// OCI's instance certificates are for client authentication
		// (a genuine one lists clientAuth only: testdata/oci-go-sdk-2017);
		// a certificate of the CA for anything else is not one.
		{"a certificate without the clientAuth usage", func() []byte {
			return sign(issueWithUsages(t, ep, ep.Subject(mine), now, nil))
		}(), naiveSignature, cloud.RejectMalformed},
		{"a certificate for server authentication only", func() []byte {
			return sign(issueWithUsages(t, ep, ep.Subject(mine), now, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}))
		}(), naiveSignature, cloud.RejectMalformed},
		{"a certificate of an instance in another compartment", func() []byte {
			s := ep.Subject(mine)
			s.Compartment = "ocid1.compartment.oc1..aaaaanothercompartment"
			return sign(issue(s, now.Add(-time.Minute), time.Hour))
		}(), naiveChain(roots), cloud.RejectIssuer},
	} {
		if tc.naive != nil {
			if err := tc.naive(tc.data); err != nil {
				t.Errorf("%s: a naive verifier denies it already (%v): the case tests nothing", tc.name, err)
			}
		}
		_, err := v.Verify(ctx, tc.data, b, now)
		if !isRejection(err, tc.want) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	if _, err := v.Verify(ctx, sign(myID), b, now); err != nil {
		t.Errorf("good evidence: %v", err)
	}
}

// issueWithUsages is a certificate of the endpoint's CA with those
// extended key usages (OCI's list clientAuth).
func issueWithUsages(t *testing.T, ep *ocitest.Cloud, s ocitest.Subject, now time.Time, usages []x509.ExtKeyUsage) ocitest.Identity {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	id, err := ep.CA().IssueWithUsages(s, now.Add(-time.Minute), time.Hour, k, usages)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// naiveSignature trusts the certificate it is handed: it checks only
// that its key signed the binding.
func naiveSignature(data []byte) error {
	e, err := agentid.ParseEvidence(data)
	if err != nil {
		return err
	}
	leaf, err := x509.ParseCertificate(e.Certificate)
	if err != nil {
		return err
	}
	return leaf.CheckSignature(x509.SHA256WithRSA, agentid.SignedMessage(e.Binding, e.SignedAt), e.Signature)
}

// naiveChain checks the chain to the roots and nothing of the signature
// or the binding.
func naiveChain(roots *x509.CertPool) func([]byte) error {
	return func(data []byte) error {
		e, err := agentid.ParseEvidence(data)
		if err != nil {
			return err
		}
		leaf, err := x509.ParseCertificate(e.Certificate)
		if err != nil {
			return err
		}
		inter, err := x509.ParseCertificate(e.Intermediate)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		pool.AddCert(inter)
		_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
}

// TestIPv6OnlyInstance: an instance whose VNIC has an IPv6 address and no
// private IPv4 address (an IPv6-only subnet) joins: the agent gives its
// kubelet the IPv6 address, the view lists it (ExternalIP for a global
// address, as OCI's CCM types it; ::1 here), its evidence verifies.
func TestIPv6OnlyInstance(t *testing.T) {
	ep, c := setup(t, ocitest.Options{}, "")
	ctx := context.Background()
	in := ep.Put(ocitest.Instance{DisplayName: "v6-only", IPv6: "::1", FreeformTags: tagged(cluster)})
	id := node(t, ep, in)
	got, err := id.Instance(ctx)
	if err != nil {
		t.Fatalf("the agent on an IPv6-only instance: %v", err)
	}
	if got.InternalIP != "::1" || got.ProviderID != "oci://"+in.ID {
		t.Errorf("instance %+v", got)
	}
	want := []v1.NodeAddress{{Type: v1.NodeExternalIP, Address: "::1"}}
	list, err := c.InstanceView().List(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !slices.Equal(list[0].Addresses, want) {
		t.Fatalf("view %+v, want the addresses %v", list, want)
	}
	confirmed, err := c.ConfirmInstance(ctx, "oci://"+in.ID)
	if err != nil || !slices.Equal(confirmed.Addresses, want) {
		t.Fatalf("confirmed %+v, %v", confirmed, err)
	}
	b := nodeidtest.NewBinding(t)
	blk, err := id.Evidence(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verifier(t, c).Verify(ctx, blk.Data, b, time.Now()); err != nil {
		t.Fatal(err)
	}
}
