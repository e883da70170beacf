package csrapprover

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/view"
)

// staticSource lists fixed instances.
type staticSource []view.Instance

func (s staticSource) ListInstances(context.Context) ([]view.Instance, error) {
	return slices.Clone(s), nil
}

// A clone that kept node-1's BIOS UUID lists under its providerID and id.
// The view used to answer with whichever instance came last: the clone,
// stopped, made node-1's renewals fail, and a running clone would have had
// node-1's requests judged against its own record. Now the decider, on the
// real view, decides nothing for either (an error: the CSR is retried),
// and says which instances share the providerID.
func TestTwinsAreDecidedForNeither(t *testing.T) {
	w := newWorld(t)
	w.nodes = adversarialNodes()
	w.decider.nodes = w.nodes
	var all []view.Instance
	for _, in := range w.instances {
		all = append(all, in)
	}
	clone := w.instances["local://i-1"]
	clone.Name, clone.NodeName, clone.State = "node-1-clone", "node-1-clone", view.StateStopped
	all = append(all, clone)
	w.decider.instances = view.New(staticSource(all), view.Options{}).Patient()

	renewal := w.joinSpec(t)
	renewal.username, renewal.groups, renewal.evidence = "system:node:node-1", []string{"system:nodes", "system:authenticated"}, nil
	ticket := w.ticketJoinSpec(t)
	for name, spec := range map[string]csrSpec{"renewal": renewal, "serving": servingSpec(), "join": w.joinSpec(t), "ticket join": ticket} {
		d, err := w.decider.Decide(context.Background(), w.csr(t, spec))
		if !errors.Is(err, view.ErrAmbiguous) {
			t.Errorf("%s: %+v, %v; want no decision, an ErrAmbiguous", name, d, err)
			continue
		}
		if !strings.Contains(err.Error(), "node-1 (i-1, running)") || !strings.Contains(err.Error(), "node-1-clone (i-1, stopped)") {
			t.Errorf("%s: %v does not name both instances", name, err)
		}
	}
	// node-2's requests are decided as ever.
	serving2 := servingSpec()
	serving2.cn, serving2.username, serving2.dns, serving2.ips = "system:node:node-2", "system:node:node-2", []string{"node-2"}, []string{"127.10.0.2"}
	if d, err := w.decider.Decide(context.Background(), w.csr(t, serving2)); err != nil || !d.Approve {
		t.Errorf("node-2 serving: %+v, %v", d, err)
	}
}
