package agentid

import (
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

func TestOCIDs(t *testing.T) {
	for _, ok := range []struct{ s, kind string }{
		{"ocid1.instance.oc1.phx.abyhqljrexample", "instance"},
		{"ocid1.instance.oc1.eu-frankfurt-1.abtheljrfsguhltfu6r2y6gwhthevlmgl2ijdl4ozpm34ejr6vgalufakjzq", "instance"},
		{"ocid1.tenancy.oc1..aaaaaaaaba3pv6wkcr4jqae5f15p2b2m2yt2j6rx32uzr4h25vqstifsfdsq", "tenancy"},
		{"ocid1.compartment.oc1..aaaaaaaaexample", "compartment"},
		{"ocid1.instance.oc2.us-langley-1.futureuse.aaaaexample", "instance"},
	} {
		if !ValidOCID(ok.s, ok.kind) {
			t.Errorf("%s refused as %s", ok.s, ok.kind)
		}
	}
	for _, bad := range []string{"", "ocid1.instance.oc1.phx.", "ocid2.instance.oc1.phx.abc", "ocid1.tenancy.oc1..aaaa",
		"ocid1.instance.oc1.phx.ABC", "ocid1.instance.oc1.phx.a/b", "ocid1.instance.oc1.phx.a b", "oci://ocid1.instance.oc1.phx.a",
		"ocid1.instance.oc1.phx.a\n", "ocid1.instance.oc1.phx." + strings.Repeat("a", 255)} {
		if ValidOCID(bad, "instance") {
			t.Errorf("%q accepted as an instance OCID", bad)
		}
	}
	if !ValidCompartment("ocid1.tenancy.oc1..aaaa") || ValidCompartment("ocid1.instance.oc1.phx.aaaa") {
		t.Error("the root compartment is the tenancy; an instance is no compartment")
	}
}

func TestParseEvidence(t *testing.T) {
	good := Evidence{Version: EvidenceVersion, Binding: "b", SignedAt: 1, Certificate: []byte{1}, Intermediate: []byte{2}, Signature: []byte{3}}
	data, err := good.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseEvidence(data); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"unknown field": strings.Replace(string(data), `{"v":1`, `{"v":1,"x5u":"http://evil"`, 1),
		"trailing":      string(data) + `{}`,
		"version":       strings.Replace(string(data), `"v":1`, `"v":2`, 1),
		"no binding":    strings.Replace(string(data), `"binding":"b"`, `"binding":""`, 1),
		"no signature":  strings.Replace(string(data), `"signature":"Aw=="`, `"signature":""`, 1),
		"not JSON":      "-----BEGIN",
		"too large":     strings.Repeat(" ", MaxEvidenceSize+1),
	} {
		if _, err := ParseEvidence([]byte(bad)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// nodeidtest.Check: registered, Node names and refusals as every backend;
// its own: names too long or with a space, another policy, a setting,
// https, a path. A config it takes.
func TestShared(t *testing.T) {
	nodeidtest.Check(t, nodeidtest.Spec[*NodeIdentity]{Name: Name, NodeName: NodeName, New: NewNodeIdentity,
		Names:  map[string]string{"Worker-1": "worker-1", "a_b": "", "a b": "", strings.Repeat("a", 254): ""},
		Policy: PolicyDisplayName, Plain: true, HostOnly: true,
		Refusals: map[string]nodeid.Config{
			"another policy":  {NodeNamePolicy: "InstanceID"},
			"the opc/v2 path": {MetadataURL: "http://169.254.169.254/opc/v2"},
		}})
	if _, err := NewNodeIdentity(nodeid.Config{MetadataURL: "http://127.0.0.1:8080", NodeNamePolicy: PolicyDisplayName}); err != nil {
		t.Error(err)
	}
}

// TestTenancyForms: a tenancy's OCID in the current form and in the old
// one, as genuine instance certificates of 2017 carry it in opc-tenant
// (oci-go-sdk's commit 3678a0438c; cloud/oci/testdata/oci-go-sdk-2017);
// the old form is a root compartment too.
func TestTenancyForms(t *testing.T) {
	for _, ok := range []string{
		"ocid1.tenancy.oc1..aaaaaaaaba3pv6wkcr4jqae5f15p2b2m2yt2j6rx32uzr4h25vqstifsfdsq",
		"ocidv1:tenancy:oc1:phx:1460406592660:aaaaaaaab4faofrfkxecohhjuivjq262pu",
		"ocidv1:tenancy:oc1:phx:1458753575596:aaaaaaaavary4yqe4ljpv5wzp74eflkwpu",
	} {
		if !ValidTenancy(ok) || !ValidCompartment(ok) {
			t.Errorf("%s refused as a tenancy or root compartment", ok)
		}
	}
	for _, bad := range []string{"", "ocidv1:tenancy:oc1:phx:146040659266a:aaaa", "ocidv1:compartment:oc1:phx:1460406592660:aaaa",
		"ocidv1:tenancy:oc1:phx:1460406592660:AAAA", "ocidv1:tenancy:oc1:phx:1460406592660:", "ocidv1:tenancy:oc1:phx:1460406592660:aa:bb",
		"ocidv1:tenancy:oc1:phx:1460406592660:aaaa\n", "ocidv1:tenancy:oc1:phx:1:" + strings.Repeat("a", 255), "ocid1.compartment.oc1..aaaa"} {
		if ValidTenancy(bad) {
			t.Errorf("%q accepted as a tenancy", bad)
		}
	}
	if ValidOCID("ocidv1:tenancy:oc1:phx:1460406592660:aaaaaaaab4faofrfkxecohhjuivjq262pu", "tenancy") {
		t.Error("ValidOCID takes the old form (only ValidTenancy should)")
	}
}

// TestVNICAddress: the address of the first VNIC given to the kubelet:
// the private IPv4 address, or on an IPv6-only VNIC its first IPv6
// address (fields of /opc/v2/vnics/ as pritunl-cloud's oracle/metadata.go
// reads them).
func TestVNICAddress(t *testing.T) {
	for _, tc := range []struct {
		v    vnicDoc
		want string
	}{
		{vnicDoc{PrivateIP: "10.0.0.3", IPv6Addresses: []string{"2603:c020:4:1a::12"}}, "10.0.0.3"},
		{vnicDoc{IPv6Addresses: []string{"2603:c020:4:1a::12", "2603:c020:4:1a::13"}}, "2603:c020:4:1a::12"},
		{vnicDoc{PrivateIP: "", IPv6Addresses: []string{"bogus", "fd00::5"}}, "fd00::5"},
		{vnicDoc{PrivateIP: "2603:c020::1"}, ""},
		{vnicDoc{IPv6Addresses: []string{"10.0.0.3"}}, ""},
		{vnicDoc{}, ""},
	} {
		if got := tc.v.address(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.v, got, tc.want)
		}
	}
}
