package testbed

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckLoopback(t *testing.T) {
	for _, ok := range []string{"127.0.0.1", "127.1.0.3", "127.255.255.254"} {
		if err := checkLoopback(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "10.0.0.1", "192.168.1.1", "8.8.8.8", "::1", "localhost", "127.0.0.1:80"} {
		if err := checkLoopback(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestNodeAddressesAreDistinctLoopback(t *testing.T) {
	seen := map[string]bool{}
	for i := range 600 {
		a := NodeAddress(i)
		if err := checkLoopback(a); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if seen[a] {
			t.Fatalf("node %d: address %s repeats", i, a)
		}
		seen[a] = true
	}
}

func TestFreePortsAreDistinctAndBindable(t *testing.T) {
	ports, err := FreePorts("127.0.0.1", 5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d repeats", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", hostPort("127.0.0.1", p))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", p, err)
		}
		l.Close()
	}
}

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		`/plain/path`:       "/plain/path",
		`/with\040space`:    "/with space",
		`/tab\011and\134bs`: "/tab\tand\\bs",
		`/trailing\04`:      `/trailing\04`,
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCgroupMountsFound(t *testing.T) {
	mounts, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) == 0 {
		t.Skip("no cgroup hierarchy mounted on this machine")
	}
	for _, m := range mounts {
		if !strings.HasPrefix(m, "/") {
			t.Errorf("mount point %q is not absolute", m)
		}
	}
}

func TestProcessStopAndLeftovers(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sleep.log")
	// The shell's child sleep shares its process group: stop must end both.
	p, err := startProcess("sleeper", log, "/bin/sh", "-c", "sleep 300 & sleep 300")
	if err != nil {
		t.Fatal(err)
	}
	if err := stopAll([]*process{p}, nil); err != nil {
		t.Fatal(err)
	}
	if done, _ := p.exited(); !done {
		t.Fatal("process still running after stop")
	}
	if left := processGroupsAlive(map[int]string{p.pid(): "sleeper"}); len(left) > 0 {
		t.Fatalf("left after stop: %v", left)
	}
	if _, err := os.Stat(log); err != nil {
		t.Errorf("log file: %v", err)
	}
}
