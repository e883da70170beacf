package kit

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// AddressSources are the sources of a backend's Node addresses that a guest
// or a tenant asserts rather than the cloud assigns (VMware Tools'
// guest.net; OpenStack's accessIPv4), and those of them the operator's
// cloud config trusts to back serving certificates (trustedAddressSources).
// The backend's doc names each source and says who can set it.
type AddressSources struct {
	// who asserts each source, by its name in the config.
	who     map[string]string
	trusted map[string]bool
}

// NewAddressSources checks trusted (the config's trustedAddressSources)
// against the backend's asserted sources, each named with who asserts it.
func NewAddressSources(asserted map[string]string, trusted []string) (AddressSources, error) {
	s := AddressSources{who: asserted, trusted: map[string]bool{}}
	for _, t := range trusted {
		if _, ok := asserted[t]; !ok {
			return s, fmt.Errorf("trustedAddressSources: %q is not one of %s", t, strings.Join(slices.Sorted(maps.Keys(asserted)), ", "))
		}
		s.trusted[t] = true
	}
	return s, nil
}

// AddressOrigins records where each of an instance's addresses came from:
// Assigned for the cloud's own, Asserted for a named source.
type AddressOrigins struct {
	assigned map[string]bool
	asserted map[string]string // address → first source that asserts it
}

// Assigned records that the cloud assigns address.
func (o *AddressOrigins) Assigned(address string) {
	if o.assigned == nil {
		o.assigned = map[string]bool{}
	}
	o.assigned[address] = true
}

// Asserted records that source asserts address.
func (o *AddressOrigins) Asserted(address, source string) {
	if o.asserted == nil {
		o.asserted = map[string]string{}
	}
	if _, ok := o.asserted[address]; !ok {
		o.asserted[address] = source
	}
}

// Untrusted is view.Instance.Asserted for the addresses recorded: each
// that only untrusted sources assert (one the cloud also assigns is the
// cloud's), with who asserts it; nil when there is none.
func (s AddressSources) Untrusted(o AddressOrigins) map[string]string {
	var out map[string]string
	for addr, src := range o.asserted {
		if o.assigned[addr] || s.trusted[src] {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[addr] = fmt.Sprintf("%s (%s; not in trustedAddressSources)", s.who[src], src)
	}
	return out
}
