package boot

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// SeedDir is where cloud-init's NoCloud datasource finds meta-data and
// user-data on the machine's disk.
const SeedDir = "/var/lib/cloud/seed/nocloud"

// CloudConfig is the image's cloud-init setting (a file of
// /etc/cloud/cloud.cfg.d), not part of any user-data: the NoCloud seed is
// the only datasource looked for, and cloud-init leaves the network alone
// (the machine shares the host's). The locale is one the image has.
const CloudConfig = `# The test machine image: mooring's booted e2e machines (test/harness/boot).
datasource_list: [ NoCloud, None ]
network: {config: disabled}
locale: C.UTF-8
`

// maskedUnits would touch the host (its network, clock, kernel settings,
// devices, consoles) or start the host's own services (etcd, containerd,
// postgresql) in the shared network namespace; the machine never runs
// them.
var maskedUnits = []string{
	"containerd.service", "etcd.service", "etcd2.service", "postgresql.service", "ssh.service", "cron.service",
	"networking.service", "systemd-networkd.service", "systemd-networkd.socket", "systemd-networkd-wait-online.service",
	"systemd-resolved.service", "systemd-timesyncd.service", "systemd-sysctl.service", "systemd-binfmt.service",
	"systemd-modules-load.service", "systemd-pstore.service", "systemd-udevd.service", "systemd-udev-trigger.service",
	"systemd-udev-settle.service", "systemd-hwdb-update.service", "systemd-firstboot.service", "systemd-random-seed.service",
	"systemd-pcrphase.service", "systemd-pcrphase-sysinit.service", "systemd-repart.service", "e2scrub_reap.service",
	"getty@tty1.service", "getty-static.service", "console-getty.service", "serial-getty@console.service",
	"cloud-init-hotplugd.socket", "proc-sys-fs-binfmt_misc.automount",
	"apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer", "fstrim.timer", "man-db.timer",
}

// maskedGenerators would make units from the host's init scripts, fstab,
// gettys and partitions.
var maskedGenerators = []string{"systemd-sysv-generator", "systemd-fstab-generator", "systemd-getty-generator",
	"systemd-gpt-auto-generator", "postgresql-generator"}

// layOutImage writes the image's changes and the seed into the layer.
func (m *Machine) layOutImage() error {
	at := func(p string) string { return filepath.Join(m.Upper, p) }
	// The host keeps cloud-init off with /etc/cloud/cloud-init.disabled;
	// the machine's disk has no such file (an overlay whiteout: a 0/0
	// character device).
	if err := os.MkdirAll(at("/etc/cloud/cloud.cfg.d"), 0o755); err != nil {
		return err
	}
	if err := syscall.Mknod(at("/etc/cloud/cloud-init.disabled"), syscall.S_IFCHR, 0); err != nil {
		return fmt.Errorf("machine %s: white out cloud-init.disabled: %w", m.Name, err)
	}
	files := []File{
		{Path: "/etc/cloud/cloud.cfg.d/90-mooring-testbed.cfg", Content: []byte(CloudConfig)},
		// A machine-id of its own (journald keys its journal by it).
		{Path: "/etc/machine-id", Mode: 0o444, Content: []byte(randomHex(16) + "\n")},
		{Path: SeedDir + "/meta-data", Mode: 0o600, Content: []byte(fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", m.cfg.InstanceID, m.Name))},
		{Path: SeedDir + "/user-data", Mode: 0o600, Content: m.cfg.UserData},
		// A persistent journal on the machine's disk: it outlives a reboot.
		{Path: "/etc/systemd/journald.conf.d/90-mooring-testbed.conf", Content: []byte("[Journal]\nStorage=persistent\n")},
	}
	masked, err := hostEnabledUnits()
	if err != nil {
		return err
	}
	for _, u := range maskedUnits {
		masked[u] = true
	}
	for u := range masked {
		if err := symlink("/dev/null", at("/etc/systemd/system/"+u)); err != nil {
			return err
		}
	}
	for _, g := range maskedGenerators {
		if err := symlink("/dev/null", at("/etc/systemd/system-generators/"+g)); err != nil {
			return err
		}
	}
	for _, f := range append(files, m.cfg.Files...) {
		if !filepath.IsAbs(f.Path) || strings.Contains(f.Path, "..") {
			return fmt.Errorf("machine %s: image file %q: want an absolute path", m.Name, f.Path)
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := os.MkdirAll(filepath.Dir(at(f.Path)), 0o755); err != nil {
			return err
		}
		// A file of the image replaces a unit masked above (a symlink to
		// /dev/null, which writing would follow).
		if fi, err := os.Lstat(at(f.Path)); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if err := os.Remove(at(f.Path)); err != nil {
				return err
			}
		}
		if err := os.WriteFile(at(f.Path), f.Content, mode); err != nil {
			return err
		}
		if err := os.Chmod(at(f.Path), mode); err != nil {
			return err
		}
	}
	return nil
}

// hostEnabledUnits are the units enabled on the host (its
// /etc/systemd/system/*.wants), cloud-init's aside: whatever the host's
// admin runs there (a database, a container runtime, an SSH server) would
// start again in the machine, in the host's network namespace.
func hostEnabledUnits() (map[string]bool, error) {
	wants, err := filepath.Glob("/etc/systemd/system/*.wants/*")
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, w := range wants {
		name := filepath.Base(w)
		if strings.HasPrefix(name, "cloud-") && name != "cloud-init-hotplugd.socket" {
			continue
		}
		out[name] = true
	}
	return out, nil
}

func symlink(target, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.Symlink(target, path)
}
