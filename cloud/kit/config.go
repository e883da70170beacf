package kit

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/cloud/view"
)

// MaxConfigSize bounds a backend's cloud config file.
const MaxConfigSize = 1 << 20

// ReadConfig reads a backend's cloud config (--cloud-config) from r into
// out: YAML or JSON of at most MaxConfigSize bytes, strictly (unknown and
// duplicate fields are errors). Its errors name the backend's config.
func ReadConfig(backend string, r io.Reader, out any) error {
	if r == nil {
		return fmt.Errorf("%s cloud config: --cloud-config is required", backend)
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxConfigSize+1))
	if err != nil {
		return fmt.Errorf("%s cloud config: %w", backend, err)
	}
	if len(data) > MaxConfigSize {
		return fmt.Errorf("%s cloud config: larger than %d bytes", backend, MaxConfigSize)
	}
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		return fmt.Errorf("%s cloud config: %w", backend, err)
	}
	return nil
}

// CheckEndpoint accepts an absolute https URL without credentials, query
// or fragment (with a path only if withPath); plain http only to a
// loopback host (tests). A cloud API's answers decide which machines join
// and which Nodes go, so a backend reaches it over TLS or not at all.
func CheckEndpoint(s string, withPath bool) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	switch {
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%q: want an absolute URL such as https://host", s)
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "":
		return fmt.Errorf("%q: want a URL without credentials, query or fragment", s)
	case !withPath && u.Path != "" && u.Path != "/":
		return fmt.Errorf("%q: want a URL without a path", s)
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && IsLoopback(u.Hostname()):
		return nil
	}
	return fmt.Errorf("%q: want an https URL (plain http only to a loopback address)", s)
}

// CheckEndpointField is CheckEndpoint for the config field named field,
// its error under the field's name ("apiEndpoint: ..."); nil is no error,
// which ConfigError drops.
func CheckEndpointField(field, s string, withPath bool) error {
	if err := CheckEndpoint(s, withPath); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// RequiredEndpointField is CheckEndpointField for a field without a
// default: its absence is "<field> is required (<hint>)".
func RequiredEndpointField(field, s string, withPath bool, hint string) error {
	if s == "" {
		return fmt.Errorf("%s is required (%s)", field, hint)
	}
	return CheckEndpointField(field, s, withPath)
}

// ConfigError is what a backend's validate answers: nil when errs holds
// no error (nil entries are none), else every one of them after
// "<backend> cloud config: ".
func ConfigError(backend string, errs []error) error {
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s cloud config: %w", backend, err)
	}
	return nil
}

// ErrClusterIDRequired is the error of a config without its clusterID,
// where the clusterID names the cluster and nothing more.
var ErrClusterIDRequired = errors.New("clusterID is required: it names the cluster (the --cluster of its join tickets)")

// CheckOnlyPolicy checks a config's nodeNamePolicy where the backend has
// one policy only.
func CheckOnlyPolicy(policy, only string) error {
	if policy != only {
		return fmt.Errorf("nodeNamePolicy %q: the only policy is %s", policy, only)
	}
	return nil
}

// CertPool reads a PEM bundle of the CAs a cloud API's certificate is
// checked against (a config's caFile); "" is nil: the system's roots.
func CertPool(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // names the file
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// CAFilePool is CertPool for a config's caFile, its error after
// "<backend>: caFile: ".
func CAFilePool(backend, path string) (*x509.CertPool, error) {
	pool, err := CertPool(path)
	if err != nil {
		return nil, fmt.Errorf("%s: caFile: %w", backend, err)
	}
	return pool, nil
}

// CheckScopes checks a config's required list of the scopes whose
// instances may join (GCE's projects, OCI's compartments), named by field:
// at least one, each valid (else "is not " + want), none twice.
func CheckScopes(field string, scopes []string, valid func(string) bool, want string) []error {
	var errs []error
	if len(scopes) == 0 {
		errs = append(errs, fmt.Errorf("%s is required: name the %s whose instances may join", field, field))
	}
	seen := map[string]bool{}
	for _, s := range scopes {
		switch {
		case !valid(s):
			errs = append(errs, fmt.Errorf("%s: %q is not %s", field, s, want))
		case seen[s]:
			errs = append(errs, fmt.Errorf("%s: %q is named twice", field, s))
		}
		seen[s] = true
	}
	return errs
}

// IsLoopback reports whether host is localhost or a loopback address.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ParseConfig reads a backend's cloud config strictly (ReadConfig), fills
// in its defaults and validates it, reporting every problem at once: a
// backend's ParseConfig is
//
//	kit.ParseConfig(ProviderName, r, (*Config).defaults, (*Config).validate)
func ParseConfig[C any](backend string, r io.Reader, defaults func(*C), validate func(*C) error) (C, error) {
	var c C
	if err := ReadConfig(backend, r, &c); err != nil {
		return c, err
	}
	defaults(&c)
	return c, validate(&c)
}

// Defaults of ViewConfig.
const (
	DefaultInstanceMaxAge     = 30 * time.Second
	DefaultMinRefreshInterval = 2 * time.Second
	DefaultRequestTimeout     = 30 * time.Second
	// DefaultMaxFailureBackoff is the default of a backend's own
	// maxFailureBackoff (view.Options.MaxFailureBackoff), where it has one.
	DefaultMaxFailureBackoff = 16 * time.Second
)

// ViewConfig is the part of a cloud config that every backend has: how old
// the view's answers may be, how often it lists again, how long one call
// to the cloud may take. Embedded without a json tag in the backend's
// Config, its fields are the config's own (instanceMaxAge,
// minRefreshInterval, requestTimeout).
type ViewConfig struct {
	// InstanceMaxAge is how old an instance answer may be for node
	// initialization, the address sweep and lifecycle checks. Default 30s.
	InstanceMaxAge metav1.Duration `json:"instanceMaxAge,omitempty"`
	// MinRefreshInterval bounds how often lookups of unknown instances
	// list the cloud again. Default 2s.
	MinRefreshInterval metav1.Duration `json:"minRefreshInterval,omitempty"`
	// RequestTimeout bounds one call to the cloud's API. Default 30s.
	RequestTimeout metav1.Duration `json:"requestTimeout,omitempty"`
}

// Durations are ViewConfig's durations with their names and defaults, for
// DefaultDurations and CheckDurations (a backend appends its own).
func (v *ViewConfig) Durations() []Duration {
	return []Duration{
		{"instanceMaxAge", &v.InstanceMaxAge, DefaultInstanceMaxAge},
		{"minRefreshInterval", &v.MinRefreshInterval, DefaultMinRefreshInterval},
		{"requestTimeout", &v.RequestTimeout, DefaultRequestTimeout},
	}
}

// ListConfig is ViewConfig and maxFailureBackoff, for a backend whose view
// lists the cloud and backs off while the lists fail. Embedded without a
// json tag, as ViewConfig is, its fields are the config's own
// (instanceMaxAge, minRefreshInterval, requestTimeout, maxFailureBackoff).
type ListConfig struct {
	ViewConfig
	// MaxFailureBackoff caps the pause between lists while the cloud's API
	// fails (view.Options.MaxFailureBackoff). Default 16s.
	MaxFailureBackoff metav1.Duration `json:"maxFailureBackoff,omitempty"`
}

// Durations are ViewConfig's durations and maxFailureBackoff, with their
// names and defaults.
func (l *ListConfig) Durations() []Duration {
	return append(l.ViewConfig.Durations(),
		Duration{"maxFailureBackoff", &l.MaxFailureBackoff, DefaultMaxFailureBackoff})
}

// ViewOptions are the view's options the config sets: its minimum refresh
// interval and its failure backoff's cap.
func (l *ListConfig) ViewOptions() view.Options {
	return view.Options{MinRefreshInterval: l.MinRefreshInterval.Duration, MaxFailureBackoff: l.MaxFailureBackoff.Duration}
}

// Duration is one duration field of a cloud config: its name in the file,
// where it is, its default (0: none).
type Duration struct {
	Name    string
	Value   *metav1.Duration
	Default time.Duration
}

// DefaultDurations sets each duration that is unset (zero) to its default.
func DefaultDurations(ds []Duration) {
	for _, d := range ds {
		if d.Value.Duration == 0 {
			d.Value.Duration = d.Default
		}
	}
}

// CheckDurations reports the durations that are negative, in order.
func CheckDurations(ds []Duration) []error {
	var errs []error
	for _, d := range ds {
		if d.Value.Duration < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", d.Name))
		}
	}
	return errs
}

// MaxSecretSize bounds a secret's file (an API token is far shorter).
const MaxSecretSize = 4096

// envName is a POSIX environment variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Secret is where a cloud config says a secret (an API token, a password)
// is, never the secret itself: a file (mounted from a Kubernetes Secret)
// or, without one, an environment variable.
type Secret struct {
	// File holds the secret; FileField is its config field's name.
	File, FileField string
	// Env names the variable that holds it; EnvField is its config
	// field's name.
	Env, EnvField string
	// Password makes it a password, which may hold any character (its
	// client sends it in a request body or encoded, never raw in a
	// header); without it, a token of printable ASCII.
	Password bool
	// What the secret is, before Read's errors ("hetzner: API token");
	// "" adds nothing.
	What string
}

// TokenSecret is an API token in the config fields tokenFile and
// tokenEnv; what as Secret.What.
func TokenSecret(file, env, what string) Secret {
	return Secret{File: file, FileField: "tokenFile", Env: env, EnvField: "tokenEnv", What: what}
}

// DefaultSecretEnv sets *env, a secret's variable, to def when neither it
// nor the secret's file is set.
func DefaultSecretEnv(file string, env *string, def string) {
	if file == "" && *env == "" {
		*env = def
	}
}

// Check reports a secret named in both places, or a variable name that is
// not one (the config's fields named).
func (s Secret) Check() []error {
	switch {
	case s.File != "" && s.Env != "":
		return []error{fmt.Errorf("%s and %s: set one, not both", s.FileField, s.EnvField)}
	case s.Env != "" && !envName.MatchString(s.Env):
		return []error{fmt.Errorf("%s %q is not an environment variable name", s.EnvField, s.Env)}
	}
	return nil
}

// Source says where the secret is, for logs and errors: "file <path>" or
// "environment variable <name>".
func (s Secret) Source() string {
	if s.File != "" {
		return "file " + s.File
	}
	return "environment variable " + s.Env
}

// Read reads the secret from File, or else from Env: at most MaxSecretSize
// bytes, white space around it dropped, not empty, and (unless Password)
// nothing but printable ASCII without spaces (what an HTTP header can
// carry). Its errors say What and name the place, never the content.
func (s Secret) Read() (string, error) {
	secret, err := s.read()
	if err != nil && s.What != "" {
		return "", fmt.Errorf("%s: %w", s.What, err)
	}
	return secret, err
}

func (s Secret) read() (string, error) {
	var raw string
	if s.File != "" {
		f, err := os.Open(s.File)
		if err != nil {
			return "", err // names the file
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, MaxSecretSize+1))
		if err != nil {
			return "", fmt.Errorf("%s: %w", s.Source(), err)
		}
		if len(data) > MaxSecretSize {
			return "", fmt.Errorf("%s is larger than %d bytes", s.Source(), MaxSecretSize)
		}
		raw = string(data)
	} else {
		raw = os.Getenv(s.Env)
	}
	secret := strings.TrimSpace(raw)
	switch {
	case secret == "":
		return "", fmt.Errorf("%s is empty or unset", s.Source())
	case !s.Password && strings.ContainsFunc(secret, func(r rune) bool { return r <= ' ' || r > '~' }):
		return "", fmt.Errorf("%s holds characters a token has not (white space, control or non-ASCII characters)", s.Source())
	}
	return secret, nil
}
