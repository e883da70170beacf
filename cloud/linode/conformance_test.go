package linode

import (
	"fmt"
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
// Its machines join with join tickets (Run's Tickets): the approver
// over its record of the instance a ticket names.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend{Name: ProviderName,
		BadProviderIDs: []string{"linode://", "linode://0", "linode://012", "linode://-5", "linode://+5", "linode://5x",
			"linode:///5", "linode://99999999999999999999"},
		New: func(t *testing.T, o conformance.Options) conformance.Bed {
			size := 0
			if o.PageSize > 0 {
				size = max(o.PageSize, MinPageSize)
			}
			w := newWorld(t, linodetest.Options{}, func(c *Config) { c.PageSize = size })
			return &bed{world: w, size: size, Endpoint: conformance.Endpoint{Cloud: w.cloud, Counter: &w.ln.Counter, Faults: &w.ln.Faults,
				List: []string{linodetest.MethodList}, Get: []string{linodetest.MethodGet},
				Own: map[conformance.Failure]func(testing.TB) func(){conformance.Outage: conformance.Switch(w.ln.SetOutage),
					conformance.Unauthorized: conformance.WrongSecret(w.tokenFile, w.ln.Token())},
				Statuses: map[view.State]string{view.StateStopped: linodetest.StatusOffline, view.StatePending: linodetest.StatusProvisioning,
					view.StateTerminated: linodetest.StatusDeleting},
				SetStatus: func(m conformance.Made, status string) error { return w.ln.SetStatus(m.IntID(t), status) }}}
		},
		Config: func(t *testing.T, b conformance.Bed) string {
			// The token from the environment, as the tests' worlds read it from a file.
			w := b.(*bed).world
			t.Setenv("MOORING_TEST_LINODE_TOKEN", w.ln.Token())
			return fmt.Sprintf("clusterID: %s\ntokenEnv: MOORING_TEST_LINODE_TOKEN\napiEndpoint: %s\n", testCluster, w.ln.Endpoint())
		},
	})
}

// bed is the conformance suite's view of a world: an outage answers 503
// to every call; the token file is read at every request.
type bed struct {
	*world
	conformance.Endpoint
	size int
}

func (b *bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	in := b.ln.Put(linodetest.Instance{ID: s.FirstID(), Label: s.Name, PublicIP: s.Addr("127.0.98"), PrivateIP: s.Addr("127.0.97"),
		Tags: []string{s.Cluster(testTag, "k8s:c2")}, Created: s.Created})
	return conformance.Made{Spec: s, ProviderID: agentid.ProviderID(in.ID), ID: strconv.Itoa(in.ID),
		NodeName: agentid.NodeName(in.Label), InternalIP: in.PrivateIP}
}

func (b *bed) Delete(t testing.TB, m conformance.Made) { b.ln.Delete(m.IntID(t)) }

func (b *bed) PageSize() int { return b.size }

func (b *bed) BeforePage(f func(page int)) { b.ln.BeforePage(f) }
