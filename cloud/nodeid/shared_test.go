package nodeid

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	f := Of(func(c Config) (*stubIdentity, error) {
		if c.MetadataURL == "" {
			return nil, errors.New("no URL")
		}
		return &stubIdentity{c.MetadataURL}, nil
	})
	id, err := f(Config{MetadataURL: "http://md"})
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := id.Instance(context.Background()); in.Name != "http://md" {
		t.Fatalf("the factory lost its config: %+v", in)
	}
	// A failed build is a nil Identity, not a typed nil that compares
	// unequal to nil.
	if id, err := f(Config{}); err == nil || id != nil {
		t.Fatalf("a failed build: %#v %v", id, err)
	}
}

func TestConfigChecks(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // "" no error
	}{
		{Config{}, ""},
		{Config{NodeNamePolicy: "ThingName", MetadataURL: "http://x", Settings: map[string]string{}}, ""},
		{Config{NodeNamePolicy: "thingname"}, `cloudy: node name policy "thingname": the only policy is ThingName`},
		{Config{NodeNamePolicy: "Other", Settings: map[string]string{"k": "v"}}, `cloudy: node name policy "Other": the only policy is ThingName`},
		{Config{Settings: map[string]string{"zone": "", "b": "1", "a": "2"}}, `cloudy: cloudSettings: unknown key "a" (the cloudy backend has none)`},
	} {
		err := tc.cfg.CheckPlain("cloudy", "ThingName")
		if got := errString(err); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.cfg, got, tc.want)
		}
	}
	// Each check alone.
	bad := Config{NodeNamePolicy: "Other", Settings: map[string]string{"k": "v"}}
	if err := bad.CheckNoSettings("cloudy"); errString(err) != `cloudy: cloudSettings: unknown key "k" (the cloudy backend has none)` {
		t.Errorf("CheckNoSettings: %v", err)
	}
	if err := bad.CheckPolicy("cloudy", "Other"); err != nil {
		t.Errorf("CheckPolicy: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestNodeName(t *testing.T) {
	long := strings.Repeat("a", 63)
	for in, want := range map[string]string{
		"Node-7":                        "node-7",
		"web.EXAMPLE.com":               "web.example.com",
		"0abc":                          "0abc",
		"":                              "",
		"under_score":                   "",
		"-lead":                         "",
		"trail-":                        "",
		"a..b":                          "",
		"has space":                     "",
		"ümlaut":                        "",
		long + "." + long:               long + "." + long,
		strings.Repeat("a.", 126) + "a": strings.Repeat("a.", 126) + "a", // 253
		strings.Repeat("a.", 127) + "a": "",                              // 255
	} {
		if got := NodeName(in); got != want {
			t.Errorf("NodeName(%.30q) = %q, want %q", in, got, want)
		}
	}
}

func TestTicketed(t *testing.T) {
	var id Identity = ticketStub{Ticketed{Backend: "cloudy", Machine: "a cloudlet"}}
	if !NeedsTicket(id) {
		t.Fatal("an identity with Ticketed needs no ticket")
	}
	_, err := id.Evidence(context.Background(), "binding")
	if !errors.Is(err, ErrNoEvidence) || err.Error() != "cloudy: "+ErrNoEvidence.Error()+": a cloudlet joins with a join ticket (docs/tickets.md)" {
		t.Fatalf("Evidence: %v", err)
	}
}

type ticketStub struct{ Ticketed }

func (ticketStub) Instance(context.Context) (Instance, error) { return Instance{}, nil }
