// Package vspheretest runs govmomi's vCenter simulator (vcsim, package
// github.com/vmware/govmomi/simulator, with its vAPI endpoints for tags) on
// loopback for mooring's vSphere tests: VMware's own model of vCenter's
// SOAP and REST APIs, not an endpoint of mooring's. It adds what the tests
// need around it: a login the simulator checks, its TLS certificate as a
// CA file, a folder for the cluster's VMs, tag categories and tags, and
// VMs made through the API (Folder.CreateVM_Task, ReconfigVM_Task with the
// simulator's SET.guest.* keys for what VMware Tools would report,
// PowerOnVM_Task) whose guest addresses are loopback addresses only.
package vspheretest

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vapi/rest"
	"github.com/vmware/govmomi/vapi/tags"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	// The vAPI endpoints (tags) of the simulator.
	_ "github.com/vmware/govmomi/vapi/simulator"
)

// Defaults of the simulated vCenter.
const (
	Username = "mooring@vsphere.local"
	Password = "not-a-real-password"
	// Datacenter is the VPX model's datacenter; Cluster its cluster (three
	// hosts, DC0_C0_H0..2) and StandaloneHost its host outside it.
	Datacenter     = "DC0"
	Cluster        = "DC0_C0"
	StandaloneHost = "DC0_H0"
	// Network is the model's VM network.
	Network = "VM Network"
	// FolderName is the cluster's VM folder, /DC0/vm/mooring.
	FolderName = "mooring"
)

// Sim is a running simulator.
type Sim struct {
	Model  *simulator.Model
	Server *simulator.Server
	// URL is the SDK URL (https://127.0.0.1:port/sdk), without the login.
	URL string
	// CAFile holds the server's certificate (PEM).
	CAFile string
	// Folder is the inventory path of the cluster's VM folder.
	Folder string
	// Vim and REST are the test's own logged-in clients.
	Vim  *vim25.Client
	REST *rest.Client

	finder *find.Finder
	mu     sync.Mutex
	vms    map[string]types.ManagedObjectReference
}

// Start runs the VPX model (no VMs of its own: every VM is the test's) on
// a loopback port with TLS; the test's cleanup stops it.
func Start(t testing.TB) *Sim {
	t.Helper()
	m := simulator.VPX()
	m.Machine = 0
	if err := m.Create(); err != nil {
		t.Fatal(err)
	}
	m.Service.TLS = new(tls.Config)
	m.Service.RegisterEndpoints = true
	m.Service.Listen = &url.URL{Host: "127.0.0.1:0", User: url.UserPassword(Username, Password)}
	srv := m.Service.NewServer()
	t.Cleanup(func() { srv.Close(); m.Remove() })
	if host := srv.URL.Hostname(); !net.ParseIP(host).IsLoopback() {
		t.Fatalf("vcsim listens on %s, not a loopback address", srv.URL.Host)
	}
	u := *srv.URL
	u.User = nil
	s := &Sim{Model: m, Server: srv, URL: u.String(), Folder: "/" + Datacenter + "/vm/" + FolderName,
		vms: map[string]types.ManagedObjectReference{}}
	s.CAFile = filepath.Join(t.TempDir(), "vcsim-ca.pem")
	if err := os.WriteFile(s.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sc := soap.NewClient(&u, false)
	if err := sc.SetRootCAs(s.CAFile); err != nil {
		t.Fatal(err)
	}
	vim, err := vim25.NewClient(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	login := url.UserPassword(Username, Password)
	if err := session.NewManager(vim).Login(ctx, login); err != nil {
		t.Fatal(err)
	}
	rc := rest.NewClient(vim)
	if err := rc.Login(ctx, login); err != nil {
		t.Fatal(err)
	}
	s.Vim, s.REST = vim, rc
	s.finder = find.NewFinder(vim, true)
	dc, err := s.finder.Datacenter(ctx, Datacenter)
	if err != nil {
		t.Fatal(err)
	}
	s.finder.SetDatacenter(dc)
	folders, err := dc.Folders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := folders.VmFolder.CreateFolder(ctx, FolderName); err != nil {
		t.Fatal(err)
	}
	return s
}

// Ref is the managed object at an inventory path (/DC0/host/DC0_C0, say).
func (s *Sim) Ref(path string) (types.ManagedObjectReference, error) {
	ref, err := object.NewSearchIndex(s.Vim).FindByInventoryPath(context.Background(), path)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	if ref == nil {
		return types.ManagedObjectReference{}, fmt.Errorf("vcsim: nothing at %s", path)
	}
	return ref.Reference(), nil
}

// CreateFolder makes a folder named name in the folder at parent (an
// inventory path) and returns its path.
func (s *Sim) CreateFolder(parent, name string) (string, error) {
	f, err := s.finder.Folder(context.Background(), parent)
	if err != nil {
		return "", err
	}
	if _, err := f.CreateFolder(context.Background(), name); err != nil {
		return "", err
	}
	return parent + "/" + name, nil
}

// CreateCategory makes a tag category for every type and returns its id.
func (s *Sim) CreateCategory(name string) (string, error) {
	return tags.NewManager(s.REST).CreateCategory(context.Background(), &tags.Category{Name: name, Cardinality: "SINGLE"})
}

// CreateTag makes a tag of the category (its id) and returns the tag's id.
func (s *Sim) CreateTag(categoryID, name string) (string, error) {
	return tags.NewManager(s.REST).CreateTag(context.Background(), &tags.Tag{Name: name, CategoryID: categoryID})
}

// Attach attaches a tag (its id) to an object.
func (s *Sim) Attach(tagID string, ref types.ManagedObjectReference) error {
	return tags.NewManager(s.REST).AttachTag(context.Background(), tagID, ref)
}

// VM is a VM to make.
type VM struct {
	Name string
	// UUID is its BIOS UUID (config.uuid); required.
	UUID string
	// Folder is an inventory path; default the cluster's folder.
	Folder string
	// Host is the host's inventory name: a cluster host (DC0_C0_H0) or the
	// standalone DC0_H0 (the default).
	Host string
	// IP is the address VMware Tools reports on its network card (a
	// loopback address; required), HostName the guest's host name.
	IP, HostName string
	// Off leaves it powered off.
	Off bool
	// Template marks it as a template.
	Template bool
}

// AddVM makes vm through the API and returns its reference.
func (s *Sim) AddVM(vm VM) (types.ManagedObjectReference, error) {
	if ip := net.ParseIP(vm.IP); ip == nil || !ip.IsLoopback() {
		return types.ManagedObjectReference{}, fmt.Errorf("vcsim: VM %s: guest address %q is not a loopback address", vm.Name, vm.IP)
	}
	ctx := context.Background()
	folderPath := vm.Folder
	if folderPath == "" {
		folderPath = s.Folder
	}
	folder, err := s.finder.Folder(ctx, folderPath)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	hostName := vm.Host
	if hostName == "" {
		hostName = StandaloneHost
	}
	host, err := s.finder.HostSystem(ctx, hostName)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	pool, err := host.ResourcePool(ctx)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	network, err := s.finder.Network(ctx, Network)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	backing, err := network.EthernetCardBackingInfo(ctx)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	card, err := object.EthernetCardTypes().CreateEthernetCard("vmxnet3", backing)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	devices, err := object.VirtualDeviceList{card}.ConfigSpec(types.VirtualDeviceConfigSpecOperationAdd)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	spec := types.VirtualMachineConfigSpec{
		Name: vm.Name, Uuid: vm.UUID, GuestId: "ubuntu64Guest", NumCPUs: 2, MemoryMB: 4096,
		Files:        &types.VirtualMachineFileInfo{VmPathName: "[LocalDS_0]"},
		DeviceChange: devices,
	}
	task, err := folder.CreateVM(ctx, spec, pool, host)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	info, err := task.WaitForResult(ctx)
	if err != nil {
		return types.ManagedObjectReference{}, fmt.Errorf("vcsim: create VM %s: %w", vm.Name, err)
	}
	ref := info.Result.(types.ManagedObjectReference)
	obj := object.NewVirtualMachine(s.Vim, ref)
	if !vm.Off && !vm.Template {
		if err := wait(ctx, obj.PowerOn); err != nil {
			return ref, fmt.Errorf("vcsim: power on VM %s: %w", vm.Name, err)
		}
	}
	if err := s.SetGuest(ref, vm.IP, vm.HostName); err != nil {
		return ref, err
	}
	if vm.Template {
		if err := obj.MarkAsTemplate(ctx); err != nil {
			return ref, err
		}
	}
	s.mu.Lock()
	s.vms[vm.Name] = ref
	s.mu.Unlock()
	return ref, nil
}

// SetGuest sets what VMware Tools reports of a VM: the address of its
// network card (a loopback address) and its host name, through the
// simulator's SET.guest.* extra config keys. It then checks that every
// address the simulator reports for any VM is a loopback address.
func (s *Sim) SetGuest(ref types.ManagedObjectReference, ip, hostName string) error {
	if a := net.ParseIP(ip); a == nil || !a.IsLoopback() {
		return fmt.Errorf("vcsim: guest address %q is not a loopback address", ip)
	}
	extra := []types.BaseOptionValue{&types.OptionValue{Key: "SET.guest.ipAddress", Value: ip}}
	if hostName != "" {
		extra = append(extra, &types.OptionValue{Key: "SET.guest.hostName", Value: hostName})
	}
	ctx := context.Background()
	task, err := object.NewVirtualMachine(s.Vim, ref).Reconfigure(ctx, types.VirtualMachineConfigSpec{ExtraConfig: extra})
	if err != nil {
		return err
	}
	if err := task.Wait(ctx); err != nil {
		return fmt.Errorf("vcsim: set guest info of %s: %w", ref.Value, err)
	}
	return s.CheckLoopback()
}

// CheckLoopback fails when any VM's guest information holds an address
// that is not a loopback address.
func (s *Sim) CheckLoopback() error {
	for _, e := range s.Model.Map().All("VirtualMachine") {
		vm := e.(*simulator.VirtualMachine)
		var bad string
		s.Model.Map().WithLock(s.Model.Service.Context, vm, func() {
			if vm.Guest == nil {
				return
			}
			addrs := []string{vm.Guest.IpAddress}
			for _, n := range vm.Guest.Net {
				addrs = append(addrs, n.IpAddress...)
			}
			for _, a := range addrs {
				if ip := net.ParseIP(a); a != "" && (ip == nil || !ip.IsLoopback()) {
					bad = a
				}
			}
		})
		if bad != "" {
			return fmt.Errorf("vcsim: VM %s reports guest address %s, not a loopback address", vm.Name, bad)
		}
	}
	return nil
}

// PowerOff powers a VM off.
func (s *Sim) PowerOff(ref types.ManagedObjectReference) error {
	return wait(context.Background(), object.NewVirtualMachine(s.Vim, ref).PowerOff)
}

// Destroy deletes a VM.
func (s *Sim) Destroy(ref types.ManagedObjectReference) error {
	return wait(context.Background(), object.NewVirtualMachine(s.Vim, ref).Destroy)
}

// SetCreated changes a VM's creation date (config.createDate), which the
// API cannot: it stands for a VM made at another time (before a ticket, or
// after it expired).
func (s *Sim) SetCreated(ref types.ManagedObjectReference, at time.Time) {
	vm := s.Model.Map().Get(ref).(*simulator.VirtualMachine)
	s.Model.Map().WithLock(s.Model.Service.Context, vm, func() {
		vm.Config.CreateDate = types.NewTime(at)
	})
}

// VMRef is the VM last made under name.
func (s *Sim) VMRef(name string) (types.ManagedObjectReference, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.vms[name]
	return r, ok
}

// Properties reads a VM's properties (the test's own check).
func (s *Sim) Properties(ref types.ManagedObjectReference, ps ...string) (mo.VirtualMachine, error) {
	var vm mo.VirtualMachine
	err := object.NewVirtualMachine(s.Vim, ref).Properties(context.Background(), ref, ps, &vm)
	return vm, err
}

func wait(ctx context.Context, f func(context.Context) (*object.Task, error)) error {
	task, err := f(ctx)
	if err != nil {
		return err
	}
	return task.Wait(ctx)
}
