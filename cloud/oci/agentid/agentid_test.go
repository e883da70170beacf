package agentid

import (
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
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

func TestNodeName(t *testing.T) {
	for in, want := range map[string]string{"Worker-1": "worker-1", "node.example.com": "node.example.com", "a_b": "", "-a": "", "": "",
		"a b": "", strings.Repeat("a", 254): ""} {
		if got := NodeName(in); got != want {
			t.Errorf("NodeName(%q) = %q, want %q", in, got, want)
		}
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

func TestNewNodeIdentity(t *testing.T) {
	for _, cfg := range []nodeid.Config{
		{NodeNamePolicy: "InstanceID"},
		{Settings: map[string]string{"x": "y"}},
		{MetadataURL: "https://169.254.169.254"},
		{MetadataURL: "http://169.254.169.254/opc/v2"},
	} {
		if _, err := NewNodeIdentity(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	if _, err := NewNodeIdentity(nodeid.Config{MetadataURL: "http://127.0.0.1:8080", NodeNamePolicy: PolicyDisplayName}); err != nil {
		t.Error(err)
	}
}
