package agentid

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// mountReadOnly mounts a config drive's block device on dir, read-only,
// without devices, set-user-id files or execution, as each of
// DriveFilesystems in turn. It needs CAP_SYS_ADMIN and the mount system
// call: root outside mooring-agent.service's sandbox, which withholds
// both.
func mountReadOnly(dev, dir string) error {
	fi, err := os.Stat(dev)
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return fmt.Errorf("%s is not a block device", dev)
	}
	var tried []string
	for _, fs := range DriveFilesystems {
		err := syscall.Mount(dev, dir, fs, syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
		if err == nil {
			return nil
		}
		if errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("%w (mounting needs CAP_SYS_ADMIN, which mooring-agent.service does not grant: mount the drive before the agent starts and set cloudSettings.%s to the directory)", err, SettingConfigDrive)
		}
		tried = append(tried, fs+": "+err.Error())
	}
	return errors.New(strings.Join(tried, "; "))
}

// unmount unmounts the drive's temporary mount point.
func unmount(dir string) error { return syscall.Unmount(dir, 0) }
