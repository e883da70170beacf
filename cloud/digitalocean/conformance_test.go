package digitalocean

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/digitalocean/agentid"
	"github.com/mooring-dev/mooring/cloud/digitalocean/digitaloceantest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// DigitalOcean's provider keeps the kit's promises (cloud/cloudtest/conformance).
func TestConformance(t *testing.T) { conformance.RunInstances(t, backend()) }

// Its machines join with join tickets: the approver over its record of
// the instance a ticket names.
func TestTickets(t *testing.T) { conformance.RunTickets(t, backend()) }

func backend() conformance.Backend {
	return conformance.Backend{
		Name: ProviderName,
		BadProviderIDs: []string{"digitalocean://", "digitalocean://0", "digitalocean://012", "digitalocean://-5",
			"digitalocean://5x", "digitalocean:///5", "digitalocean://99999999999999999999"},
		NameWithoutNode: "under_score",
		New: func(t *testing.T, o conformance.Options) conformance.Bed {
			return &bed{world: newWorld(t, digitaloceantest.Options{}, func(c *Config) { c.PageSize = o.PageSize })}
		},
		Config: func(t *testing.T, b conformance.Bed) string {
			w := b.(*bed).world
			return fmt.Sprintf("clusterID: %s\ntokenFile: %s\napiEndpoint: %s\n", testCluster, w.tokenFile, w.do.Endpoint())
		},
	}
}

// bed is the conformance suite's view of a world.
type bed struct {
	*world
	first int
}

func (b *bed) Provider() conformance.Provider { return b.cloud }

func (b *bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	tags := []string{testTag}
	if s.Foreign {
		tags = []string{"k8s:c2"}
	}
	id := 0
	if s.First {
		b.first++
		id = b.first // droplet ids the endpoint assigns are far above
	}
	d := b.do.Put(digitaloceantest.Droplet{ID: id, Name: s.Name, PrivateIP: fmt.Sprintf("127.0.83.%d", s.N),
		PublicIP: fmt.Sprintf("127.0.84.%d", s.N), Tags: tags, Created: s.Created})
	return conformance.Made{Spec: s, ProviderID: agentid.ProviderID(d.ID), ID: strconv.Itoa(d.ID),
		NodeName: agentid.NodeName(d.Name), InternalIP: d.PrivateIP}
}

func (b *bed) id(t testing.TB, m conformance.Made) int {
	id, err := ParseProviderID(m.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (b *bed) Delete(t testing.TB, m conformance.Made) { b.do.Delete(b.id(t, m)) }

func (b *bed) SetState(t testing.TB, m conformance.Made, s view.State) bool {
	status := map[view.State]string{view.StateStopped: digitaloceantest.StatusOff, view.StatePending: digitaloceantest.StatusNew,
		view.StateTerminated: digitaloceantest.StatusArchive}[s]
	if err := b.do.SetStatus(b.id(t, m), status); err != nil {
		t.Fatal(err)
	}
	return true
}

func (b *bed) Fail(t testing.TB, f conformance.Failure) func() {
	switch f {
	case conformance.Outage:
		b.do.SetOutage(true)
		return func() { b.do.SetOutage(false) }
	case conformance.Unauthorized:
		if err := os.WriteFile(b.tokenFile, []byte("dop_v1_wrong"), 0o600); err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := os.WriteFile(b.tokenFile, []byte(b.do.Token()), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	case conformance.GetFails:
		b.do.Fail(digitaloceantest.MethodGet, 1<<20, http.StatusInternalServerError)
		return func() { b.do.Fail(digitaloceantest.MethodGet, 0, 0) }
	case conformance.Throttled:
		for _, m := range []string{digitaloceantest.MethodList, digitaloceantest.MethodGet} {
			b.do.Fail(m, 1<<20, http.StatusTooManyRequests)
		}
		return func() {
			for _, m := range []string{digitaloceantest.MethodList, digitaloceantest.MethodGet} {
				b.do.Fail(m, 0, 0)
			}
		}
	}
	return nil
}

func (b *bed) Calls(c conformance.Call) int {
	if c == conformance.List {
		return b.do.Calls(digitaloceantest.MethodList)
	}
	return b.do.Calls(digitaloceantest.MethodGet)
}

func (b *bed) BeforePage(f func(page int)) { b.do.BeforePage(f) }
