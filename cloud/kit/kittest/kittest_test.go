package kittest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// testConfig is a backend's config built on kit as the backends build
// theirs; wired says which of kit's checks its validate applies.
type testConfig struct {
	ClusterID string `json:"clusterID"`
	Endpoint  string `json:"endpoint,omitempty"`
	TokenFile string `json:"tokenFile,omitempty"`
	TokenEnv  string `json:"tokenEnv,omitempty"`
	kit.ViewConfig
}

func parser(endpoint, secret, durations bool) func(io.Reader) (testConfig, error) {
	return func(r io.Reader) (testConfig, error) {
		return kit.ParseConfig("test", r, func(c *testConfig) { kit.DefaultDurations(c.ViewConfig.Durations()) }, func(c *testConfig) error {
			var errs []error
			if err := kit.CheckEndpoint(c.Endpoint, true); endpoint && c.Endpoint != "" && err != nil {
				errs = append(errs, fmt.Errorf("endpoint: %w", err))
			}
			if secret {
				errs = append(errs, kit.Secret{File: c.TokenFile, FileField: "tokenFile", Env: c.TokenEnv, EnvField: "tokenEnv"}.Check()...)
			}
			if durations {
				errs = append(errs, kit.CheckDurations(c.ViewConfig.Durations())...)
			}
			return errors.Join(errs...)
		})
	}
}

func TestConfigFailsABackendThatSkipsAKitCheck(t *testing.T) {
	fields := Fields{Endpoint: "endpoint", SecretFile: "tokenFile", SecretEnv: "tokenEnv"}
	good := "clusterID: c1\ntokenFile: /t\n"
	if Fails(t, func(tb testing.TB) { Config(tb, parser(true, true, true), good, fields) }) {
		t.Fatal("a config with every check failed")
	}
	for name, parse := range map[string]func(io.Reader) (testConfig, error){
		"no endpoint check": parser(false, true, true), "no secret check": parser(true, false, true), "no duration check": parser(true, true, false),
	} {
		if !Fails(t, func(tb testing.TB) { Config(tb, parse, good, fields) }) {
			t.Errorf("%s: passed", name)
		}
	}
}

func TestSecretFailsAReaderOfAnotherPlace(t *testing.T) {
	read := func(file, env string) (string, error) {
		s, err := kit.Secret{File: file, Env: env}.Read()
		if err != nil {
			return "", fmt.Errorf("test token: %w", err)
		}
		return s, nil
	}
	if Fails(t, func(tb testing.TB) { Secret(tb, "test token", read) }) {
		t.Fatal("a reader of both places failed")
	}
	for name, read := range map[string]func(string, string) (string, error){
		"the file only":       func(file, _ string) (string, error) { return kit.Secret{File: file}.Read() },
		"errors without what": func(file, env string) (string, error) { return kit.Secret{File: file, Env: env}.Read() },
	} {
		if !Fails(t, func(tb testing.TB) { Secret(tb, "test token", read) }) {
			t.Errorf("%s: passed", name)
		}
	}
}

func TestNumericProviderIDFailsALaxParser(t *testing.T) {
	format := func(id int64) string { return fmt.Sprintf("test://%d", id) }
	strict := func(s string) (int64, error) {
		return kit.NumericProviderID(s, "test://", "id", errors.New("not ours"))
	}
	lax := func(s string) (int64, error) {
		var id int64
		_, err := fmt.Sscanf(strings.TrimPrefix(s, "test://"), "%d", &id)
		return id, err
	}
	if Fails(t, func(tb testing.TB) { NumericProviderID(tb, strict, format) }) {
		t.Fatal("kit.NumericProviderID failed")
	}
	if !Fails(t, func(tb testing.TB) { NumericProviderID(tb, lax, format) }) {
		t.Error("a parser of 03164444 and other clouds' IDs passed")
	}
}

func TestListFailsFailsAPartialList(t *testing.T) {
	partial := func(context.Context) ([]view.Instance, error) {
		return []view.Instance{{}}, errors.New("page 2: HTTP 500")
	}
	whole := func(context.Context) ([]view.Instance, error) {
		return nil, errors.New("page 2: HTTP 500 (token s3cr3t)")
	}
	if !Fails(t, func(tb testing.TB) { ListFails(tb, "partial", partial, "page 2", "") }) {
		t.Error("a list with instances and an error passed")
	}
	if !Fails(t, func(tb testing.TB) { ListFails(tb, "secret", whole, "page 2", "s3cr3t") }) {
		t.Error("an error holding the token passed")
	}
	if Fails(t, func(tb testing.TB) { ListFails(tb, "good", whole, "page 2", "other") }) {
		t.Error("a good failure failed")
	}
}

func TestConfirmsFailsAnotherVerdict(t *testing.T) {
	outage := func(context.Context, string) (view.Instance, error) { return view.Instance{}, errors.New("HTTP 503") }
	gone := func(context.Context, string) (view.Instance, error) {
		return view.Instance{}, &kit.AbsentError{ID: "x"}
	}
	for name, c := range map[string]struct {
		confirm func(context.Context, string) (view.Instance, error)
		want    Verdict
		says    string
		fails   bool
	}{
		"an outage taken as gone":   {outage, Absent, "", true},
		"gone taken as an outage":   {gone, NoVerdict, "", true},
		"gone, not saying the word": {gone, Absent, "tag", true},
		"an outage":                 {outage, NoVerdict, "503", false},
		"gone":                      {gone, Absent, "", false},
	} {
		if got := Fails(t, func(tb testing.TB) { Confirms(tb, name, c.confirm, "test://1", c.want, c.says) }); got != c.fails {
			t.Errorf("%s: failed %v, want %v", name, got, c.fails)
		}
	}
}
