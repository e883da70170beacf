package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/systemd/units"
	"github.com/mooring-dev/mooring/test/testbed"
)

// TestMachineUnitsAreTheShippedOnes: a machine's units are the shipped
// files with paths and unit names changed and nothing else: every line of
// the shipped unit that names no path or unit is there as it is, no path
// of a real machine is left outside comments, and a text that left the
// shipped file fails the rendering.
func TestMachineUnitsAreTheShippedOnes(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "machines", "node-1")
	m := &Machine{Name: "node-1", Root: root, Config: filepath.Join(root, "etc/mooring/agent.yaml"),
		Node: &testbed.Node{ConfigDir: filepath.Join(root, "var/lib/kubelet/kubelet.conf.d"), RootDir: filepath.Join(root, "var/lib/kubelet/root")}}
	if err := writeMachineUnits(dir, m, "/fleet/bin/mooring-agent", "/cache/kubelet", nil); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	realPaths := []string{"/var/lib/kubelet", "/etc/kubernetes", "/etc/mooring", "/usr/local/bin/", "/usr/bin/kubelet", "kubelet.service", "mooring-agent.service"}
	for shipped, rendered := range map[string]string{
		units.Agent:         read("mooring-agent-node-1.service"),
		units.KubeletDropIn: read("kubelet-node-1.service.d/20-mooring.conf"),
	} {
		got := strings.Split(rendered, "\n")
		want := strings.Split(shipped, "\n")
		if len(got) != len(want) {
			t.Fatalf("rendered %d lines from %d", len(got), len(want))
		}
		for i, line := range want {
			names := false
			for _, p := range realPaths {
				names = names || strings.Contains(line, p)
			}
			switch {
			case !names && got[i] != line:
				t.Errorf("line %d changed: %q -> %q", i+1, line, got[i])
			case names && !strings.HasPrefix(line, "#"):
				// Every real path that is left is under the machine's root.
				for _, p := range []string{"/var/lib/kubelet", "/etc/kubernetes", "/etc/mooring", "/usr/local/bin/", "/usr/bin/kubelet"} {
					if strings.Count(got[i], p) != strings.Count(got[i], root+p) {
						t.Errorf("line %d still names a real machine's %s: %q", i+1, p, got[i])
					}
				}
			}
		}
	}
	if a := read("mooring-agent-node-1.service"); !strings.Contains(a, "ExecStart=/fleet/bin/mooring-agent --config="+m.Config+" --systemd-user") ||
		!strings.Contains(a, "ReadWritePaths="+root+"/var/lib/kubelet "+root+"/etc/kubernetes "+root+"/etc/mooring\n") ||
		!strings.Contains(a, "Before=kubelet-node-1.service\n") {
		t.Errorf("agent unit:\n%s", a)
	}
	if d := read("kubelet-node-1.service.d/20-mooring.conf"); !strings.Contains(d, "After=mooring-agent-node-1.service\n") ||
		!strings.Contains(d, "ExecStart=/cache/kubelet --config="+root+"/var/lib/kubelet/config.yaml ") {
		t.Errorf("kubelet drop-in:\n%s", d)
	}
	if _, err := renderUnit("x.service", "[Service]\nExecStart=/bin/true\n", "/usr/bin/kubelet", "/k"); err == nil || !strings.Contains(err.Error(), "no longer contains") {
		t.Errorf("a missing text: %v", err)
	}
}
