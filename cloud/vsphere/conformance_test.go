package vsphere

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/mooring-dev/mooring/cloud/cloudtest/conformance"
	"github.com/mooring-dev/mooring/cloud/view"
	"github.com/mooring-dev/mooring/cloud/vsphere/agentid"
	"github.com/mooring-dev/mooring/cloud/vsphere/vspheretest"
)

// vSphere's provider keeps the kit's promises (cloud/cloudtest/conformance)
// against govmomi's vCenter simulator. The cluster is the VMs of its
// folder; another cluster's are in another folder. A VM is powered on,
// off or suspended: vCenter has no pending or terminated VM (a deleted
// one is gone), and no answer that says a caller is over a rate limit.
// The listing is one property collector retrieval, with no pages of
// mooring's asking.
// Its machines join with join tickets (Run's Tickets): the approver
// over its record of the instance a ticket names.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend{Name: ProviderName, Zones: true,
		BadProviderIDs: []string{"vsphere://", "vsphere://x", "vsphere:///" + uuid(1), "vsphere://" + uuid(1) + "0",
			"vsphere://" + strings.ReplaceAll(uuid(1), "-", ""), "vsphere://" + strings.Replace(uuid(1), "4", "g", 1)},
		New: func(t *testing.T, _ conformance.Options) conformance.Bed { return newBed(t) },
		Config: func(t *testing.T, b conformance.Bed) string {
			s := b.(*bed).sim
			return fmt.Sprintf("server: %s\ncaFile: %s\nusername: %s\npasswordFile: %s\nclusterID: %s\nfolder: %s\n",
				s.URL, s.CAFile, vspheretest.Username, writeFile(t, "password", vspheretest.Password), testCluster, s.Folder)
		},
	})
}

// bed is the conformance suite's view of a world whose provider's calls
// pass a gate that can answer 503 for vCenter (an outage in front of it).
type bed struct {
	*world
	down atomic.Bool
	// getDown fails FindByUuid alone (ConfirmInstance's call).
	getDown atomic.Bool
	other   string // another cluster's folder, made on first use
}

func newBed(t *testing.T) *bed {
	b := &bed{world: newWorld(t, nil)}
	gate := func(next http.RoundTripper) http.RoundTripper {
		next = b.calls.wrap(next)
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if b.getDown.Load() && r.Body != nil {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					return nil, err
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				if m := soapMethod.FindSubmatch(body); m != nil && string(m[1]) == "FindByUuid" {
					return unavailable(r), nil
				}
			}
			if b.down.Load() {
				return unavailable(r), nil
			}
			return next.RoundTrip(r)
		})
	}
	c, err := New(b.cloud.Config(), WithTransport(gate))
	if err != nil {
		t.Fatal(err)
	}
	b.cloud = c
	return b
}

func (b *bed) Provider() conformance.Provider { return b.cloud }

func (b *bed) Make(t testing.TB, s conformance.Spec) conformance.Made {
	vm := vspheretest.VM{Name: s.Name, UUID: uuid(s.N), IP: s.Addr("127.0.90")}
	if s.Foreign {
		if b.other == "" {
			f, err := b.sim.CreateFolder("/DC0/vm", "other-cluster")
			if err != nil {
				t.Fatal(err)
			}
			b.other = f
		}
		vm.Folder = b.other
	}
	ref, err := b.sim.AddVM(vm)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Created.IsZero() {
		b.sim.SetCreated(ref, s.Created)
	}
	return conformance.Made{Spec: s, ProviderID: agentid.ProviderID(vm.UUID), ID: vm.UUID,
		NodeName: agentid.NodeName(vm.Name), InternalIP: vm.IP}
}

func (b *bed) ref(t testing.TB, m conformance.Made) types.ManagedObjectReference {
	ref, ok := b.sim.VMRef(m.Name)
	if !ok {
		t.Fatalf("no VM %s", m.Name)
	}
	return ref
}

// Delete powers the VM off (vCenter destroys no running VM) and destroys it.
func (b *bed) Delete(t testing.TB, m conformance.Made) {
	ref := b.ref(t, m)
	if vm, err := b.sim.Properties(ref, "runtime.powerState"); err != nil {
		t.Fatal(err)
	} else if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
		if err := b.sim.PowerOff(ref); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.sim.Destroy(ref); err != nil {
		t.Fatal(err)
	}
}

func (b *bed) SetState(t testing.TB, m conformance.Made, s view.State) bool {
	if s != view.StateStopped {
		return false
	}
	if err := b.sim.PowerOff(b.ref(t, m)); err != nil {
		t.Fatal(err)
	}
	return true
}

// Fail: an outage is 503 to every call, GetFails to FindByUuid alone; Unauthorized ends the provider's
// sessions and makes vCenter refuse its login.
func (b *bed) Fail(t testing.TB, f conformance.Failure) func() {
	switch f {
	case conformance.Outage:
		b.down.Store(true)
		return func() { b.down.Store(false) }
	case conformance.GetFails:
		b.getDown.Store(true)
		return func() { b.getDown.Store(false) }
	case conformance.Unauthorized:
		b.refuseLogins(func(*types.Login) bool { return false })
		ctx := context.Background()
		if cl, err := b.cloud.source.conn.login(ctx); err == nil {
			if err := session.NewManager(cl.vim).Logout(ctx); err != nil {
				t.Fatal(err)
			}
			if err := cl.rest.Logout(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return func() { b.refuseLogins(nil) }
	}
	return nil
}

// refuseLogins sets the simulator's check of a login (nil: its user and
// password).
func (b *bed) refuseLogins(valid func(*types.Login) bool) {
	sm := b.sim.Model.Map().SessionManager()
	b.sim.Model.Map().WithLock(b.sim.Model.Service.Context, sm, func() { sm.ValidLogin = valid })
}

func (b *bed) Calls(c conformance.Call) int {
	b.calls.mu.Lock()
	defer b.calls.mu.Unlock()
	if c == conformance.List {
		return b.calls.n["SOAP RetrievePropertiesEx"] + b.calls.n["SOAP ContinueRetrievePropertiesEx"]
	}
	return b.calls.n["SOAP FindByUuid"]
}

// unavailable is a 503 answer to r.
func unavailable(r *http.Request) *http.Response {
	return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("upstream unavailable")), Request: r}
}
