package harness

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/agent/cloudinit"
)

// What a test, the demo or the soak prints of a machine it gave up on
// (issue 42: a machine that got its client certificate and never
// registered said nothing): the agent's unit state and STATUS and its last
// log lines, the kubelet's unit state and last log lines, and which of the
// files the kubelet needs exist, read from the machine's root.

// kubeletFiles are the paths (on the machine) of what the kubelet needs
// to register, in the order the agent writes them, and what each is.
var kubeletFiles = []struct{ path, what string }{
	{cloudinit.CAPath, "cluster CA (cloud-init)"},
	{cloudinit.TokenPath, "bootstrap token (cloud-init)"},
	{"/etc/kubernetes/bootstrap-kubelet.conf", "bootstrap kubeconfig (kubeadm's; mooring's join needs none)"},
	{filepath.Join(agent.DefaultCertDir, "kubelet-client.key.tmp"), "the join's key (removed once the pair is written)"},
	{filepath.Join(agent.DefaultCertDir, "kubelet-client-current.pem"), "client certificate pair (link)"},
	{agent.DefaultKubeconfig, "kubeconfig"},
	{agent.DefaultKubeletEnvFile, "kubelet flags (agent)"},
	{agent.DefaultKubeletConfigFile, "kubelet configuration (agent)"},
}

// FileReport says, for each file the kubelet needs, whether it exists
// under root (a machine's "/"), its size and modification time; for the
// client pair link, where it points and what the certificate in it says.
// at maps a machine path to where it is under root (nil: root joined with
// the path).
func FileReport(root string, at func(string) string) string {
	if at == nil {
		at = func(p string) string { return filepath.Join(root, p) }
	}
	var b strings.Builder
	for _, f := range kubeletFiles {
		p := at(f.path)
		st, err := os.Lstat(p)
		if err != nil {
			fmt.Fprintf(&b, "  %-48s missing (%s)\n", f.path, f.what)
			continue
		}
		line := fmt.Sprintf("  %-48s %d bytes, %s (%s)", f.path, st.Size(), st.ModTime().Format("15:04:05.000"), f.what)
		if st.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			line += " -> " + target + ": " + pairReport(p, root, target)
		}
		b.WriteString(line + "\n")
	}
	if entries, err := os.ReadDir(at(agent.DefaultCertDir)); err == nil {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		fmt.Fprintf(&b, "  %s holds: %s\n", agent.DefaultCertDir, strings.Join(names, " "))
	}
	return b.String()
}

// pairReport reads the pair a link points at: an absolute target is a
// path on the machine, so it is read under root when it is not there.
func pairReport(link, root, target string) string {
	data, err := os.ReadFile(link)
	if err != nil && filepath.IsAbs(target) && !strings.HasPrefix(target, root) {
		data, err = os.ReadFile(filepath.Join(root, target))
	}
	if err != nil {
		return "unreadable: " + err.Error()
	}
	var cert *x509.Certificate
	key := false
	for rest := data; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		switch {
		case blk.Type == "CERTIFICATE" && cert == nil:
			cert, err = x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return "certificate unparsable: " + err.Error()
			}
		case strings.HasSuffix(blk.Type, "PRIVATE KEY"):
			key = true
		}
	}
	if cert == nil {
		return "no certificate"
	}
	return fmt.Sprintf("%s, valid %s to %s, key %v", cert.Subject.CommonName,
		cert.NotBefore.Format(time.RFC3339), cert.NotAfter.Format(time.RFC3339), key)
}

// KubeletState is what systemd says of the machine's kubelet unit.
func (m *Machine) KubeletState(ctx context.Context) (AgentState, error) {
	if m.Agent == nil {
		return AgentState{}, fmt.Errorf("machine %s: its units are not started", m.Name)
	}
	return m.Agent.fleet.unitState(ctx, kubeletUnitName(m.Name))
}

// Diagnose is what the harness knows of the machine: both units' states,
// their last log lines and the kubelet's files.
func (m *Machine) Diagnose(ctx context.Context) string {
	var b strings.Builder
	fmt.Fprintf(&b, "machine %s (root %s):\n", m.Name, m.Root)
	if m.Agent != nil {
		s, err := m.Agent.State(ctx)
		fmt.Fprintf(&b, "agent unit %s: %s (%v)\n", m.Agent.Unit, s, err)
		if k, err := m.KubeletState(ctx); err == nil {
			fmt.Fprintf(&b, "kubelet unit %s: %s\n", kubeletUnitName(m.Name), k)
		} else {
			fmt.Fprintf(&b, "kubelet unit %s: %v\n", kubeletUnitName(m.Name), err)
		}
	}
	b.WriteString("files:\n" + FileReport(m.Root, nil))
	fmt.Fprintf(&b, "agent log (tail):\n%s\n", tail(filepath.Join(m.Root, "agent.log"), 20))
	fmt.Fprintf(&b, "kubelet log (tail):\n%s\n", tail(filepath.Join(m.Root, "kubelet.log"), 30))
	return b.String()
}

// Diagnose is what the machine's systemd and files say: both units'
// states, their journals' ends and the kubelet's files (read through the
// machine's root file system).
func (b *Booted) Diagnose(ctx context.Context) string {
	var s strings.Builder
	fmt.Fprintf(&s, "booted machine %s (Node %s):\n", b.Name, b.NodeName)
	if b.Machine == nil || b.PID() == 0 {
		s.WriteString("  not running\n")
		return s.String()
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, unit := range []string{"mooring-agent", "kubelet"} {
		out, err := b.Exec(ctx, "systemctl", "show", "--no-pager", "-p", "ActiveState,SubState,Result,NRestarts,ExecMainStatus,StatusText", unit)
		fmt.Fprintf(&s, "%s unit: %s %v\n", unit, strings.Join(strings.Fields(out), " "), errOrNil(err))
	}
	s.WriteString("files:\n" + FileReport(b.Path("/"), b.Path))
	for _, unit := range []string{"mooring-agent", "kubelet"} {
		out, err := b.Exec(ctx, "journalctl", "--no-pager", "-o", "short-precise", "-n", "25", "-u", unit)
		fmt.Fprintf(&s, "%s journal (tail): %v\n%s\n", unit, errOrNil(err), out)
	}
	return s.String()
}

func errOrNil(err error) string {
	if err == nil {
		return ""
	}
	return "(" + err.Error() + ")"
}
