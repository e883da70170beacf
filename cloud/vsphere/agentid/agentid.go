// Package agentid is the vSphere backend's side of the node agent. A VM
// has no metadata service: the agent reads the VM's BIOS UUID (the vSphere
// API's config.uuid) from SMBIOS as the vSphere cloud provider's node code
// does, from the system serial number VMware writes as "VMware-" and the
// UUID's 16 bytes (/sys/class/dmi/id/product_serial), and only where that
// is missing or unreadable from the system UUID the kernel prints
// (product_uuid), whose byte order depends on the SMBIOS version
// (smbios.go); and it reads the VM's name from the agent config
// (cloudSettings vmName) or, by default, the machine's hostname, which
// cloud-init's VMware datasource sets from guestinfo.metadata's
// local-hostname. vSphere signs nothing about a VM, so Evidence wraps
// nodeid.ErrNoEvidence: the VM joins with a join ticket, which its
// user-data (guestinfo.userdata) carries.
//
// It registers the node identity of the backend "vsphere" (cloud/nodeid)
// and holds what the provider shares with it (names.go): providerIDs, Node
// names and the node name policy. It imports no provider and no govmomi
// (mooring-agent links it without them).
package agentid

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

// Name is the backend's name, the agent config's cloud: vsphere.
const Name = "vsphere"

func init() { nodeid.Register(Name, nodeid.Of(NewNodeIdentity)) }

// The agent's cloudSettings keys.
const (
	// SettingVMName is the VM's name (default: the hostname).
	SettingVMName = "vmName"
	// SettingSysfs is where sysfs is mounted (default /sys); tests point
	// it at a directory of their own.
	SettingSysfs = "sysfs"
)

// DefaultSysfs is sysfs's mount point.
const DefaultSysfs = "/sys"

// The files under sysfs the agent reads.
const (
	productSerialPath    = "class/dmi/id/product_serial"
	productUUIDPath      = "class/dmi/id/product_uuid"
	smbiosEntryPointPath = "firmware/dmi/tables/smbios_entry_point"
)

// NodeIdentity is a vSphere VM as its node agent sees it: the BIOS UUID
// from SMBIOS and the VM's name. vSphere signs no identity: Evidence always
// fails with nodeid.ErrNoEvidence, and the VM joins with a join ticket.
type NodeIdentity struct {
	nodeid.Ticketed
	vmName   string
	sysfs    string
	hostname func() (string, error)
}

var _ nodeid.Unsigned = (*NodeIdentity)(nil)

// NewNodeIdentity reads the agent's configuration of the vsphere backend:
// no metadataURL (a VM has no metadata service), cfg.NodeNamePolicy ("" or
// VMName), and the cloudSettings vmName and sysfs. It calls nothing.
func NewNodeIdentity(cfg nodeid.Config) (*NodeIdentity, error) {
	if err := cfg.CheckPolicy(Name, PolicyVMName); err != nil {
		return nil, err
	}
	if cfg.MetadataURL != "" {
		return nil, fmt.Errorf("vsphere: metadataURL %q: a vSphere VM has no metadata service (its name comes from cloudSettings %s or the hostname)", cfg.MetadataURL, SettingVMName)
	}
	id := &NodeIdentity{Ticketed: nodeid.Ticketed{Backend: Name, Machine: "a vSphere VM"},
		sysfs: DefaultSysfs, hostname: os.Hostname}
	for k, v := range cfg.Settings {
		switch k {
		case SettingVMName:
			if NodeName(v) == "" {
				return nil, fmt.Errorf("vsphere: cloudSettings: %s %.80q gives no Node name (lower-cased, it must be a DNS-1123 subdomain)", k, v)
			}
			id.vmName = v
		case SettingSysfs:
			if !filepath.IsAbs(v) {
				return nil, fmt.Errorf("vsphere: cloudSettings: %s %q: want an absolute path", k, v)
			}
			id.sysfs = filepath.Clean(v)
		default:
			return nil, fmt.Errorf("vsphere: cloudSettings: unknown key %q (the keys are %s and %s)", k, SettingVMName, SettingSysfs)
		}
	}
	return id, nil
}

// Instance reads the VM's BIOS UUID and name. The Node name is the VM's
// name, lower-cased; the internal IP is left to the CCM (VMware Tools
// reports the VM's addresses to vCenter, not to the agent).
func (n *NodeIdentity) Instance(context.Context) (nodeid.Instance, error) {
	uuid, err := BIOSUUID(n.sysfs)
	if err != nil {
		return nodeid.Instance{}, err
	}
	name := n.vmName
	if name == "" {
		h, err := n.hostname()
		if err != nil {
			return nodeid.Instance{}, fmt.Errorf("vsphere: the VM's name: no cloudSettings %s, and the hostname: %w", SettingVMName, err)
		}
		name = strings.TrimSuffix(h, ".")
	}
	nodeName := NodeName(name)
	if nodeName == "" {
		return nodeid.Instance{}, fmt.Errorf("vsphere: VM name %.80q is not a valid Node name (a DNS-1123 subdomain)", name)
	}
	return nodeid.Instance{ID: uuid, Name: name, NodeName: nodeName, ProviderID: ProviderID(uuid)}, nil
}

// BIOSUUID is the VM's BIOS UUID as the vSphere API gives it
// (config.uuid), lower-cased, read under sysfs as the vSphere cloud
// provider's node code reads it: from product_serial, which VMware fills
// with "VMware-" and the UUID's 16 bytes in the API's order whatever the
// virtual hardware (SerialUUID). product_serial is readable by root only;
// the agent runs as root.
//
// Where product_serial is missing, unreadable or not VMware's, the UUID
// comes from product_uuid, which Linux prints from the same 16 bytes in
// the byte order the SMBIOS version tells it to use: as they are below
// SMBIOS 2.6 (older virtual hardware announces 2.4), with the first three
// fields reversed from 2.6 on. So below 2.6 product_uuid is taken as it
// is, and otherwise, or when sysfs gives no SMBIOS entry point to read the
// version from, its first three fields are swapped back, the order the
// upstream CCM tries first. A kernel that prints the UUID otherwise than
// the version says gives the swapped form of the VM's UUID; the CCM
// accepts that form too when no other VM has it (docs/vsphere.md).
func BIOSUUID(sysfs string) (string, error) {
	serialPath := filepath.Join(sysfs, productSerialPath)
	fromSerial, serialErr := readSerial(serialPath)
	uuidPath := filepath.Join(sysfs, productUUIDPath)
	product, productErr := readProductUUID(uuidPath)
	if serialErr == nil {
		if productErr == nil && product != fromSerial && product != SwapUUID(fromSerial) {
			klog.InfoS("The SMBIOS system UUID matches the serial number in neither byte order; taking the serial number's, as the vSphere CCM does",
				"serialUUID", fromSerial, "productUUID", product)
		}
		return fromSerial, nil
	}
	if productErr != nil {
		return "", fmt.Errorf("vsphere: the BIOS UUID: %v; and %w", serialErr, productErr)
	}
	ver, known, err := smbiosVersion(sysfs)
	if err != nil {
		return "", fmt.Errorf("vsphere: the BIOS UUID: %v; and the SMBIOS version product_uuid's byte order depends on: %w", serialErr, err)
	}
	if known && ver < smbiosLittleEndianUUID {
		klog.InfoS("No usable serial number; taking the SMBIOS system UUID as it is (SMBIOS below 2.6)",
			"err", serialErr, "smbios", fmt.Sprintf("%d.%d", ver>>8, ver&0xff), "uuid", product)
		return product, nil
	}
	klog.InfoS("No usable serial number; taking the SMBIOS system UUID with its first three fields swapped back (SMBIOS 2.6 or later, or no entry point)",
		"err", serialErr, "smbiosKnown", known, "smbios", fmt.Sprintf("%d.%d", ver>>8, ver&0xff), "productUUID", product)
	return SwapUUID(product), nil
}

// readSerial reads product_serial and returns the UUID it holds
// (SerialUUID).
func readSerial(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrPermission) {
		return "", fmt.Errorf("%w (product_serial is readable by root only)", err)
	}
	if err != nil {
		return "", err
	}
	uuid, err := SerialUUID(string(raw))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return uuid, nil
}

// readProductUUID reads product_uuid, lower-cased.
func readProductUUID(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	uuid, err := ParseUUID(strings.TrimSpace(string(raw)))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return uuid, nil
}

// serialPrefix starts the system serial number of every VMware VM.
const serialPrefix = "VMware-"

// SerialUUID reads the BIOS UUID from a VMware VM's system serial number,
// as the vSphere cloud provider does: "VMware-" and the UUID's 16 bytes in
// hex, separated by spaces and, after the eighth, by "-" ("VMware-42 30 bf
// 6a ce 71 e1 68-6c 2d 17 6e 66 d0 4a 0d" is 4230bf6a-ce71-e168-6c2d-
// 176e66d04a0d). The bytes are in the vSphere API's order, on old and new
// virtual hardware alike as far as published guests show
// (testdata/README.md). It returns the UUID lower-cased.
func SerialUUID(serial string) (string, error) {
	s := strings.TrimSpace(serial)
	rest, ok := strings.CutPrefix(s, serialPrefix)
	if !ok {
		return "", fmt.Errorf("serial number %.60q is not VMware's (no %q prefix)", s, serialPrefix)
	}
	hex := strings.NewReplacer(" ", "", "-", "").Replace(rest)
	if len(hex) != 32 {
		return "", fmt.Errorf("serial number %.60q does not hold 16 bytes", s)
	}
	uuid, err := ParseUUID(hex[0:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:32])
	if err != nil {
		return "", fmt.Errorf("serial number %.60q: %w", s, err)
	}
	return uuid, nil
}
