package digitalocean

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/digitalocean/agentid"
	"github.com/mooring-dev/mooring/cloud/digitalocean/digitaloceantest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// DigitalOcean's provider keeps the kit's promises (cloud/cloudtest/conformance).
// Its machines join with join tickets (Run's Tickets): the approver
// over its record of the instance a ticket names.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend{Name: ProviderName,
		BadProviderIDs: []string{"digitalocean://", "digitalocean://0", "digitalocean://012", "digitalocean://-5",
			"digitalocean://5x", "digitalocean:///5", "digitalocean://99999999999999999999"},
		LoadBalancer: true, LBAnnotationPrefixes: []string{AnnotationPrefix, AnnotationPrefixGA},
		New: func(t *testing.T, o conformance.Options) conformance.Bed {
			w := newWorld(t, digitaloceantest.Options{HealthCheckSecond: 20 * time.Millisecond}, func(c *Config) { c.PageSize = o.PageSize })
			return &bed{world: w, cleanup: t.Cleanup, Endpoint: conformance.Endpoint{Cloud: w.cloud, Counter: &w.do.Counter, Faults: &w.do.Faults,
				List: []string{digitaloceantest.MethodList}, Get: []string{digitaloceantest.MethodGet}, LB: lbCalls,
				Own: map[conformance.Failure]func(testing.TB) func(){conformance.Outage: conformance.Switch(w.do.SetOutage),
					conformance.Unauthorized: conformance.WrongSecret(w.tokenFile, w.do.Token())},
				Statuses: map[view.State]string{view.StateStopped: digitaloceantest.StatusOff, view.StatePending: digitaloceantest.StatusNew,
					view.StateTerminated: digitaloceantest.StatusArchive},
				SetStatus: func(m conformance.Made, status string) error { return w.do.SetStatus(m.IntID(t), status) }}}
		},
		Config: func(t *testing.T, b conformance.Bed) string {
			return fmt.Sprintf("clusterID: %s\ntokenFile: %s\napiEndpoint: %s\n", testCluster, b.(*bed).tokenFile, b.(*bed).do.Endpoint())
		},
	})
}

// bed is the conformance suite's view of a world: the endpoint fails
// and counts calls by method, and its outage answers every call.
type bed struct {
	*world
	conformance.Endpoint
	hz      healthz
	cleanup func(func())
}

func (b *bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	d := b.do.Put(digitaloceantest.Droplet{ID: s.FirstID(), Name: s.Name, PrivateIP: s.Addr("127.0.83"), PublicIP: s.Addr("127.0.84"),
		Tags: []string{s.Cluster(testTag, "k8s:c2")}, Created: s.Created})
	return conformance.Made{Spec: s, ProviderID: agentid.ProviderID(d.ID), ID: strconv.Itoa(d.ID),
		NodeName: agentid.NodeName(d.Name), InternalIP: d.PrivateIP}
}

func (b *bed) Delete(t testing.TB, m conformance.Made) { b.do.Delete(m.IntID(t)) }

func (b *bed) BeforePage(f func(page int)) { b.do.BeforePage(f) }
