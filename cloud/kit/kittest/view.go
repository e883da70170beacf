package kittest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/view"
)

// ListedOne lists a backend's instances with list (its Source's
// ListInstances) and returns the one it lists, failing the test on an
// error or any other count.
func ListedOne(t *testing.T, list func(context.Context) ([]view.Instance, error)) view.Instance {
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
func Same(t *testing.T, what string, got view.Instance, err error, want view.Instance) {
	t.Helper()
	if err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) || !got.Created.Equal(want.Created) ||
		got.Created.Location() != time.UTC {
		t.Fatalf("%s:\n got %+v %v\nwant %+v", what, got, err, want)
	}
}
