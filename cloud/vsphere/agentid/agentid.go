// Package agentid is the vSphere backend's side of the node agent. A VM
// has no metadata service: the agent reads the VM's BIOS UUID from SMBIOS
// (the kernel's /sys/class/dmi/id/product_uuid), turned into the byte order
// the vSphere API gives it (smbios.go), and the VM's name from the agent
// config (cloudSettings vmName) or, by default, the machine's hostname,
// which cloud-init's VMware datasource sets from guestinfo.metadata's
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
	"github.com/mooring-dev/mooring/internal/evidence"
)

// Name is the backend's name, the agent config's cloud: vsphere.
const Name = "vsphere"

func init() {
	nodeid.Register(Name, func(cfg nodeid.Config) (nodeid.Identity, error) { return NewNodeIdentity(cfg) })
}

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
	productUUIDPath      = "class/dmi/id/product_uuid"
	smbiosEntryPointPath = "firmware/dmi/tables/smbios_entry_point"
)

// NodeIdentity is a vSphere VM as its node agent sees it: the BIOS UUID
// from SMBIOS and the VM's name. vSphere signs no identity: Evidence always
// fails with nodeid.ErrNoEvidence, and the VM joins with a join ticket.
type NodeIdentity struct {
	vmName   string
	sysfs    string
	hostname func() (string, error)
}

var _ nodeid.Identity = (*NodeIdentity)(nil)

// NewNodeIdentity reads the agent's configuration of the vsphere backend:
// no metadataURL (a VM has no metadata service), cfg.NodeNamePolicy ("" or
// VMName), and the cloudSettings vmName and sysfs. It calls nothing.
func NewNodeIdentity(cfg nodeid.Config) (*NodeIdentity, error) {
	if cfg.NodeNamePolicy != "" && cfg.NodeNamePolicy != PolicyVMName {
		return nil, fmt.Errorf("vsphere: node name policy %q: the only policy is %s", cfg.NodeNamePolicy, PolicyVMName)
	}
	if cfg.MetadataURL != "" {
		return nil, fmt.Errorf("vsphere: metadataURL %q: a vSphere VM has no metadata service (its name comes from cloudSettings %s or the hostname)", cfg.MetadataURL, SettingVMName)
	}
	id := &NodeIdentity{sysfs: DefaultSysfs, hostname: os.Hostname}
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
// (config.uuid), read from SMBIOS under sysfs: product_uuid, whose first
// three fields Linux prints in the byte order the SMBIOS version tells it
// to use. VMware stores them little-endian, as SMBIOS 2.6 specifies, also
// on VMs whose virtual hardware announces an older SMBIOS: there Linux
// reads them big-endian, and the UUID it prints has those fields swapped
// (the upstream vSphere CCM tries both orders for that reason). The
// version comes from the SMBIOS entry point; without one, product_uuid is
// taken as it is.
func BIOSUUID(sysfs string) (string, error) {
	path := filepath.Join(sysfs, productUUIDPath)
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("vsphere: the BIOS UUID: %w", err)
	}
	uuid, err := ParseUUID(strings.TrimSpace(string(raw)))
	if err != nil {
		return "", fmt.Errorf("vsphere: the BIOS UUID: %s: %w", path, err)
	}
	epPath := filepath.Join(sysfs, smbiosEntryPointPath)
	ep, err := os.ReadFile(epPath)
	if errors.Is(err, os.ErrNotExist) {
		klog.InfoS("No SMBIOS entry point; taking the product UUID as the BIOS UUID", "file", epPath)
		return uuid, nil
	}
	if err != nil {
		return "", fmt.Errorf("vsphere: the SMBIOS version: %w", err)
	}
	ver, err := SMBIOSVersion(ep)
	if err != nil {
		return "", fmt.Errorf("vsphere: the SMBIOS version: %s: %w", epPath, err)
	}
	if ver < smbiosLittleEndianUUID {
		return SwapUUID(uuid), nil
	}
	return uuid, nil
}

// Evidence is an error wrapping nodeid.ErrNoEvidence: vSphere signs no VM
// identity; the VM joins with a join ticket.
func (n *NodeIdentity) Evidence(context.Context, string) (evidence.Block, error) {
	return evidence.Block{}, fmt.Errorf("vsphere: %w: a vSphere VM joins with a join ticket", nodeid.ErrNoEvidence)
}
