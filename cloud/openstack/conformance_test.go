package openstack

import (
	"fmt"
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/openstack/agentid"
	"github.com/mooring-dev/mooring/cloud/openstack/openstacktest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// OpenStack's provider keeps the kit's promises (cloud/cloudtest/conformance).
// Its machines join with join tickets (Run's Tickets): the approver
// over its record of the instance a ticket names.
func TestConformance(t *testing.T) {
	const id = "9e5476bd-a4ec-4653-93d6-72c93aa682ba"
	conformance.Run(t, conformance.Backend{Name: ProviderName, Zones: true, Routes: true,
		LoadBalancer: true, LBAnnotationPrefixes: []string{AnnotationPrefix, LegacyAnnotationPrefix},
		BadProviderIDs: []string{"openstack://", "openstack:///", "openstack:///42", "openstack:///" + "9E5476BD-A4EC-4653-93D6-72C93AA682BA",
			"openstack://" + id, "openstack://RegionTwo/" + id, "openstack://Region One/" + id},
		New: func(t *testing.T, o conformance.Options) conformance.Bed {
			// Nova's max_limit sets the pages: the provider asks for more.
			w := newWorld(t, openstacktest.Options{MaxLimit: o.PageSize, LB: openstacktest.LBOptions{PendingFor: lbPending}}, withRouter(o, lbConfig))
			if o.Routes {
				putBedRouter(w)
			}
			// An outage hangs up on every call; Unauthorized revokes the
			// application credential (Keystone refuses it, its tokens are
			// void); the rest are Nova's answers.
			return &bed{world: w, Endpoint: conformance.Endpoint{Cloud: w.cloud, Counter: &w.os.Counter, Faults: &w.os.Faults,
				List: []string{"list"}, Get: []string{"get"},
				Own: map[conformance.Failure]func(testing.TB) func(){conformance.Outage: conformance.Switch(w.os.SetDown),
					conformance.Unauthorized: func(testing.TB) func() { w.os.Revoke(); return w.os.Unrevoke }},
				Statuses: map[view.State]string{view.StateStopped: openstacktest.StatusShutoff, view.StatePending: openstacktest.StatusBuild,
					view.StateTerminated: "DELETED"},
				SetStatus: func(m conformance.Made, status string) error { return w.os.SetStatus(m.ID, status) },
				LB:        lbCalls, Route: routeCalls}}
		},
		Config: func(t *testing.T, b conformance.Bed) string {
			o := b.(*bed).os
			id, secret := o.Credential()
			return fmt.Sprintf("authURL: %s\napplicationCredentialID: %s\nsecretFile: %s\nregion: %s\nclusterID: %s\n%s",
				o.AuthURL(), id, writeSecret(t, secret), o.Region(), testCluster, b.(*bed).routerLine())
		},
	})
}

// bed is the conformance suite's view of a world.
type bed struct {
	*world
	conformance.Endpoint
	page int // the list page being served, counted by its marker
}

func (b *bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	addr := s.Addr("127.0.87")
	created := s.Created
	if s.First && created.IsZero() {
		created = time.Now().Add(-24 * time.Hour).UTC().Truncate(time.Second) // Nova lists oldest first
	}
	// An id of the bed's own: the endpoint's Put of a name without one
	// would replace the server of that name, and Nova allows two.
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", s.N)
	srv := b.os.Put(openstacktest.Server{ID: id, Name: s.Name, Tags: []string{s.Cluster(testTag, DefaultClusterTagPrefix+"c2")}, Created: created,
		Addresses: []openstacktest.Address{{Addr: addr}}})
	return conformance.Made{Spec: s, ProviderID: agentid.ProviderID("", srv.ID), ID: srv.ID,
		NodeName: agentid.NodeName(srv.Name), InternalIP: addr}
}

func (b *bed) Delete(t testing.TB, m conformance.Made) { b.os.Delete(m.ID) }

// BeforePage numbers Nova's pages: the first has no marker.
func (b *bed) BeforePage(f func(page int)) {
	if f == nil {
		b.os.OnList(nil)
		return
	}
	b.os.OnList(func(marker string) {
		if marker == "" {
			b.page = 0
		}
		b.page++
		f(b.page)
	})
}
