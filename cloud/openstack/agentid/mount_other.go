//go:build !linux

package agentid

import "errors"

// mountReadOnly: mounting a config drive is implemented for Linux only;
// elsewhere configDrive must name the directory it is mounted on.
func mountReadOnly(dev, dir string) error {
	return errors.New("mounting a config drive is implemented on Linux only")
}

func unmount(dir string) error { return errors.New("not on Linux") }
