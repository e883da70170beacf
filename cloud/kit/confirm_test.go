package kit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/view"
)

// record is a toy cloud's instance record.
type record struct {
	id     int
	member bool
}

func TestByID(t *testing.T) {
	parse := func(p string) (int, error) { return strconv.Atoi(strings.TrimPrefix(p, "toy://")) }
	var (
		answer  *record
		absent  bool
		failure error
		calls   int
	)
	b := ByID[int, *record]{Parse: parse, Timeout: time.Second,
		Get: func(ctx context.Context, id int) (*record, bool, error) {
			calls++
			if _, ok := ctx.Deadline(); !ok {
				t.Error("no deadline on the call")
			}
			return answer, absent, failure
		},
		Is: func(r *record, id int) bool { return r != nil && r.id == id },
		View: func(r *record) (view.Instance, bool) {
			return view.Instance{ProviderID: "toy://" + strconv.Itoa(r.id)}, r.member
		},
		Kind: "toy", Foreign: "is not the cluster's"}
	ctx := context.Background()

	if _, err := b.Confirm(ctx, "toy://x"); err == nil || calls != 0 {
		t.Fatalf("a bad providerID: %v, %d calls", err, calls)
	}
	answer = &record{id: 7, member: true}
	if vi, err := b.Confirm(ctx, "toy://7"); err != nil || vi.ProviderID != "toy://7" {
		t.Fatalf("a member: %+v, %v", vi, err)
	}
	answer.member = false
	var foreign *ForeignError
	if _, err := b.Confirm(ctx, "toy://7"); !errors.As(err, &foreign) || foreign.Why != "is not the cluster's" {
		t.Fatalf("not the cluster's: %v", err)
	}
	answer, absent, failure = nil, true, errors.New("404")
	var gone *AbsentError
	if _, err := b.Confirm(ctx, "toy://7"); !errors.As(err, &gone) || gone.ID != "toy://7" {
		t.Fatalf("absent: %v", err)
	}
	// No answer is never "absent": an error, or an answer for another
	// record or none.
	absent, failure = false, errors.New("503")
	if _, err := b.Confirm(ctx, "toy://7"); err == nil || DefinitiveNotFound(err) || err.Error() != "get toy 7: 503" {
		t.Fatalf("a failed call: %v", err)
	}
	for _, a := range []*record{nil, {id: 8, member: true}} {
		answer, failure = a, nil
		if _, err := b.Confirm(ctx, "toy://7"); err == nil || DefinitiveNotFound(err) || err.Error() != "get toy 7: the answer is not that toy" {
			t.Fatalf("answer %+v: %v", a, err)
		}
	}
}

func TestCheckedBy(t *testing.T) {
	check := CheckedBy(func(p string) (int, error) { return strconv.Atoi(p) })
	if id, err := check("12"); err != nil || id != "12" {
		t.Fatalf("%q, %v", id, err)
	}
	if _, err := check("x"); err == nil {
		t.Fatal("a bad providerID passed")
	}
}
