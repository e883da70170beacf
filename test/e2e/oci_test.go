package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/oci"
	ociagentid "github.com/mooring-dev/mooring/cloud/oci/agentid"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
	"github.com/mooring-dev/mooring/internal/evidence"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// ociNodesJoin (TestSignedClouds/OCI): mooring on Oracle Cloud
// Infrastructure, against the OCI-compatible endpoint (cloud/oci/ocitest:
// Core Services ListInstances,
// ListVnicAttachments and GetVnic, paged by two, with OCI request
// signatures checked; a metadata service per instance serving its instance
// principal's certificate, key and intermediate) with the real oci-go-sdk
// in mooring-ccm and mooring-csr-approver. Three instances tagged as the
// cluster's join the shared bed: each mooring-agent (cloud: oci) signs its
// CSR key's binding with its instance certificate's key; the standalone
// approver (--cloud-provider=oci) verifies the chain to OCI's root
// (fetched from the endpoint's auth service with the approver's API key),
// the tenancy, compartment and usage of the certificate and the
// signature, and finds the instance running and tagged in the view;
// mooring-ccm initializes the Nodes with oci://
// providerIDs, the availability domain as zone and the fault domain label.
// Then OCI-specific attacks are denied by the real approver.
func ociNodesJoin(t *testing.T, bed *signedBed) {
	// The approver judges against a record at most 2 s old (default 10 s),
	// so that the attack of a terminated instance waits little.
	j := joinThreeWith(t, bed, harness.StartOCICloud, "OCI instances", "oci", joinOptions{ApproverArgs: []string{"--instance-max-age=" + ociInstanceMaxAge.String()},
		CCMArgs: ociLBCCMArgs, CCMConfig: ociLBConfig})
	c, o, ctx, start, fleet := j.C, j.Cloud, j.Ctx, j.Start, j.Fleet

	for _, m := range fleet.Machines {
		name := m.Name
		node := waitInitialized(ctx, t, c, name)
		if !strings.HasPrefix(node.Spec.ProviderID, "oci://ocid1.instance.oc1.") || node.Labels[corev1.LabelTopologyZone] != "US-ASHBURN-AD-1" ||
			node.Labels[corev1.LabelTopologyRegion] != ocitest.DefaultRegionKey || node.Labels[corev1.LabelInstanceTypeStable] != ocitest.DefaultShape ||
			node.Labels[oci.FaultDomainLabel] != ocitest.DefaultFaultDomain {
			t.Fatalf("%s: providerID %q, labels %v", name, node.Spec.ProviderID, node.Labels)
		}
		var internal, external string
		for _, a := range node.Status.Addresses {
			switch a.Type {
			case corev1.NodeInternalIP:
				internal = a.Address
			case corev1.NodeExternalIP:
				external = a.Address
			}
		}
		if !strings.HasPrefix(internal, harness.OCIPrivateNet) || !strings.HasPrefix(external, harness.OCIPublicNet) {
			t.Fatalf("%s: addresses %v", name, node.Status.Addresses)
		}
		servingApprovedByMooring(ctx, t, c, name)
	}
	t.Logf("3 nodes Ready, initialized with oci:// providerIDs, serving certificates approved, %v after the agents started",
		time.Since(start).Round(time.Millisecond))
	if n := o.Calls("identity"); n < 9 {
		t.Errorf("the metadata services served %d identity files, want at least three per join", n)
	}
	t.Logf("cloud calls: ListInstances %d, ListVnicAttachments %d, GetVnic %d, GetInstance %d, identity %d, roots %d, unauthenticated %d",
		o.Calls("ListInstances"), o.Calls("ListVnicAttachments"), o.Calls("GetVnic"), o.Calls("GetInstance"), o.Calls("identity"),
		o.Calls("roots"), o.Calls("unauthenticated"))
	// The approver fetched OCI's roots from the auth service (once per
	// approver process, for every join).
	if n := o.Calls("roots"); n < 1 {
		t.Errorf("the auth service answered the roots %d times: the joins were not verified against fetched roots", n)
	}
	if n := o.Calls("unauthenticated"); n != 0 {
		t.Errorf("%d API calls were refused for their signature", n)
	}

	ociAttacks(ctx, t, c, o, fleet.Machines[0].Name)

	// Service load balancers (cloudjoin_lb_oci_test.go).
	var names []string
	for _, m := range fleet.Machines {
		names = append(names, m.Name)
	}
	testCloudLB(ctx, t, c, names, ociLB(t, o, c))
}

// ociInstanceMaxAge is the approver's --instance-max-age.
const ociInstanceMaxAge = 2 * time.Second

// ociAttacks joins through the real approver with OCI evidence an attacker
// can get or make: each CSR is denied with its reason, and a good one
// passes. joined is a machine's node name.
func ociAttacks(ctx context.Context, t *testing.T, c *testbed.Cluster, o *harness.OCICloud, joined string) {
	t.Helper()
	mine := o.AddNode(e2eCluster, "attacker")
	victim := o.AddNode(e2eCluster, "victim")
	otherCluster := o.AddInstance("other-cluster-node", map[string]string{harness.OCITag: "another-cluster"})
	gone := o.AddNode(e2eCluster, "terminated")
	fromMetadata := func(in ocitest.Instance, binding string) []evidence.Block {
		md, err := o.MetadataURL(in.ID)
		if err != nil {
			t.Fatal(err)
		}
		id, err := ociagentid.NewNodeIdentity(nodeid.Config{MetadataURL: md})
		if err != nil {
			t.Fatal(err)
		}
		b, err := id.Evidence(ctx, binding)
		if err != nil {
			t.Fatal(err)
		}
		return []evidence.Block{b}
	}
	block := func(data []byte, err error) []evidence.Block {
		if err != nil {
			t.Fatal(err)
		}
		return []evidence.Block{{Type: ociagentid.EvidenceType, Data: data}}
	}
	issued := func(s ocitest.Subject, notBefore time.Time, life time.Duration, binding string) []evidence.Block {
		id, err := o.CA().Issue(s, notBefore, life)
		if err != nil {
			t.Fatal(err)
		}
		return block(id.Evidence(binding, time.Now()))
	}
	rogue, err := ocitest.NewCA("rogue", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	victimID, err := o.CurrentIdentity(victim.ID)
	if err != nil {
		t.Fatal(err)
	}
	myID, err := o.CurrentIdentity(mine.ID)
	if err != nil {
		t.Fatal(err)
	}
	otherTenancy := o.Subject(mine)
	otherTenancy.Tenancy = "ocid1.tenancy.oc1..aaaaaaaaanothertenancyofsomeoneelse"
	var goneEvidence, replayed []evidence.Block
	runAttacks(ctx, t, c, []attack{
		{"a certificate of another tenancy", mine.DisplayName, func(b string) []evidence.Block {
			return issued(otherTenancy, time.Now().Add(-time.Minute), time.Hour, b)
		}, "EvidenceWrongIssuer"},
		{"an expired certificate", mine.DisplayName, func(b string) []evidence.Block {
			return issued(o.Subject(mine), time.Now().Add(-5*time.Hour), 4*time.Hour, b)
		}, "EvidenceExpired"},
		{"a certificate OCI rotated a day ago (revoked), still valid", mine.DisplayName, func(b string) []evidence.Block {
			return issued(o.Subject(mine), time.Now().Add(-25*time.Hour), 48*time.Hour, b)
		}, "EvidenceExpired"},
		{"a certificate of an instance in another compartment", mine.DisplayName, func(b string) []evidence.Block {
			s := o.Subject(mine)
			s.Compartment = "ocid1.compartment.oc1..aaaaaaaaanothercompartmentofthetenancy"
			return issued(s, time.Now().Add(-time.Minute), time.Hour, b)
		}, "EvidenceWrongIssuer"},
		{"a certificate of OCI's CA that is not for client authentication", mine.DisplayName, func(b string) []evidence.Block {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				t.Fatal(err)
			}
			id, err := o.CA().IssueWithUsages(o.Subject(mine), time.Now().Add(-time.Minute), time.Hour, k, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})
			if err != nil {
				t.Fatal(err)
			}
			return block(id.Evidence(b, time.Now()))
		}, "EvidenceMalformed"},
		{"a chain to a root OCI does not publish", victim.DisplayName, func(b string) []evidence.Block {
			id, err := rogue.Issue(o.Subject(victim), time.Now().Add(-time.Minute), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			return block(id.Evidence(b, time.Now()))
		}, "EvidenceSignatureInvalid"},
		{"the victim's certificate signed by another instance's key", victim.DisplayName, func(b string) []evidence.Block {
			return block(ocitest.SignEvidence(victimID.Certificate, victimID.Intermediate, myID.Key, b, time.Now()))
		}, "EvidenceSignatureInvalid"},
		{"an instance of another cluster's tag", otherCluster.DisplayName, func(b string) []evidence.Block {
			return fromMetadata(otherCluster, b)
		}, "InstanceNotInCluster"},
		{"a terminated instance's certificate (revoked with it)", gone.DisplayName, func(b string) []evidence.Block {
			goneEvidence = fromMetadata(gone, b)
			if err := o.SetState(gone.ID, "TERMINATED"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(ociInstanceMaxAge + time.Second) // the approver's record of it is newer
			return goneEvidence
		}, "InstanceNotRunning"},
		{"another instance's node name", joined, func(b string) []evidence.Block {
			return fromMetadata(mine, b)
		}, "NodeNameMismatch"},
		{"good evidence", mine.DisplayName, func(b string) []evidence.Block {
			replayed = fromMetadata(mine, b)
			return replayed
		}, ""},
		{"the approved evidence copied onto another key", mine.DisplayName, func(string) []evidence.Block { return replayed }, "EvidenceNotBoundToKey"},
	})
}
