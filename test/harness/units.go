package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mooring-dev/mooring/systemd/units"
	"github.com/mooring-dev/mooring/test/testbed"
)

// A machine's units are mooring's shipped files (systemd/units), rendered
// with every path of a real machine moved under the machine's root and the
// unit names made the machine's own, after its Node name (machines share
// one systemd). The rendering fails when a text it replaces is not in the
// shipped file, so a change there cannot leave the test bed running
// something else. What the test bed must set differently is a drop-in of
// its own, listed below.

func agentUnitName(node string) string   { return "mooring-agent-" + node + ".service" }
func kubeletUnitName(node string) string { return "kubelet-" + node + ".service" }

// renderUnit replaces each old text of pairs (old, new, old, new, ...) in
// a shipped unit, every one of which must occur.
func renderUnit(file, shipped string, pairs ...string) (string, error) {
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(shipped, pairs[i]) {
			return "", fmt.Errorf("%s: the shipped unit no longer contains %q", file, pairs[i])
		}
	}
	return strings.NewReplacer(pairs...).Replace(shipped), nil
}

// machinePaths moves a real machine's directories under root. The longer
// paths come first: a Replacer tries its pairs in order at each position.
func machinePaths(root string) []string {
	var pairs []string
	for _, p := range []string{"/var/lib/kubelet", "/etc/kubernetes", "/etc/mooring"} {
		pairs = append(pairs, p, filepath.Join(root, p))
	}
	return pairs
}

// writeMachineUnits writes the machine's agent unit, its kubelet unit (the
// test bed's stand-in for the distribution's kubelet.service) and
// mooring's kubelet drop-in, with the test bed's drop-ins.
func writeMachineUnits(unitDir string, m *Machine, agentBin, kubeletBin string, env []string) error {
	agentName, kubeletName := agentUnitName(m.Name), kubeletUnitName(m.Name)
	agentUnit, err := renderUnit("mooring-agent.service", units.Agent, append([]string{
		"/usr/local/bin/mooring-agent --config=/etc/mooring/agent.yaml",
		// --systemd-user: the kubelet unit is in this user manager.
		agentBin + " --config=" + m.Config + " --systemd-user --v=2",
		"Before=kubelet.service", "Before=" + kubeletName,
	}, machinePaths(m.Root)...)...)
	if err != nil {
		return err
	}
	dropIn, err := renderUnit("20-mooring.conf", units.KubeletDropIn, append([]string{
		"/usr/bin/kubelet", kubeletBin,
		"mooring-agent.service", agentName,
	}, machinePaths(m.Root)...)...)
	if err != nil {
		return err
	}
	files := map[string]string{
		agentName: agentUnit,
		// The test bed's user manager cannot make paths inaccessible
		// (ProtectHome=yes uses InaccessiblePaths=, which fails there with
		// status 226); an empty tmpfs hides the homes as well. No journal
		// runs: the output goes to a file.
		agentName + ".d/50-testbed.conf": "[Service]\nProtectHome=tmpfs\nStandardOutput=append:" +
			filepath.Join(m.Root, "agent.log") + "\nStandardError=inherit\n" + environmentLines(env),
		// The distribution's kubelet.service runs the kubelet with no
		// flags; kubeadm's 10-kubeadm.conf (absent here) or an admin sets
		// $KUBELET_EXTRA_ARGS, which mooring's drop-in keeps. The test
		// bed's are the node's own settings (a configuration drop-in
		// directory) and root directory.
		//
		// BindPaths gives the machine's kubelet the machine's own
		// /var/lib/kubelet/device-plugins. The kubelet keeps its device
		// plugin registration socket there whatever --root-dir says
		// (k8s.io/kubelet's DevicePluginPath); sharing the host's, kubelets
		// that started together each emptied the directory and listened,
		// and the one that came second failed with "address already in
		// use", could not start its container manager and exited before
		// registering its Node (issue 42). A real machine has one kubelet
		// to that directory.
		//
		// No Restart= (the distribution's unit restarts the kubelet after
		// 10 s): a kubelet that exits fails the test with its log
		// (Machine.Diagnose) instead of joining 10 s late.
		kubeletName: fmt.Sprintf("[Unit]\nDescription=kubelet of machine %s (the test bed's stand-in for the distribution's kubelet.service)\n\n"+
			"[Service]\nExecStart=%s\nEnvironment=\"KUBELET_EXTRA_ARGS=--config-dir=%s --root-dir=%s --v=2\"\nBindPaths=%s:%s\nStandardOutput=append:%s\nStandardError=inherit\n",
			m.Name, kubeletBin, m.Node.ConfigDir, m.Node.RootDir, m.DevicePluginDir(), testbed.DevicePluginDir, filepath.Join(m.Root, "kubelet.log")),
		kubeletName + ".d/20-mooring.conf": dropIn,
	}
	for name, content := range files {
		path := filepath.Join(unitDir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// environmentLines are systemd Environment= lines, one a variable.
func environmentLines(env []string) string {
	var b strings.Builder
	for _, e := range env {
		fmt.Fprintf(&b, "Environment=%q\n", e)
	}
	return b.String()
}
