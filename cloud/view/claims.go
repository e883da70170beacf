package view

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"
)

// ErrAmbiguous means more than one instance that is not terminated lists
// under the providerID of the instance a lookup found: vCenter lets a
// cloned VM keep its BIOS UUID, say. Which of them a Node is cannot be
// told, so the view answers for none of them: callers decide nothing (no
// certificate, no initialization, no deletion) until one remains.
var ErrAmbiguous = errors.New("more than one instance lists under one providerID")

// AmbiguousError is an ErrAmbiguous answer, naming every instance of the
// providerID.
type AmbiguousError struct {
	ProviderID string
	Instances  []Instance
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("%v: %s is listed by %s; no lookup is answered for any of them until one remains",
		ErrAmbiguous, e.ProviderID, describe(e.Instances))
}

// Is makes an AmbiguousError an ErrAmbiguous.
func (e *AmbiguousError) Is(target error) bool { return target == ErrAmbiguous }

// describe names instances as "name (id, state)", in list order.
func describe(ins []Instance) string {
	parts := make([]string, len(ins))
	for i, in := range ins {
		parts[i] = fmt.Sprintf("%s (%s, %s)", in.Name, in.ID, in.State)
	}
	return strings.Join(parts, ", ")
}

// AddressKey is how addresses and names compare: an IP in its canonical
// form (an IPv4-mapped IPv6 address as IPv4), a name in lower case without
// a trailing dot.
func AddressKey(s string) string {
	if ip := net.ParseIP(s); ip != nil {
		return ip.String()
	}
	return strings.TrimSuffix(strings.ToLower(s), ".")
}

// WithAddress returns every instance not terminated that lists address
// (compared by AddressKey) among its addresses or as its node name, from a
// snapshot no older than maxAge. None is an answer, not an error: the
// approver asks it of an address it has already found on the instance it
// judges, in a snapshot at least as new.
func (v *View) WithAddress(ctx context.Context, address string, maxAge time.Duration) ([]Instance, error) {
	s, err := v.snapshot(ctx, maxAge)
	if err != nil {
		return nil, err
	}
	idx := s.byAddress[AddressKey(address)]
	out := make([]Instance, len(idx))
	for j, i := range idx {
		out[j] = s.all[i].clone()
	}
	return out, nil
}

// WithAddress is View.WithAddress.
func (p Patient) WithAddress(ctx context.Context, address string, maxAge time.Duration) ([]Instance, error) {
	return p.v.WithAddress(ctx, address, maxAge)
}

// reportTwins sets the ambiguous-instances metric to the snapshot's twins
// and logs them when they differ from the last snapshot's.
func (v *View) reportTwins(s *snapshot) {
	var lines []string
	for pid, idx := range s.twins {
		ins := make([]Instance, len(idx))
		for j, i := range idx {
			ins[j] = s.all[i]
		}
		lines = append(lines, pid+"\x00"+describe(ins))
	}
	sort.Strings(lines)
	key := strings.Join(lines, "\n")
	v.mu.Lock()
	changed := key != v.twinsSeen
	v.twinsSeen = key
	v.mu.Unlock()
	if !changed {
		return
	}
	ambiguousInstances.Reset()
	for _, l := range lines {
		pid, names, _ := strings.Cut(l, "\x00")
		ambiguousInstances.WithLabelValues(pid, names).Set(float64(len(s.twins[pid])))
		logTwins(pid, names)
	}
}
