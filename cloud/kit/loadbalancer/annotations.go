package loadbalancer

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Annotations reads a Service's annotations for one cloud, gathering
// every problem: a malformed value, and an annotation under the cloud's
// prefixes that nothing read or marked Known (mistyped, or one of the
// cloud's CCM's that mooring does not support). Err reports them, each
// naming its annotation; a Service with any is not sent to the cloud.
type Annotations struct {
	svc      *v1.Service
	prefixes []string
	known    map[string]bool
	errs     []error
}

// Read starts reading svc's annotations under prefixes (each a full
// prefix, such as "service.beta.kubernetes.io/do-loadbalancer-").
func Read(svc *v1.Service, prefixes ...string) *Annotations {
	return &Annotations{svc: svc, prefixes: prefixes, known: map[string]bool{}}
}

// Known marks names as understood without reading them (read on another
// path, or written by the cloud's CCM).
func (a *Annotations) Known(names ...string) {
	for _, n := range names {
		a.known[n] = true
	}
}

// Has reports whether the annotation is set (and marks it known).
func (a *Annotations) Has(name string) bool {
	a.known[name] = true
	_, ok := a.svc.Annotations[name]
	return ok
}

// String is the annotation's value, or def when it is unset or empty.
func (a *Annotations) String(name, def string) string {
	a.known[name] = true
	if v := strings.TrimSpace(a.svc.Annotations[name]); v != "" {
		return v
	}
	return def
}

// Fail records that the annotation's value is not what want says.
func (a *Annotations) Fail(name, want string) {
	a.errs = append(a.errs, fmt.Errorf("annotation %s=%q: want %s", name, a.svc.Annotations[name], want))
}

// Bool is "true" or "false" (as strconv.ParseBool reads them).
func (a *Annotations) Bool(name string, def bool) bool {
	v := a.String(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		a.Fail(name, "true or false")
		return def
	}
	return b
}

// Int is an integer from min to max.
func (a *Annotations) Int(name string, def, min, max int) int {
	v := a.String(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		a.Fail(name, fmt.Sprintf("an integer from %d to %d", min, max))
		return def
	}
	return n
}

// Duration is a Go duration ("15s") from min to max.
func (a *Annotations) Duration(name string, def, min, max time.Duration) time.Duration {
	v := a.String(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < min || d > max {
		a.Fail(name, fmt.Sprintf("a duration from %s to %s", min, max))
		return def
	}
	return d
}

// OneOf is one of values (compared without case; the value returned is
// as values spell it).
func (a *Annotations) OneOf(name, def string, values ...string) string {
	v := a.String(name, "")
	if v == "" {
		return def
	}
	for _, w := range values {
		if strings.EqualFold(v, w) {
			return w
		}
	}
	a.Fail(name, "one of "+strings.Join(values, ", "))
	return def
}

// List is a comma-separated list, trimmed, without empty items.
func (a *Annotations) List(name string) []string {
	var out []string
	for _, s := range strings.Split(a.String(name, ""), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Ports is a comma-separated list of ports, sorted.
func (a *Annotations) Ports(name string) []int32 {
	var out []int32
	for _, s := range a.List(name) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 {
			a.Fail(name, "a comma-separated list of ports")
			return nil
		}
		out = append(out, int32(n))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Err is every problem found, and every annotation under the prefixes
// that was neither read nor marked Known; nil when there is none.
func (a *Annotations) Err() error {
	var errs []string
	for _, e := range a.errs {
		errs = append(errs, e.Error())
	}
	var unknown []string
	for name := range a.svc.Annotations {
		if a.known[name] {
			continue
		}
		for _, p := range a.prefixes {
			if strings.HasPrefix(name, p) {
				unknown = append(unknown, name)
				break
			}
		}
	}
	slices.Sort(unknown)
	for _, name := range unknown {
		errs = append(errs, fmt.Sprintf("annotation %s is not one mooring knows for this cloud (mistyped, or not supported)", name))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("service %s/%s: %s", a.svc.Namespace, a.svc.Name, strings.Join(errs, "; "))
}
