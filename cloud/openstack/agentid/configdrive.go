package agentid

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"
)

// A config drive (Nova's config drive, version 2) is a small ISO 9660 or
// VFAT file system labelled config-2 that Nova attaches to a server. Its
// files, those read here among them, are the metadata service's:
const (
	DriveMetaData    = "openstack/latest/meta_data.json"
	DriveNetworkData = "openstack/latest/network_data.json"
	DriveUserData    = "openstack/latest/user_data"
	DriveEC2MetaData = "ec2/latest/meta-data.json"
)

// DriveLabels are the file system labels of a config drive: Nova writes
// config-2; VFAT drives made by other tools may carry it upper-cased
// (cloud-init looks for both).
var DriveLabels = []string{"config-2", "CONFIG-2"}

// DriveFilesystems are the file systems a config drive's device is
// mounted as, in this order (Nova's config_drive_format: iso9660 by
// default, or vfat).
var DriveFilesystems = []string{"iso9660", "vfat"}

// DefaultMountDir is where the agent makes the temporary mount point of a
// config drive it mounts itself.
const DefaultMountDir = "/run/mooring"

// errNoDrive: no config drive was found.
var errNoDrive = errors.New("no config drive")

// driveConfig says where the config drive is and how it is mounted.
type driveConfig struct {
	// path is the configured drive: a directory holding its files, or its
	// device; "" looks the device up by label under devRoot.
	path string
	// mountDir holds the temporary mount points.
	mountDir string
	// devRoot is /dev (a directory tree in tests).
	devRoot string
	// mount mounts a device read-only on a directory, unmount undoes it
	// (the system's; tests give their own).
	mount   func(dev, dir string) error
	unmount func(dir string) error
}

func defaultDrive() driveConfig {
	return driveConfig{mountDir: DefaultMountDir, devRoot: "/dev", mount: mountReadOnly, unmount: unmount}
}

// find looks the config drive's device up by its label: the udev link
// /dev/disk/by-label/config-2 (or CONFIG-2), resolved to the device.
func (d driveConfig) find() (string, error) {
	dir := filepath.Join(d.devRoot, "disk", "by-label")
	for _, label := range DriveLabels {
		dev, err := filepath.EvalSymlinks(filepath.Join(dir, label))
		if err == nil {
			return dev, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s: config drive %s: %w", Name, filepath.Join(dir, label), err)
		}
	}
	return "", fmt.Errorf("%w: no device labelled %s or %s in %s (mooring-agent.service's PrivateDevices= hides devices: mount the drive before the agent starts and set cloudSettings.%s to the directory)",
		errNoDrive, DriveLabels[0], DriveLabels[1], dir, SettingConfigDrive)
}

// readDrive reads the record from the config drive: from its directory
// when configDrive names one, else from its device, mounted read-only on
// a temporary directory for the time of the reading.
func (n *NodeIdentity) readDrive() (Record, error) {
	d := n.drive
	where := d.path
	if where == "" {
		dev, err := d.find()
		if err != nil {
			return Record{}, err
		}
		where = dev
	}
	fi, err := os.Stat(where)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Record{}, fmt.Errorf("%w: %s does not exist", errNoDrive, where)
	case err != nil:
		return Record{}, fmt.Errorf("%s: config drive: %w", Name, err)
	case fi.IsDir():
		return readDriveTree(where, "config drive "+where)
	}
	if err := os.MkdirAll(d.mountDir, 0o700); err != nil {
		return Record{}, fmt.Errorf("%s: config drive %s: %w", Name, where, err)
	}
	dir, err := os.MkdirTemp(d.mountDir, "config-drive-")
	if err != nil {
		return Record{}, fmt.Errorf("%s: config drive %s: %w", Name, where, err)
	}
	defer func() {
		if err := os.Remove(dir); err != nil {
			klog.InfoS("Could not remove the config drive's mount point", "dir", dir, "err", err)
		}
	}()
	if err := d.mount(where, dir); err != nil {
		return Record{}, fmt.Errorf("%s: mount config drive %s read-only on %s: %w", Name, where, dir, err)
	}
	defer func() {
		if err := d.unmount(dir); err != nil {
			klog.InfoS("Could not unmount the config drive", "device", where, "dir", dir, "err", err)
		}
	}()
	return readDriveTree(dir, "config drive "+where)
}

// readDriveTree reads a config drive's files under dir: meta_data.json
// (required), and the EC2 local-ipv4 and network_data.json when they are
// there (Nova writes both; drives before Liberty have no
// network_data.json). The files are opened within dir: a link out of the
// drive is not followed.
func readDriveTree(dir, source string) (Record, error) {
	rec := Record{Source: source}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return rec, fmt.Errorf("%s: %s: %w", Name, source, err)
	}
	defer root.Close()
	data, err := readDriveFile(root, DriveMetaData)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return rec, fmt.Errorf("%s: %s has no %s: not an OpenStack config drive", Name, source, DriveMetaData)
	case err != nil:
		return rec, fmt.Errorf("%s: %s: %w", Name, source, err)
	}
	if err := decodeJSON(data, source+" "+DriveMetaData, &rec.MetaData); err != nil {
		return rec, err
	}
	data, err = readDriveFile(root, DriveEC2MetaData)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return rec, fmt.Errorf("%s: %s: %w", Name, source, err)
	default:
		// Nova writes local-ipv4 as null on a drive of a server without a
		// fixed IPv4 address.
		var ec2 struct {
			LocalIPv4 *string `json:"local-ipv4"`
		}
		if err := decodeJSON(data, source+" "+DriveEC2MetaData, &ec2); err != nil {
			return rec, err
		}
		if ec2.LocalIPv4 != nil {
			if rec.LocalIPv4, err = parseLocalIPv4(*ec2.LocalIPv4); err != nil {
				return rec, fmt.Errorf("%s: %s %s: %w", Name, source, DriveEC2MetaData, err)
			}
		}
	}
	data, err = readDriveFile(root, DriveNetworkData)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return rec, nil
	case err != nil:
		return rec, fmt.Errorf("%s: %s: %w", Name, source, err)
	}
	rec.NetworkData = &NetworkData{}
	return rec, decodeJSON(data, source+" "+DriveNetworkData, rec.NetworkData)
}

// readDriveFile reads a regular file of the drive, at most
// maxMetadataSize bytes.
func readDriveFile(root *os.Root, name string) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxMetadataSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > maxMetadataSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxMetadataSize)
	}
	return data, nil
}
