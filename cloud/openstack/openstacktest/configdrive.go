package openstacktest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// DriveOptions shape a config drive WriteConfigDrive writes.
type DriveOptions struct {
	// WithoutEC2 leaves out the EC2-style ec2/latest/meta-data.json (and
	// its local-ipv4), as on drives whose cloud skips those versions
	// (config_drive_skip_versions) or made by other tools: the address is
	// then only in network_data.json.
	WithoutEC2 bool
}

// WriteConfigDrive writes the server's config drive into dir, as Nova lays
// it out (version 2, its latest documents only): openstack/latest/
// meta_data.json, network_data.json, vendor_data.json and
// vendor_data2.json (empty), user_data when the server has user data, and
// ec2/latest/meta-data.json (local-ipv4 the first fixed IPv4 address, null
// when there is none) and ec2/latest/user-data. dir is what the drive's
// file system holds once mounted; files are 0644, as on a mounted ISO
// 9660 drive. The drive is written once: later changes to the server are
// not on it, as with Nova, which builds the drive when the server boots.
func (c *Cloud) WriteConfigDrive(id, dir string, opts DriveOptions) error {
	s, ok := c.Get(id)
	if !ok {
		return fmt.Errorf("openstacktest: no server %s", id)
	}
	files := map[string]any{
		"openstack/latest/meta_data.json":    metaData(s),
		"openstack/latest/network_data.json": networkData(s),
		"openstack/latest/vendor_data.json":  map[string]any{},
		"openstack/latest/vendor_data2.json": map[string]any{},
	}
	if !opts.WithoutEC2 {
		var local any
		if a := localIPv4(s); a != "" {
			local = a
		}
		files["ec2/latest/meta-data.json"] = map[string]any{
			"ami-id": "ami-00000001", "ami-launch-index": 0, "ami-manifest-path": "FIXME", "hostname": hostname(s.Name) + ".novalocal",
			"instance-id": fmt.Sprintf("i-%08x", s.serial), "local-ipv4": local, "reservation-id": "r-" + s.ID[24:32], "security-groups": []string{"default"},
		}
	}
	for name, doc := range files {
		data, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		if err := writeDriveFile(dir, name, data); err != nil {
			return err
		}
	}
	if s.UserData != "" {
		if err := writeDriveFile(dir, "openstack/latest/user_data", []byte(s.UserData)); err != nil {
			return err
		}
		if !opts.WithoutEC2 {
			if err := writeDriveFile(dir, "ec2/latest/user-data", []byte(s.UserData)); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeDriveFile(dir, name string, data []byte) error {
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("openstacktest: config drive: %w", err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return fmt.Errorf("openstacktest: config drive: %w", err)
	}
	return nil
}
