package agentid

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// metadataService answers as an instance's metadata service does, for the
// instance in; it records the audience of the last token asked for.
func metadataService(t *testing.T, in api.InstanceIdentity, audience *string) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(api.MetadataHeader) != "true" {
			http.Error(w, "no metadata header", http.StatusForbidden)
			return
		}
		switch r.URL.Path {
		case "/" + api.Version + "/instance":
			_ = json.NewEncoder(w).Encode(in)
		case "/" + api.Version + "/identity":
			*audience = r.URL.Query().Get("audience")
			_, _ = w.Write([]byte("header.claims.signature"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s.URL
}

func TestRegistered(t *testing.T) {
	if !nodeid.Known(Name) {
		t.Fatalf("%q is not registered: %v", Name, nodeid.Backends())
	}
	if _, err := nodeid.New(Name, nodeid.Config{}); err == nil {
		t.Fatal("no metadata URL: accepted")
	}
	id, err := nodeid.New(Name, nodeid.Config{MetadataURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := id.(*Identity); !ok {
		t.Fatalf("the registry built a %T", id)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]nodeid.Config{
		"no metadata URL": {},
		"settings":        {MetadataURL: "http://127.0.0.1:1", Settings: map[string]string{"region": "x"}},
		"bad policy":      {MetadataURL: "http://127.0.0.1:1", NodeNamePolicy: "Hostname"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestInstanceAndEvidence(t *testing.T) {
	in := api.InstanceIdentity{ID: "i-0a1b", Name: "Node-A", Addresses: []api.Address{
		{Type: api.ExternalIP, Address: "192.0.2.1"}, {Type: api.InternalIP, Address: "127.0.0.7"}, {Type: api.InternalIP, Address: "127.0.0.8"},
	}}
	var audience string
	md := metadataService(t, in, &audience)
	ctx := context.Background()
	for policy, nodeName := range map[string]string{"": "node-a", "InstanceName": "node-a", "InstanceID": "i-0a1b"} {
		id, err := New(nodeid.Config{MetadataURL: md, NodeNamePolicy: policy})
		if err != nil {
			t.Fatal(err)
		}
		got, err := id.Instance(ctx)
		want := nodeid.Instance{ID: "i-0a1b", Name: "Node-A", NodeName: nodeName, ProviderID: "local://i-0a1b", InternalIP: "127.0.0.7"}
		if err != nil || got != want {
			t.Errorf("policy %q: %+v, %v; want %+v", policy, got, err, want)
		}
	}
	id, err := New(nodeid.Config{MetadataURL: md})
	if err != nil {
		t.Fatal(err)
	}
	b, err := id.Evidence(ctx, "the-binding")
	if err != nil || b.Type != EvidenceType || string(b.Data) != "header.claims.signature" || audience != "the-binding" {
		t.Fatalf("Evidence = %+v, %v (audience %q)", b, err, audience)
	}
	if errors.Is(err, nodeid.ErrNoEvidence) {
		t.Fatal("the local cloud signs its instances' identity")
	}
}

func TestNamePolicy(t *testing.T) {
	for in, want := range map[string]NamePolicy{"": NameFromInstanceName, "InstanceName": NameFromInstanceName, "InstanceID": NameFromInstanceID} {
		if got, err := ParseNamePolicy(in); err != nil || got != want {
			t.Errorf("ParseNamePolicy(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"Hostname", "instanceid", " InstanceID"} {
		if _, err := ParseNamePolicy(bad); err == nil {
			t.Errorf("ParseNamePolicy(%q): accepted", bad)
		}
	}
}

// TestProviderIDOnePlace: the providerID is written by ProviderID and read
// by InstanceID, the one place the provider, the verifier and the agent
// take it from.
func TestProviderIDOnePlace(t *testing.T) {
	pid := ProviderID("i-0a1b")
	if pid != "local://i-0a1b" {
		t.Fatalf("ProviderID %q", pid)
	}
	if id, err := InstanceID(pid); err != nil || id != "i-0a1b" {
		t.Fatalf("InstanceID(%q) = %q, %v", pid, id, err)
	}
	for _, bad := range []string{"", "local://", "aws:///us-east-1a/i-1", "local://a/b", "LOCAL://i-1", "i-1"} {
		if id, err := InstanceID(bad); err == nil {
			t.Errorf("InstanceID(%q) = %q", bad, id)
		}
	}
}
