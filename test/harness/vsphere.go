package harness

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vmware/govmomi/vim25/types"

	"github.com/mooring-dev/mooring/cloud/vsphere"
	"github.com/mooring-dev/mooring/cloud/vsphere/agentid"
	"github.com/mooring-dev/mooring/cloud/vsphere/vspheretest"
)

// VSphereCloud is govmomi's vCenter simulator (cloud/vsphere/vspheretest)
// on loopback as mooring's binaries are set up for vSphere: the CCM and
// the approver log in with a password from a file and check vcsim's
// certificate, list the VMs of the cluster's folder and read zone and
// region from tags (region-a on the datacenter, zone-a on the cluster
// DC0_C0, zone-b on the standalone host DC0_H0); nodes read their BIOS
// UUID from a sysfs of their own and join with join tickets (vSphere
// signs nothing), issued by Tickets.
type VSphereCloud struct {
	*vspheretest.Sim
	// Tickets issues the machines' join tickets.
	Tickets *TicketIssuer
	// PasswordFile holds the password the binaries' config names.
	PasswordFile string
	// Sysfs holds each machine's sysfs (<name>/class/dmi/id/product_uuid,
	// product_serial and the SMBIOS entry point), under /var/lib: the
	// agent's unit hides /tmp.
	Sysfs string
	// Guests are the guests the Provisioner's machines show, in turn (the
	// first machine the first); StartVSphereCloud sets DefaultGuests.
	Guests []vspheretest.Guest

	mu        sync.Mutex
	nextOctet int
	uuids     map[string]string
}

// vSphere test addresses (loopback; nobody else in test/ uses 127.0.87.x):
// a VM's guest address is 127.0.87.N, N from 10 up.
const vsphereFirstOctet = 10

// VSphere tag categories and tags of the test inventory.
const (
	VSphereZoneCategory   = "k8s-zone"
	VSphereRegionCategory = "k8s-region"
	VSphereRegion         = "region-a"
	// VSphereClusterZone is the zone of the cluster DC0_C0's hosts, where
	// the fleet's VMs run.
	VSphereClusterZone = "zone-a"
)

// StartVSphereCloud starts vcsim with its tags; the test's cleanup stops
// it and removes the machines' sysfs.
func StartVSphereCloud(t testing.TB, tickets *TicketIssuer) *VSphereCloud {
	t.Helper()
	sim := vspheretest.Start(t)
	v := &VSphereCloud{Sim: sim, Tickets: tickets, nextOctet: vsphereFirstOctet, uuids: map[string]string{},
		Guests: DefaultGuests}
	zone, err := sim.CreateCategory(VSphereZoneCategory)
	if err != nil {
		t.Fatal(err)
	}
	region, err := sim.CreateCategory(VSphereRegionCategory)
	if err != nil {
		t.Fatal(err)
	}
	for path, tag := range map[string][2]string{
		"/DC0":                    {region, VSphereRegion},
		"/DC0/host/DC0_C0":        {zone, VSphereClusterZone},
		"/DC0/host/DC0_H0/DC0_H0": {zone, "zone-b"},
	} {
		id, err := sim.CreateTag(tag[0], tag[1])
		if err != nil {
			t.Fatal(err)
		}
		ref, err := sim.Ref(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := sim.Attach(id, ref); err != nil {
			t.Fatal(err)
		}
	}
	v.PasswordFile = filepath.Join(t.TempDir(), "vsphere-password")
	if err := os.WriteFile(v.PasswordFile, []byte(vspheretest.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v.Sysfs, err = os.MkdirTemp("/var/lib", "mooring-vsphere-sysfs-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(v.Sysfs) })
	return v
}

// DefaultGuests are the Provisioner's guests in turn: current virtual
// hardware (SMBIOS 2.7, product_uuid swapped, the serial number in the
// API's order); older virtual hardware (SMBIOS 2.4, product_uuid in the
// API's order); and SMBIOS 3.1 whose serial number the agent cannot read,
// so that it falls back to product_uuid and the SMBIOS version.
var DefaultGuests = []vspheretest.Guest{
	vspheretest.GuestModern,
	vspheretest.GuestOldHardware,
	{SMBIOS: "3.1", NoSerial: true},
}

// NewUUID is a random BIOS UUID in the form vCenter gives it.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[0] = 0x42 // vCenter's BIOS UUIDs start 42
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// AddNode makes a powered-on VM named name in the cluster's folder, on a
// host of the cluster DC0_C0, on the next free loopback address.
func (v *VSphereCloud) AddNode(name string) (vspheretest.VM, types.ManagedObjectReference, error) {
	return v.AddVM(vspheretest.VM{Name: name})
}

// AddVM makes vm (its UUID, host, address and guest host name assigned
// here unless set) and remembers its UUID by name.
func (v *VSphereCloud) AddVM(vm vspheretest.VM) (vspheretest.VM, types.ManagedObjectReference, error) {
	v.mu.Lock()
	n := v.nextOctet
	v.nextOctet++
	v.mu.Unlock()
	if n > 254 {
		return vm, types.ManagedObjectReference{}, fmt.Errorf("harness: out of vSphere test addresses")
	}
	if vm.UUID == "" {
		vm.UUID = NewUUID()
	}
	if vm.Host == "" {
		vm.Host = fmt.Sprintf("DC0_C0_H%d", n%3)
	}
	if vm.IP == "" {
		vm.IP = fmt.Sprintf("127.0.87.%d", n)
	}
	if vm.HostName == "" {
		vm.HostName = vm.Name
	}
	ref, err := v.Sim.AddVM(vm)
	if err != nil {
		return vm, ref, err
	}
	v.mu.Lock()
	v.uuids[vm.Name] = vm.UUID
	v.mu.Unlock()
	return vm, ref, nil
}

// UUID is the BIOS UUID of the VM last made under name.
func (v *VSphereCloud) UUID(name string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.uuids[name]
}

// WriteSysfs lays out a machine's sysfs as the Linux of a VM of BIOS UUID
// uuid shows it on the guest's virtual hardware (vspheretest.Guest):
// product_uuid, product_serial and the SMBIOS entry point.
func (v *VSphereCloud) WriteSysfs(name, uuid string, guest vspheretest.Guest) (string, error) {
	dir := filepath.Join(v.Sysfs, name)
	return dir, guest.WriteSysfs(dir, uuid)
}

// Provisioner makes fleet machines as VMs of the cluster's folder, as an
// admin's provisioning does: the join ticket for the name first, then the
// VM; their agents use `cloud: vsphere`, read the BIOS UUID from their
// sysfs (the Guests in turn) and present the ticket
// (FleetOptions.Provision).
func (v *VSphereCloud) Provisioner(cluster string) func(ctx context.Context, name string) (Provisioned, error) {
	return func(_ context.Context, name string) (Provisioned, error) {
		tok, err := v.Tickets.Issue(name, cluster, 0)
		if err != nil {
			return Provisioned{}, err
		}
		vm, _, err := v.AddNode(name)
		if err != nil {
			return Provisioned{}, err
		}
		v.mu.Lock()
		guest := vspheretest.Guest{}
		if len(v.Guests) > 0 {
			guest = v.Guests[(len(v.uuids)-1)%len(v.Guests)]
		}
		v.mu.Unlock()
		sysfs, err := v.WriteSysfs(name, vm.UUID, guest)
		if err != nil {
			return Provisioned{}, err
		}
		return Provisioned{NodeName: name, Address: vm.IP, AgentConfig: v.AgentConfig(name, sysfs), JoinTicket: tok}, nil
	}
}

// AgentConfig is the agent config's cloud part for the VM name whose sysfs
// is at sysfs.
func (v *VSphereCloud) AgentConfig(name, sysfs string) string {
	return fmt.Sprintf("cloud: vsphere\ncloudSettings:\n  %s: %s\n  %s: %s\n", agentid.SettingVMName, name, agentid.SettingSysfs, sysfs)
}

// ProviderName is "vsphere".
func (v *VSphereCloud) ProviderName() string { return "vsphere" }

// WriteProviderConfig writes the vSphere provider's config
// (docs/vsphere.md) for cluster: vcsim's URL and certificate, the password
// file, the cluster's folder and the topology categories. It trusts the
// guests' host names and addresses for serving certificates
// (trustedAddressSources): the test bed's guests are the test's own, and
// its kubelets ask for their IPs. Without it, which is the default, those
// are denied (cloud/vsphere TestServingDoesNotTrustTheGuestByDefault).
func (v *VSphereCloud) WriteProviderConfig(dir, cluster, extra string) (string, error) {
	path := filepath.Join(dir, "cloud.yaml")
	cfg := fmt.Sprintf("server: %s\ncaFile: %s\nusername: %s\npasswordFile: %s\nclusterID: %s\nfolder: %s\nlabels:\n  zone: %s\n  region: %s\ntrustedAddressSources: [%s, %s]\n%s",
		v.URL, v.CAFile, vspheretest.Username, v.PasswordFile, cluster, v.Folder, VSphereZoneCategory, VSphereRegionCategory,
		vsphere.SourceGuestNet, vsphere.SourceGuestHostName, extra)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// ProviderEnv clears VSPHERE_PASSWORD: the config names the password
// file, and a real password in the test's environment must not reach the
// binaries.
func (v *VSphereCloud) ProviderEnv() []string { return []string{"VSPHERE_PASSWORD="} }
