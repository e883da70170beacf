package kittest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/kit"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Verdict is what a backend's ConfirmInstance says of an instance it does
// not confirm.
type Verdict int

const (
	// Foreign: a *kit.ForeignError, the instance is not the cluster's.
	Foreign Verdict = iota
	// Absent: a *kit.AbsentError, the instance is gone.
	Absent
	// NoVerdict: an error that is neither (an outage, a spent rate
	// limit): the instance is neither gone nor another's.
	NoVerdict
)

func (v Verdict) String() string {
	return [...]string{"foreign", "absent", "no verdict"}[v]
}

// Confirms checks that confirm (a backend's ConfirmInstance) gives
// providerID the verdict want, with an error that says says ("" for
// anything); what names the case.
func Confirms(t testing.TB, what string, confirm func(context.Context, string) (view.Instance, error), providerID string, want Verdict, says string) {
	t.Helper()
	in, err := confirm(context.Background(), providerID)
	var foreign *kit.ForeignError
	var absent *kit.AbsentError
	got := NoVerdict
	switch {
	case err == nil:
		t.Fatalf("%s: %s confirmed: %+v; want %s", what, providerID, in, want)
	case errors.As(err, &foreign):
		got = Foreign
	case errors.As(err, &absent):
		got = Absent
	}
	if got != want || !strings.Contains(err.Error(), says) {
		t.Fatalf("%s: %s: %v (%s); want %s saying %q", what, providerID, err, got, want, says)
	}
}
