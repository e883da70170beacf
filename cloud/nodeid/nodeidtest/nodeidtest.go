// Package nodeidtest holds the checks every backend's node identity
// (cloud/<name>/agentid) passes in its own tests, written once: that it is
// registered with cloud/nodeid and builds from the agent's empty config,
// that its Node names follow the rules all backends share, and that it
// refuses the configs no backend takes.
package nodeidtest

import (
	"maps"
	"net/url"
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// Registered checks that the node identity registered under name builds
// from the agent's config with nothing set (the cloud's own metadata
// address, the default policy), as a machine's agent builds it.
func Registered(t testing.TB, name string) {
	t.Helper()
	if !nodeid.Known(name) {
		t.Fatalf("%q is not registered: %v", name, nodeid.Backends())
	}
	if _, err := nodeid.New(name, nodeid.Config{}); err != nil {
		t.Fatalf("%s: %v (registered: %v)", name, err, nodeid.Backends())
	}
}

// SharedNodeNames are the Node names every backend gives an instance named
// the key: its name lower-cased where that is a DNS-1123 subdomain, else
// none.
var SharedNodeNames = map[string]string{
	"Node-1": "node-1", "web.example.com": "web.example.com",
	"under_score": "", "": "", "-dash": "", "a..b": "", "ends.": "",
}

// NodeNames checks nodeName against SharedNodeNames and the backend's own
// cases (own: the instance's name, the Node name).
func NodeNames(t testing.TB, nodeName func(string) string, own map[string]string) {
	t.Helper()
	for _, cases := range []map[string]string{SharedNodeNames, own} {
		for name, want := range cases {
			if got := nodeName(name); got != want {
				t.Errorf("NodeName(%q) = %q, want %q", name, got, want)
			}
		}
	}
}

// SharedRefusals are the configs every backend's node identity refuses,
// by what they are: a policy no backend has, and metadata URLs with
// credentials, a query or a fragment, another scheme, or no host
// (cloud/nodeid/linklocal's rules, which a backend must apply to its
// metadataURL).
var SharedRefusals = map[string]nodeid.Config{
	"a policy of no backend":           {NodeNamePolicy: "NoSuchPolicy"},
	"a metadata URL with credentials":  {MetadataURL: "http://u:p@169.254.169.254"},
	"a metadata URL with a query":      {MetadataURL: "http://169.254.169.254/?x=1"},
	"a metadata URL with a fragment":   {MetadataURL: "http://169.254.169.254#f"},
	"a metadata URL of another scheme": {MetadataURL: "ftp://169.254.169.254"},
	"a metadata URL without a scheme":  {MetadataURL: "169.254.169.254"},
	"a metadata URL without a host":    {MetadataURL: "http://"},
}

// Refuses checks that build refuses SharedRefusals and the backend's own
// (own, by what they are: another policy name of its cloud, a setting it
// does not know, a URL its service rules out...).
func Refuses[I any](t testing.TB, build func(nodeid.Config) (I, error), own map[string]nodeid.Config) {
	t.Helper()
	for _, cases := range []map[string]nodeid.Config{SharedRefusals, own} {
		for what, cfg := range cases {
			if _, err := build(cfg); err == nil {
				t.Errorf("%s (%+v): accepted", what, cfg)
			}
		}
	}
}

// Agent returns a function that builds, with build (a backend's
// NewNodeIdentity), the node identity of an agent whose metadataURL is a
// test endpoint's (settings its cloudSettings), taking the endpoint's
// MetadataURL answer as it comes:
//
//	id := nodeidtest.Agent(t, agentid.NewNodeIdentity, nil)(endpoint.MetadataURL(instanceID))
//
// An error of either fails the test.
func Agent[I any](t testing.TB, build func(nodeid.Config) (I, error), settings map[string]string) func(string, error) I {
	return func(metadataURL string, err error) I {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		id, err := build(nodeid.Config{MetadataURL: metadataURL, Settings: settings})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
}

// Spec is a backend's node identity, for Check.
type Spec[I any] struct {
	// Name is the name it is registered under.
	Name string
	// NodeName is its NodeName of an instance's name (nil where that takes
	// more than a name: the backend's own test checks it); Names are its
	// own cases beyond SharedNodeNames.
	NodeName func(string) string
	Names    map[string]string
	// ProviderIDs are providerIDs its ProviderID made (the keys) and what
	// each must be.
	ProviderIDs map[string]string
	// New is its NewNodeIdentity; Refusals are the configs it refuses
	// beyond SharedRefusals, by what they are.
	New      func(nodeid.Config) (I, error)
	Refusals map[string]nodeid.Config
	// Policy is its one node name policy, which New takes (none: not
	// checked). Plain says it has no cloudSettings (nodeid.Config's
	// CheckPlain): it refuses a setting. HostOnly says its metadataURL is
	// plain http to a host: it refuses https and a path.
	Policy          string
	Plain, HostOnly bool
	// Reads is where an identity reads its metadata (nil: not checked);
	// Default is where it does with no metadataURL configured. With one
	// configured, it reads there with the configured scheme and host.
	Reads   func(I) string
	Default string
}

// Check runs Registered, NodeNames and Refuses on a backend's node
// identity, and checks its policy, providerIDs and metadata address as s
// asks.
func Check[I any](t testing.TB, s Spec[I]) {
	t.Helper()
	Registered(t, s.Name)
	if s.NodeName != nil {
		NodeNames(t, s.NodeName, s.Names)
	}
	own := maps.Clone(s.Refusals)
	if own == nil {
		own = map[string]nodeid.Config{}
	}
	if s.Plain {
		own["a setting (it has none)"] = nodeid.Config{Settings: map[string]string{"x": "y"}}
	}
	if s.HostOnly {
		own["an https metadata URL"] = nodeid.Config{MetadataURL: "https://169.254.169.254"}
		own["a metadata URL with a path"] = nodeid.Config{MetadataURL: "http://169.254.169.254/latest"}
	}
	Refuses(t, s.New, own)
	if s.Policy != "" {
		if _, err := s.New(nodeid.Config{NodeNamePolicy: s.Policy}); err != nil {
			t.Errorf("its policy %s: %v", s.Policy, err)
		}
	}
	for got, want := range s.ProviderIDs {
		if got != want {
			t.Errorf("ProviderID: %s, want %s", got, want)
		}
	}
	if s.Reads == nil {
		return
	}
	def, err := url.Parse(s.Default)
	if err != nil || def.Host == "" {
		t.Fatalf("Default %q: want a URL", s.Default)
	}
	configured := *def
	configured.Scheme, configured.Host = "http", "127.0.0.1:8080"
	for cfg, want := range map[string]string{"": s.Default, "http://127.0.0.1:8080/": configured.String()} {
		id, err := s.New(nodeid.Config{MetadataURL: cfg})
		if err != nil {
			t.Errorf("metadataURL %q: %v", cfg, err)
		} else if got := s.Reads(id); got != want {
			t.Errorf("metadataURL %q: reads %s, want %s", cfg, got, want)
		}
	}
}
