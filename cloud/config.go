package cloud

import (
	"fmt"
	"io"
	"net"
	"net/url"

	"sigs.k8s.io/yaml"
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

// IsLoopback reports whether host is localhost or a loopback address.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
