package boot

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The container shares the host's network namespace and nothing else of
// its mount tree: /run and /tmp are its own tmpfs.
func TestSpecIsTheSafeRecipe(t *testing.T) {
	m := &Machine{Name: "m1", rootfs: "/var/lib/x/rootfs", CgroupPath: "/mooring-boot-1-m1",
		cfg: Config{Binds: []Bind{{Source: "/var/lib/x/cri", Target: "/run/containerd"}}}}
	data, err := m.spec()
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Process struct{ Args []string }
		Mounts  []struct{ Destination, Type, Source string }
		Linux   struct {
			Namespaces  []struct{ Type string }
			CgroupsPath string
		}
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == "network" {
			t.Error("the machine has a network namespace of its own; it must use the host's loopback addresses")
		}
	}
	var types []string
	for _, ns := range spec.Linux.Namespaces {
		types = append(types, ns.Type)
	}
	if !slices.Contains(types, "mount") || !slices.Contains(types, "pid") {
		t.Errorf("namespaces %v: want private mount and pid namespaces", types)
	}
	tmpfs := map[string]bool{}
	for _, mt := range spec.Mounts {
		if mt.Type == "tmpfs" {
			tmpfs[mt.Destination] = true
		}
		if mt.Type == "bind" && (mt.Source == "/run" || mt.Source == "/tmp") {
			t.Errorf("the host's %s is mounted into the machine", mt.Source)
		}
	}
	if !tmpfs["/run"] || !tmpfs["/tmp"] {
		t.Errorf("/run and /tmp must be private tmpfs: %v", tmpfs)
	}
	if spec.Process.Args[0] != "/lib/systemd/systemd" || spec.Linux.CgroupsPath != m.CgroupPath {
		t.Errorf("init %v, cgroup %q", spec.Process.Args, spec.Linux.CgroupsPath)
	}
}

// The image's changes: cloud-init's disabling file whited out, the seed,
// network configuration off, the host's services masked.
func TestImageLayout(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a whiteout (a 0/0 character device) needs root")
	}
	dir := t.TempDir()
	m := &Machine{Name: "m1", Upper: filepath.Join(dir, "layer"),
		cfg: Config{Name: "m1", InstanceID: "i-1", UserData: []byte("#cloud-config\n"), Files: []File{{Path: "/etc/x", Content: []byte("x")}}}}
	if err := m.layOutImage(); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(m.Upper, "etc/cloud/cloud-init.disabled"), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR || st.Rdev != 0 {
		t.Errorf("cloud-init.disabled is not whited out: %v %o", err, st.Mode)
	}
	meta, _ := os.ReadFile(filepath.Join(m.Upper, SeedDir, "meta-data"))
	if string(meta) != "instance-id: i-1\nlocal-hostname: m1\n" {
		t.Errorf("meta-data %q", meta)
	}
	cfg, _ := os.ReadFile(filepath.Join(m.Upper, "etc/cloud/cloud.cfg.d/90-mooring-testbed.cfg"))
	if !strings.Contains(string(cfg), "network: {config: disabled}") || !strings.Contains(string(cfg), "NoCloud") {
		t.Errorf("cloud.cfg.d: %s", cfg)
	}
	for _, u := range []string{"systemd-networkd.service", "networking.service", "ssh.service", "containerd.service"} {
		if target, err := os.Readlink(filepath.Join(m.Upper, "etc/systemd/system", u)); err != nil || target != "/dev/null" {
			t.Errorf("%s not masked: %v", u, err)
		}
	}
	if _, err := Boot(context.Background(), Config{Name: "Bad_Name", Dir: dir}); err == nil {
		t.Error("a name that is not a DNS label was accepted")
	}
	if _, err := Boot(context.Background(), Config{Name: "m2", Dir: "/tmp/m2"}); err == nil {
		t.Error("a machine under /tmp was accepted")
	}
}
