package linode

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/linode/agentid"
	"github.com/mooring-dev/mooring/cloud/linode/linodetest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// Linode's provider keeps the kit's promises (cloud/cloudtest/conformance).
// Its pages hold 25 Linodes at least (MinPageSize): the suite's page
// subtests make enough for several.
func TestConformance(t *testing.T) { conformance.RunInstances(t, backend()) }

// Its machines join with join tickets: the approver over its record of
// the instance a ticket names.
func TestTickets(t *testing.T) { conformance.RunTickets(t, backend()) }

func backend() conformance.Backend {
	return conformance.Backend{
		Name: ProviderName,
		BadProviderIDs: []string{"linode://", "linode://0", "linode://012", "linode://-5", "linode://+5", "linode://5x",
			"linode:///5", "linode://99999999999999999999"},
		NameWithoutNode: "under_score",
		New: func(t *testing.T, o conformance.Options) conformance.Bed {
			size := 0
			if o.PageSize > 0 {
				size = max(o.PageSize, MinPageSize)
			}
			return &bed{world: newWorld(t, linodetest.Options{}, func(c *Config) { c.PageSize = size }), size: size}
		},
		Config: func(t *testing.T, b conformance.Bed) string {
			// The token from the environment, as the tests' worlds read it from a file.
			w := b.(*bed).world
			t.Setenv("MOORING_TEST_LINODE_TOKEN", w.ln.Token())
			return fmt.Sprintf("clusterID: %s\ntokenEnv: MOORING_TEST_LINODE_TOKEN\napiEndpoint: %s\n", testCluster, w.ln.Endpoint())
		},
	}
}

// bed is the conformance suite's view of a world.
type bed struct {
	*world
	size, first int
}

func (b *bed) BeforePage(f func(page int)) { b.ln.BeforePage(f) }

func (b *bed) PageSize() int { return b.size }

func (b *bed) Provider() conformance.Provider { return b.cloud }

func (b *bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	tags := []string{testTag}
	if s.Foreign {
		tags = []string{"k8s:c2"}
	}
	id := 0
	if s.First {
		b.first++
		id = b.first // Linode ids the endpoint assigns are far above
	}
	in := b.ln.Put(linodetest.Instance{ID: id, Label: s.Name, PublicIP: fmt.Sprintf("127.0.98.%d", s.N),
		PrivateIP: fmt.Sprintf("127.0.97.%d", s.N), Tags: tags, Created: s.Created})
	return conformance.Made{Spec: s, ProviderID: agentid.ProviderID(in.ID), ID: strconv.Itoa(in.ID),
		NodeName: agentid.NodeName(in.Label), InternalIP: in.PrivateIP}
}

func (b *bed) id(t testing.TB, m conformance.Made) int {
	id, err := ParseProviderID(m.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (b *bed) Delete(t testing.TB, m conformance.Made) { b.ln.Delete(b.id(t, m)) }

func (b *bed) SetState(t testing.TB, m conformance.Made, s view.State) bool {
	status := map[view.State]string{view.StateStopped: linodetest.StatusOffline, view.StatePending: linodetest.StatusProvisioning,
		view.StateTerminated: linodetest.StatusDeleting}[s]
	if err := b.ln.SetStatus(b.id(t, m), status); err != nil {
		t.Fatal(err)
	}
	return true
}

// Fail: an outage answers 503 to every call; a wrong token in the file
// (read at every request) is refused; a 429 answers every list and get.
func (b *bed) Fail(t testing.TB, f conformance.Failure) func() {
	write := func(token string) {
		if err := os.WriteFile(b.tokenFile, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	switch f {
	case conformance.Outage:
		b.ln.SetOutage(true)
		return func() { b.ln.SetOutage(false) }
	case conformance.Unauthorized:
		write("wrong-token")
		return func() { write(b.ln.Token()) }
	case conformance.GetFails:
		b.ln.Fail(linodetest.MethodGet, 1<<20, http.StatusInternalServerError)
		return func() { b.ln.Fail(linodetest.MethodGet, 0, 0) }
	case conformance.Throttled:
		for _, m := range []string{linodetest.MethodList, linodetest.MethodGet} {
			b.ln.Fail(m, 1<<20, http.StatusTooManyRequests)
		}
		return func() {
			for _, m := range []string{linodetest.MethodList, linodetest.MethodGet} {
				b.ln.Fail(m, 0, 0)
			}
		}
	}
	return nil
}

func (b *bed) Calls(c conformance.Call) int {
	if c == conformance.List {
		return b.ln.Calls(linodetest.MethodList)
	}
	return b.ln.Calls(linodetest.MethodGet)
}
