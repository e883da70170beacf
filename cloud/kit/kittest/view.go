package kittest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/view"
)

// ListedOne lists a backend's instances with list (its Source's
// ListInstances) and returns the one it lists, failing the test on an
// error or any other count.
func ListedOne(t testing.TB, list func(context.Context) ([]view.Instance, error)) view.Instance {
	t.Helper()
	all, err := list(context.Background())
	if err != nil || len(all) != 1 {
		t.Fatalf("listed %+v %v; want one instance", all, err)
	}
	return all[0]
}

// Same checks that the instance a backend mapped (got) is want in every
// field, as %+v prints them, and was created at want's instant, in UTC
// (the view's times are UTC whatever zone the cloud writes).
func Same(t testing.TB, what string, got view.Instance, err error, want view.Instance) {
	t.Helper()
	if err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) || !got.Created.Equal(want.Created) ||
		got.Created.Location() != time.UTC {
		t.Fatalf("%s:\n got %+v %v\nwant %+v", what, got, err, want)
	}
}

// ListFails checks that list (a backend's Source's ListInstances) fails,
// returning no instances (never a part of the list), with an error that
// says want and does not hold secret (the API token).
func ListFails(t testing.TB, what string, list func(context.Context) ([]view.Instance, error), want, secret string) {
	t.Helper()
	all, err := list(context.Background())
	switch {
	case err == nil || all != nil:
		t.Fatalf("%s: %d instances, error %v", what, len(all), err)
	case !strings.Contains(err.Error(), want):
		t.Fatalf("%s: %v, want it to say %q", what, err, want)
	case secret != "" && strings.Contains(err.Error(), secret):
		t.Fatalf("%s: the error holds the secret: %v", what, err)
	}
}

// GivesUp checks that list, a backend's list of a cloud that the test
// changes at every attempt (attempts counts the changes), gives up after
// want attempts (kit.ReadWhole's, with the backend's count) with an error
// that says the list changed.
func GivesUp(t testing.TB, list func(context.Context) ([]view.Instance, error), attempts *int, want int) {
	t.Helper()
	if all, err := list(context.Background()); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("a list changing at every attempt: %d instances, %v", len(all), err)
	}
	if *attempts != want {
		t.Fatalf("%d attempts, want %d", *attempts, want)
	}
}
