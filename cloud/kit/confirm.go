package kit

import (
	"context"
	"fmt"
	"time"

	"github.com/mooring-dev/mooring/cloud/view"
)

// ByID is a backend's ConfirmInstance for a cloud that gets one instance
// by the ID in its providerID: the ID read from the providerID, one call
// to the API within Timeout, and its answer sorted into the instance, a
// *AbsentError (the API says there is none), a *ForeignError (the
// instance is not the cluster's) or an error (no answer: never "absent").
type ByID[ID comparable, R any] struct {
	// Parse reads the ID from a providerID; its error is the answer.
	Parse func(providerID string) (ID, error)
	// Get asks the API for the record of id; absent when the API answered
	// that there is none (its error then does not count).
	Get func(ctx context.Context, id ID) (r R, absent bool, err error)
	// Is reports whether the record is the one of id (an API that answers
	// with another record, or none, answered nothing).
	Is func(r R, id ID) bool
	// View is the record as the view sees it; false when it is not the
	// cluster's.
	View func(r R) (view.Instance, bool)
	// Kind names a record in errors ("droplet"); Foreign says why one that
	// View refuses is not the cluster's ("does not carry the tag k8s:c1").
	Kind, Foreign string
	// Timeout bounds the call (a config's requestTimeout).
	Timeout time.Duration
}

// Confirm is ConfirmInstance over b.
func (b ByID[ID, R]) Confirm(ctx context.Context, providerID string) (view.Instance, error) {
	id, err := b.Parse(providerID)
	if err != nil {
		return view.Instance{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.Timeout)
	defer cancel()
	r, absent, err := b.Get(ctx, id)
	switch {
	case absent:
		return view.Instance{}, &AbsentError{ID: providerID}
	case err != nil:
		return view.Instance{}, fmt.Errorf("get %s %v: %w", b.Kind, id, err)
	case !b.Is(r, id):
		return view.Instance{}, fmt.Errorf("get %s %v: the answer is not that %s", b.Kind, id, b.Kind)
	}
	if vi, ok := b.View(r); ok {
		return vi, nil
	}
	return view.Instance{}, &ForeignError{ID: providerID, Why: b.Foreign}
}

// CheckedBy is Options.ProviderID for a view indexed by the providerID as
// it is: parse checks that it is the cloud's.
func CheckedBy[T any](parse func(providerID string) (T, error)) func(string) (string, error) {
	return func(providerID string) (string, error) {
		_, err := parse(providerID)
		return providerID, err
	}
}
