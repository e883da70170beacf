package nodeidtest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Bed is what Unsigned needs of a ticket cloud's test endpoint and the
// provider over it.
type Bed struct {
	// Put makes a running instance of the cluster named name, with a
	// private address unless bare, and returns the node identity its agent
	// builds (over the instance's metadata service) and the Instance that
	// identity must answer.
	Put func(name string, bare bool) (nodeid.Identity, nodeid.Instance)
	// View is the provider's view of the cloud.
	View *view.View
	// FailNext makes the metadata service's next answer an HTTP 500;
	// FailError is what the error must then say ("" anything).
	FailNext  func()
	FailError string
	// Stop stops the instance.
	Stop func(nodeid.Instance) error
}

// Unsigned checks the node identity of a cloud that signs no instance
// identity against the provider's view, as every ticket cloud's agent
// must behave: an instance's metadata gives its id, name, providerID,
// Node name (its name lower-cased) and private address, and the view
// knows it under that providerID with that Node name and id; Evidence
// wraps nodeid.ErrNoEvidence; without a private address there is no
// InternalIP, and that is no error; a name that is no Node name is an
// error that says so; a failing metadata service is an error, and so is a stopped
// instance's (a stopped machine runs no agent: its metadata is no proof
// of anything).
func Unsigned(t testing.TB, b Bed) {
	t.Helper()
	ctx := context.Background()
	id, want := b.Put("Node-7", false)
	if want.NodeName != "node-7" || want.InternalIP == "" {
		t.Fatalf("the bed's expectation %+v: want Node name node-7 and a private address", want)
	}
	if got, err := id.Instance(ctx); err != nil || got != want {
		t.Fatalf("got %+v %v\nwant %+v", got, err, want)
	}
	vi, err := b.View.ByProviderID(ctx, want.ProviderID, 0)
	if err != nil || vi.NodeName != want.NodeName || vi.ID != want.ID {
		t.Fatalf("the view's instance %+v %v; the agent's %+v", vi, err, want)
	}
	if _, err := id.Evidence(ctx, "binding"); !errors.Is(err, nodeid.ErrNoEvidence) {
		t.Fatalf("evidence: %v", err)
	}
	bare, wantBare := b.Put("bare", true)
	if got, err := bare.Instance(ctx); err != nil || got != wantBare || got.InternalIP != "" || got.NodeName != "bare" {
		t.Fatalf("without a private address: %+v %v, want %+v", got, err, wantBare)
	}
	odd, _ := b.Put("under_score", false)
	// The agent stops on an instance whose name is no Node name: the
	// kubelet could not register it.
	if got, err := odd.Instance(ctx); err == nil || !strings.Contains(err.Error(), "Node name") {
		t.Fatalf("a name that is no Node name: %+v %v", got, err)
	}
	b.FailNext()
	if got, err := id.Instance(ctx); err == nil || !strings.Contains(err.Error(), b.FailError) {
		t.Fatalf("a failing metadata service: %+v %v, want an error saying %q", got, err, b.FailError)
	}
	if err := b.Stop(want); err != nil {
		t.Fatal(err)
	}
	if got, err := id.Instance(ctx); err == nil {
		t.Fatalf("a stopped instance's metadata answered %+v", got)
	}
}
