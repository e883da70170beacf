package view

import (
	"context"
	"strings"
	"time"
)

// Patient is the view's lookups for a caller that would rather wait than
// be told ErrUnconfirmed: a miss in a List that began before the question
// waits for the view's next List for misses, which it shares with every
// other lookup waiting then, and is answered from it. The CSR approver
// looks up through it: a boot wave's joins whose instances the view has
// not listed yet wait on one List together, where asking again later
// would have each need a List that began after its new question.
type Patient struct{ v *View }

// Patient returns v's patient lookups.
func (v *View) Patient() Patient { return Patient{v} }

// ByID is View.ByID, patient.
func (p Patient) ByID(ctx context.Context, id string, maxAge time.Duration) (Instance, error) {
	return p.v.lookup(ctx, "id", id, maxAge, true, func(s *snapshot) (int, bool) {
		i, ok := s.byID[id]
		return i, ok
	})
}

// ByProviderID is View.ByProviderID, patient.
func (p Patient) ByProviderID(ctx context.Context, providerID string, maxAge time.Duration) (Instance, error) {
	return p.v.lookup(ctx, "providerID", providerID, maxAge, true, func(s *snapshot) (int, bool) {
		i, ok := s.byProviderID[providerID]
		return i, ok
	})
}

// Named is View.Named, patient.
func (p Patient) Named(ctx context.Context, name string, maxAge time.Duration) ([]Instance, error) {
	return named(ctx, p.v, name, maxAge, true)
}

// OnRecovery is View.OnRecovery.
func (p Patient) OnRecovery(f func()) (cancel func()) { return p.v.OnRecovery(f) }

// named is Named's search.
func named(ctx context.Context, v *View, name string, maxAge time.Duration, patient bool) ([]Instance, error) {
	key := strings.ToLower(name)
	return search(ctx, v, "named", name, maxAge, patient, func(s *snapshot) ([]Instance, bool, error) {
		idx := s.named[key]
		out := make([]Instance, len(idx))
		var err error
		for j, i := range idx {
			out[j] = s.all[i].clone()
			if err == nil {
				err = s.ambiguous(i)
			}
		}
		return out, len(out) > 0, err
	})
}
