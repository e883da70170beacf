// Package agentid is the OpenStack backend's side of the node agent: the
// server's record as Nova gives it to the server, from the metadata
// service or from a config drive (the OpenStack meta_data.json and
// network_data.json, and the EC2-compatible local-ipv4). OpenStack signs
// nothing about a server that mooring can check (the metadata service
// answers anything on the server, unsigned, and a config drive is a disk
// anyone on the server can read), so Evidence wraps nodeid.ErrNoEvidence:
// the server joins with a join ticket. It registers the node identity of
// the backend "openstack" (cloud/nodeid), and holds what the provider
// shares with it (names.go): providerIDs, Node names and the node name
// policy. It imports no provider and no gophercloud (mooring-agent links
// it without them).
package agentid

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/linklocal"
)

// Name is the backend's name, the agent config's cloud: openstack.
const Name = "openstack"

func init() { nodeid.Register(Name, nodeid.Of(NewNodeIdentity)) }

// The paths read from the metadata service: the OpenStack metadata and
// network documents, and the EC2-compatible fixed address (Nova's first
// fixed IPv4 address; network_data.json leaves the address out for
// subnets with DHCP).
const (
	MetaDataPath    = "/openstack/latest/meta_data.json"
	NetworkDataPath = "/openstack/latest/network_data.json"
	LocalIPv4Path   = "/latest/meta-data/local-ipv4"
)

// The agent's cloudSettings keys of the backend.
const (
	// SettingRegion makes the kubelet's providerID the regional form
	// openstack://<region>/<id>; it must be the provider config's region,
	// set when the provider's regionalProviderID is.
	SettingRegion = "region"
	// SettingMetadataSource says where the server's record is read:
	// SourceAuto (the default), SourceMetadataService or SourceConfigDrive.
	SettingMetadataSource = "metadataSource"
	// SettingConfigDrive is the config drive: a directory holding its
	// files (mounted already, or copied), or its block device. Unset, the
	// device labelled config-2 (or CONFIG-2) is looked up in
	// /dev/disk/by-label.
	SettingConfigDrive = "configDrive"
	// SettingConfigDriveMountDir is the directory in which the agent makes
	// the drive's temporary mount point (default DefaultMountDir).
	SettingConfigDriveMountDir = "configDriveMountDir"
)

// The values of SettingMetadataSource.
const (
	// SourceAuto reads the metadata service, and the config drive when the
	// service cannot be reached or has no OpenStack metadata.
	SourceAuto = "auto"
	// SourceMetadataService reads only the metadata service.
	SourceMetadataService = "metadataService"
	// SourceConfigDrive reads only the config drive; the metadata service
	// is never asked.
	SourceConfigDrive = "configDrive"
)

// maxMetadataSize bounds a file of the config drive, as the metadata
// client bounds an answer.
const maxMetadataSize = linklocal.DefaultMaxBody

// NodeIdentity is an OpenStack server as its node agent sees it: the
// metadata service, read with a small typed client (gophercloud has no
// metadata client), or its config drive. OpenStack signs no identity that
// the approver could check: Evidence always fails with
// nodeid.ErrNoEvidence, and the server joins with a join ticket.
type NodeIdentity struct {
	nodeid.Ticketed
	md     *linklocal.Client
	region string
	source string
	drive  driveConfig
}

var _ nodeid.Unsigned = (*NodeIdentity)(nil)

// NewNodeIdentity reads the agent's configuration of the openstack
// backend: cfg.MetadataURL ("" is http://169.254.169.254; else
// http://host[:port]), cfg.NodeNamePolicy ("" or ServerName), and the
// cloudSettings region, metadataSource, configDrive and
// configDriveMountDir. It calls nothing and touches no disk.
func NewNodeIdentity(cfg nodeid.Config) (*NodeIdentity, error) {
	if err := cfg.CheckPolicy(Name, PolicyServerName); err != nil {
		return nil, err
	}
	n := &NodeIdentity{Ticketed: nodeid.Ticketed{Backend: Name, Machine: "an OpenStack server"},
		source: SourceAuto, drive: defaultDrive()}
	for k, v := range cfg.Settings {
		switch k {
		case SettingRegion:
			if v == "" || strings.ContainsAny(v, "/ \t\n") {
				return nil, fmt.Errorf("%s: cloudSettings: %s %q is not a region name", Name, SettingRegion, v)
			}
			n.region = v
		case SettingMetadataSource:
			switch v {
			case SourceAuto, SourceMetadataService, SourceConfigDrive:
				n.source = v
			default:
				return nil, fmt.Errorf("%s: cloudSettings: %s %q: want %s, %s or %s", Name, SettingMetadataSource, v,
					SourceAuto, SourceMetadataService, SourceConfigDrive)
			}
		case SettingConfigDrive, SettingConfigDriveMountDir:
			if !filepath.IsAbs(v) || filepath.Clean(v) != v {
				return nil, fmt.Errorf("%s: cloudSettings: %s %q is not a clean absolute path", Name, k, v)
			}
			if k == SettingConfigDrive {
				n.drive.path = v
			} else {
				n.drive.mountDir = v
			}
		default:
			return nil, fmt.Errorf("%s: cloudSettings: unknown key %q (the keys are %s, %s, %s and %s)", Name, k,
				SettingRegion, SettingMetadataSource, SettingConfigDrive, SettingConfigDriveMountDir)
		}
	}
	var err error
	if n.md, err = linklocal.Open(Name, cfg.MetadataURL, linklocal.DefaultURL, linklocal.Options{}); err != nil {
		return nil, err
	}
	return n, nil
}

// Record is what the agent reads about its server, from either source.
type Record struct {
	// Source says where it was read: the metadata service's URL, or the
	// config drive's device or directory.
	Source   string
	MetaData MetaData
	// LocalIPv4 is the EC2-compatible local-ipv4 ("" when there is none).
	LocalIPv4 string
	// NetworkData is network_data.json; nil when it was not read (a
	// local-ipv4 was there) or there is none (clouds before Liberty).
	NetworkData *NetworkData
}

// Read reads the server's record from the configured source: the metadata
// service, the config drive, or (auto) the metadata service and, when it
// cannot be reached or has no OpenStack metadata, the config drive.
func (n *NodeIdentity) Read(ctx context.Context) (Record, error) {
	switch n.source {
	case SourceMetadataService:
		return n.readService(ctx)
	case SourceConfigDrive:
		return n.readDrive()
	}
	rec, err := n.readService(ctx)
	if err == nil || !errors.Is(err, errNoService) {
		return rec, err
	}
	rec, derr := n.readDrive()
	if derr == nil {
		return rec, nil
	}
	if errors.Is(derr, errNoDrive) {
		return Record{}, fmt.Errorf("%s: neither a metadata service nor a config drive: %w; %w", Name, err, derr)
	}
	return Record{}, derr
}

// Instance reads the server's UUID and name from meta_data.json, and its
// address from local-ipv4, or else from network_data.json (NodeAddress);
// none when neither gives one. The Node name is the server name,
// lower-cased.
func (n *NodeIdentity) Instance(ctx context.Context) (nodeid.Instance, error) {
	rec, err := n.Read(ctx)
	if err != nil {
		return nodeid.Instance{}, err
	}
	md := rec.MetaData
	switch {
	case !IsServerID(md.UUID):
		return nodeid.Instance{}, fmt.Errorf("%s: %s: meta_data.json uuid %.80q is not a server id", Name, rec.Source, md.UUID)
	case md.Name == "":
		return nodeid.Instance{}, fmt.Errorf("%s: %s: meta_data.json name is empty", Name, rec.Source)
	}
	nodeName := NodeName(md.Name)
	if nodeName == "" {
		return nodeid.Instance{}, fmt.Errorf("%s: server name %.80q (meta_data.json name) is not a valid Node name (a DNS-1123 subdomain)", Name, md.Name)
	}
	ip := rec.LocalIPv4
	if ip == "" && rec.NetworkData != nil {
		if ip, err = rec.NetworkData.NodeAddress(); err != nil {
			return nodeid.Instance{}, fmt.Errorf("%s: %s: %w", Name, rec.Source, err)
		}
	}
	return nodeid.Instance{
		ID: md.UUID, Name: md.Name, NodeName: nodeName,
		ProviderID: ProviderID(n.region, md.UUID), InternalIP: ip,
	}, nil
}
