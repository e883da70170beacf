package kit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCheckEndpointLoopback(t *testing.T) {
	for _, ok := range []string{"https://ec2.example.com", "http://127.0.0.1:8080", "http://127.3.4.5", "http://[::1]:80", "http://localhost:1"} {
		if err := CheckEndpoint(ok, false); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://169.254.169.254", "ftp://127.0.0.1", "https://", "https:host", "https://h#f", "https://h?", "", "https://u:p@h", "https://h/path"} {
		if err := CheckEndpoint(bad, false); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := CheckEndpoint("https://h/path", true); err != nil {
		t.Errorf("a path, allowed: %v", err)
	}
}

type testConfig struct {
	Name string `json:"name"`
	ViewConfig
	Backoff metav1.Duration `json:"backoff,omitempty"`
}

func (c *testConfig) durations() []Duration {
	return append(c.ViewConfig.Durations(), Duration{"backoff", &c.Backoff, time.Minute})
}

func (c *testConfig) defaults() { DefaultDurations(c.durations()) }

func (c *testConfig) validate() error { return errors.Join(CheckDurations(c.durations())...) }

func TestParseConfigWithViewConfig(t *testing.T) {
	parse := func(s string) (testConfig, error) {
		return ParseConfig("test", strings.NewReader(s), (*testConfig).defaults, (*testConfig).validate)
	}
	c, err := parse("name: a\nrequestTimeout: 5s\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.RequestTimeout.Duration != 5*time.Second || c.InstanceMaxAge.Duration != DefaultInstanceMaxAge ||
		c.MinRefreshInterval.Duration != DefaultMinRefreshInterval || c.Backoff.Duration != time.Minute {
		t.Fatalf("%+v", c)
	}
	_, err = parse("name: a\ninstanceMaxAge: -1s\nbackoff: -2s\n")
	if err == nil || !strings.Contains(err.Error(), "instanceMaxAge must not be negative") || !strings.Contains(err.Error(), "backoff must not be negative") {
		t.Fatalf("negative durations: %v", err)
	}
	for _, bad := range []string{"name: a\nviewConfig: {}\n", "name: a\nname: b\n", "name: a\nInstanceMaxAge: 1s\nextra: 1\n"} {
		if _, err := parse(bad); err == nil || !strings.HasPrefix(err.Error(), "test cloud config: ") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := ParseConfig("test", nil, (*testConfig).defaults, (*testConfig).validate); err == nil || !strings.Contains(err.Error(), "--cloud-config is required") {
		t.Fatalf("no config: %v", err)
	}
}

// listConfig embeds ListConfig as a backend's Config does.
type listConfig struct {
	Name string `json:"name"`
	ListConfig
}

func TestListConfig(t *testing.T) {
	parse := func(s string) (listConfig, error) {
		return ParseConfig("test", strings.NewReader(s), func(c *listConfig) { DefaultDurations(c.Durations()) },
			func(c *listConfig) error { return errors.Join(CheckDurations(c.Durations())...) })
	}
	c, err := parse("name: a\nminRefreshInterval: 3s\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxFailureBackoff.Duration != DefaultMaxFailureBackoff || c.RequestTimeout.Duration != DefaultRequestTimeout ||
		c.InstanceMaxAge.Duration != DefaultInstanceMaxAge || c.MinRefreshInterval.Duration != 3*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
	if o := c.ViewOptions(); o.MinRefreshInterval != 3*time.Second || o.MaxFailureBackoff != DefaultMaxFailureBackoff {
		t.Fatalf("view options: %+v", o)
	}
	// The keys are the config's own: flat, as ViewConfig's.
	c, err = parse("name: a\nmaxFailureBackoff: 1m\nrequestTimeout: 5s\n")
	if err != nil || c.MaxFailureBackoff.Duration != time.Minute || c.RequestTimeout.Duration != 5*time.Second {
		t.Fatalf("flat keys: %+v, %v", c, err)
	}
	for _, bad := range []string{"name: a\nlistConfig: {}\n", "name: a\nviewConfig:\n  requestTimeout: 1s\n"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := parse("name: a\nmaxFailureBackoff: -1s\n"); err == nil || err.Error() != "maxFailureBackoff must not be negative" {
		t.Fatalf("negative maxFailureBackoff: %v", err)
	}
}

func TestSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("KIT_TEST_TOKEN", " env-token\n")
	t.Setenv("KIT_TEST_SPACEY", "s3cr3t x")
	for _, tc := range []struct {
		s    Secret
		want string
	}{
		{Secret{File: write("ok", "file-token\n")}, "file-token"},
		{Secret{Env: "KIT_TEST_TOKEN"}, "env-token"},
		{Secret{File: write("password", " pass wörd\n"), Password: true}, "pass wörd"},
		{Secret{Env: "KIT_TEST_SPACEY", Password: true}, "s3cr3t x"},
	} {
		if got, err := tc.s.Read(); err != nil || got != tc.want {
			t.Errorf("%s: %q %v", tc.s.Source(), got, err)
		}
	}
	for _, s := range []Secret{
		{File: write("empty", " \n")}, {File: write("large", strings.Repeat("x", MaxSecretSize+1))},
		{File: write("spacey", "s3cr3t x")}, {File: write("binary", "s3cr3t\x00")}, {File: filepath.Join(dir, "missing")},
		{Env: "KIT_TEST_UNSET"}, {Env: "KIT_TEST_SPACEY"}, {File: write("empty-password", "\n"), Password: true},
	} {
		_, err := s.Read()
		if err == nil {
			t.Errorf("%s: read", s.Source())
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error shows the content: %v", s.Source(), err)
		}
	}
	if errs := (Secret{File: "/f", FileField: "tokenFile", Env: "E", EnvField: "tokenEnv"}).Check(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "tokenFile and tokenEnv: set one, not both") {
		t.Errorf("both: %v", errs)
	}
	if errs := (Secret{Env: "1BAD", EnvField: "tokenEnv"}).Check(); len(errs) != 1 {
		t.Errorf("bad name: %v", errs)
	}
	if errs := (Secret{Env: "GOOD_1"}).Check(); errs != nil {
		t.Errorf("good name: %v", errs)
	}
	// What goes before every error of Read, and the place after it.
	missing := filepath.Join(dir, "missing")
	for _, s := range []Secret{{File: missing, What: "test: API token"}, {Env: "KIT_TEST_UNSET", What: "test: API token"}} {
		if _, err := s.Read(); err == nil || !strings.HasPrefix(err.Error(), "test: API token: ") || !strings.Contains(err.Error(), s.Source()[strings.IndexByte(s.Source(), ' ')+1:]) {
			t.Errorf("%s with What: %v", s.Source(), err)
		}
	}
}

func TestCertPool(t *testing.T) {
	if pool, err := CertPool(""); pool != nil || err != nil {
		t.Fatalf("no file: %v %v", pool, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "not.pem")
	if err := os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pool, err := CertPool(good); pool == nil || err != nil {
		t.Errorf("good: %v", err)
	}
	for _, p := range []string{bad, filepath.Join(dir, "missing")} {
		if _, err := CertPool(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v", p, err)
		}
	}
}

func TestConfigError(t *testing.T) {
	if err := ConfigError("test", []error{nil, nil}); err != nil {
		t.Fatalf("no errors: %v", err)
	}
	err := ConfigError("test", []error{CheckEndpointField("apiEndpoint", "ftp://h", true), nil,
		CheckOnlyPolicy("Other", "Label"), CheckEndpointField("endpoint", "https://h", false), ErrClusterIDRequired})
	want := "test cloud config: apiEndpoint: \"ftp://h\": want an https URL (plain http only to a loopback address)\n" +
		"nodeNamePolicy \"Other\": the only policy is Label\n" + ErrClusterIDRequired.Error()
	if err == nil || err.Error() != want || !errors.Is(err, ErrClusterIDRequired) {
		t.Fatalf("got %v, want %s", err, want)
	}
	if CheckOnlyPolicy("Label", "Label") != nil {
		t.Fatal("the only policy refused")
	}
}

func TestTokenSecret(t *testing.T) {
	var env string
	DefaultSecretEnv("", &env, "MY_TOKEN")
	if env != "MY_TOKEN" {
		t.Fatalf("default variable: %q", env)
	}
	env = ""
	DefaultSecretEnv("/f", &env, "MY_TOKEN")
	if env != "" {
		t.Fatalf("a file and the default variable: %q", env)
	}
	env = "MINE"
	DefaultSecretEnv("", &env, "MY_TOKEN")
	if env != "MINE" {
		t.Fatalf("the variable set: %q", env)
	}
	s := TokenSecret("/f", "E", "test: API token")
	if s != (Secret{File: "/f", FileField: "tokenFile", Env: "E", EnvField: "tokenEnv", What: "test: API token"}) {
		t.Fatalf("%+v", s)
	}
	if errs := s.Check(); len(errs) != 1 || errs[0].Error() != "tokenFile and tokenEnv: set one, not both" {
		t.Fatalf("both set: %v", errs)
	}
}

func TestCheckScopes(t *testing.T) {
	valid := func(s string) bool { return strings.HasPrefix(s, "p-") }
	if errs := CheckScopes("projects", []string{"p-a", "p-b"}, valid, "a project ID"); errs != nil {
		t.Fatalf("good scopes: %v", errs)
	}
	if errs := CheckScopes("projects", nil, valid, "a project ID"); len(errs) != 1 ||
		errs[0].Error() != "projects is required: name the projects whose instances may join" {
		t.Fatalf("none: %v", errs)
	}
	errs := CheckScopes("compartments", []string{"p-a", "x", "p-a", "x"}, valid, "a compartment's OCID")
	want := `compartments: "x" is not a compartment's OCID` + "\n" + `compartments: "p-a" is named twice` + "\n" +
		`compartments: "x" is not a compartment's OCID`
	if got := errors.Join(errs...); got == nil || got.Error() != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

func TestCAFilePool(t *testing.T) {
	if pool, err := CAFilePool("test", ""); pool != nil || err != nil {
		t.Fatalf("no caFile: %v, %v", pool, err)
	}
	missing := filepath.Join(t.TempDir(), "none.pem")
	if _, err := CAFilePool("test", missing); err == nil || !strings.HasPrefix(err.Error(), "test: caFile: ") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a missing caFile: %v", err)
	}
}

func TestRequiredEndpointField(t *testing.T) {
	if err := RequiredEndpointField("server", "", true, "https://<host>/sdk"); err == nil || err.Error() != "server is required (https://<host>/sdk)" {
		t.Fatalf("none: %v", err)
	}
	if err := RequiredEndpointField("server", "http://h/sdk", true, "x"); err == nil || !strings.HasPrefix(err.Error(), "server: ") {
		t.Fatalf("plain http: %v", err)
	}
	if err := RequiredEndpointField("server", "https://h/sdk", true, "x"); err != nil {
		t.Fatal(err)
	}
}
