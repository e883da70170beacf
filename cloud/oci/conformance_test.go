package oci_test

import (
	"testing"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/oci"
	"github.com/mooring-dev/mooring/cloud/oci/agentid"
	"github.com/mooring-dev/mooring/cloud/oci/ocitest"
	"github.com/mooring-dev/mooring/cloud/view"
)

// OCI's provider keeps the kit's promises (cloud/cloudtest/conformance).
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend{Name: "oci", Zones: true, Evidence: []string{agentid.EvidenceType},
		BadProviderIDs: []string{"oci://", "oci://ocid1.instance.oc1.iad.", "oci://ocid1.vnic.oc1.iad.aaaaexample",
			"oci://ocid1.compartment.oc1..aaaaexample", "oci:///ocid1.instance.oc1.iad.aaaaexample", "oci://has space"},
		LoadBalancer: true, LBAnnotationPrefixes: []string{oci.AnnLBPrefix, oci.AnnOCIPrefix, oci.AnnNLBPrefix},
		New: func(t *testing.T, o conformance.Options) conformance.Bed {
			ep, c := setup(t, ocitest.Options{MaxPageSize: o.PageSize}, lbNetwork)
			putLBNetwork(ep)
			// Every API call answers the failure's status: 503, 401
			// (NotAuthenticated, as for a key OCI does not know) or 429
			// (TooManyRequests); GetFails GetInstance alone, 503.
			return &ociBed{t: t, ep: ep, c: c, Endpoint: conformance.Endpoint{Cloud: c, Counter: &ep.Counter, Faults: &ep.Faults,
				List: []string{"ListInstances", "ListVnicAttachments", "GetVnic"}, Get: []string{"GetInstance"}, LB: lbCalls,
				Statuses:  map[view.State]string{view.StateStopped: "STOPPED", view.StatePending: "PROVISIONING", view.StateTerminated: "TERMINATED"},
				SetStatus: func(m conformance.Made, state string) error { return ep.SetState(m.ID, state) }}}
		},
		Config: func(t *testing.T, b conformance.Bed) string {
			return configYAML(t, b.(*ociBed).ep, lbNetwork)
		},
	})
}

// ociBed is the conformance suite's view of an ocitest endpoint and a
// provider over it.
type ociBed struct {
	conformance.Endpoint
	ep *ocitest.Cloud
	c  *oci.Cloud
	t  testing.TB
	// healthz are the addresses with a kube-proxy healthz stand-in.
	healthz map[string]bool
}

func (b *ociBed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	created := s.Created
	if s.First && created.IsZero() {
		created = time.Now().Add(-24 * time.Hour).UTC().Truncate(time.Second) // the list is in creation order
	}
	in := b.ep.Put(ocitest.Instance{DisplayName: s.Name, PrivateIP: s.Addr("127.0.91"),
		PublicIP: s.Addr("127.0.92"), FreeformTags: tagged(s.Cluster(cluster, "another")), Created: created})
	return conformance.Made{Spec: s, ProviderID: agentid.ProviderID(in.ID), ID: in.ID,
		NodeName: agentid.NodeName(in.DisplayName), InternalIP: in.PrivateIP}
}

func (b *ociBed) Delete(t testing.TB, m conformance.Made) { b.ep.Delete(m.ID) }

func (b *ociBed) BeforePage(f func(page int)) { b.ep.BeforePage(f) }
