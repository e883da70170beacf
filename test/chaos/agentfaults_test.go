package chaos

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/test/harness"
)

// The machines of scenario 6, each with its own fault.
const (
	faultMetadata = "metadata-down"  // the metadata service refuses at boot
	faultAPI      = "apiserver-down" // the apiserver cannot be reached at boot
	faultAhead    = "clock-ahead"    // the agent's clock is 4 minutes ahead
	faultBehind   = "clock-behind"   // and 4 minutes behind
	faultDisk     = "disk-full"      // the credentials' disk is full
)

// TestAgentFaults (scenario 6): real machines (mooring-agent and kubelet
// under systemd, the shipped units) boot into a fault each: the metadata
// service unreachable, the apiserver unreachable (a gate in front of each
// refuses connections), the agent's clock 4 minutes ahead or behind (an
// agent built with -tags chaosclock), or the disk of the kubelet's
// credentials full (a small tmpfs, filled). The faults last `fault`; the
// clocks stay skewed. Invariants: while its fault lasts, each agent keeps
// running and its systemd STATUS names the fault; the full disk holds no
// half credential (the current pair and the kubeconfig are absent or whole)
// and the kubelet is not started; once the faults end, every agent
// finishes on its own (exit 0, no restart by systemd), every Node is Ready,
// initialized and serving, with one client CSR per machine; a second boot
// of every machine (the agent run again) keeps its credentials and files
// no CSR, skewed clocks included.
func TestAgentFaults(t *testing.T) {
	o := report(t, "6. agent faults on the machine")
	ctx, cancel := context.WithTimeout(context.Background(), span(8*time.Minute, 20*time.Minute))
	defer cancel()
	fault := span(20*time.Second, 2*time.Minute)
	w := newWorld(t, ctx)
	names := []string{faultMetadata, faultAPI, faultAhead, faultBehind, faultDisk}
	gates := map[string]*harness.Gate{}
	var filler string
	prepare := func(m *harness.Machine) error {
		switch m.Name {
		case faultMetadata, faultAPI:
			from, target := m.Instance.MetadataURL, strings.TrimPrefix(m.Instance.MetadataURL, "http://")
			if m.Name == faultAPI {
				from, target = w.c.URL, strings.TrimPrefix(w.c.URL, "https://")
			}
			g, err := harness.NewGate(target, false)
			if err != nil {
				return err
			}
			gates[m.Name] = g
			t.Cleanup(g.Close)
			return replaceInFile(m.Config, from+"\n", strings.Replace(from, target, g.Addr, 1)+"\n")
		case faultDisk:
			// 16 pages, 15 taken: the CSR key (one page) still fits, the
			// certificate and key pair does not.
			dir := filepath.Join(m.Root, "var", "lib", "kubelet", "pki")
			if err := m.MountTmpfs(dir, 64<<10); err != nil {
				return err
			}
			filler = filepath.Join(dir, "filler")
			return os.WriteFile(filler, make([]byte, 60<<10), 0o600)
		}
		return nil
	}
	bootstrap := time.Now()
	fleet := harness.StartFleet(ctx, t, w.c, w.lc, harness.FleetOptions{
		Names: names, Cluster: chaosCluster, AgentBin: bin(t, "mooring-agent-chaosclock"), Prepare: prepare,
		AgentEnvironment: func(name string) []string {
			switch name {
			case faultAhead:
				return []string{"MOORING_AGENT_CLOCK_OFFSET=4m"}
			case faultBehind:
				return []string{"MOORING_AGENT_CLOCK_OFFSET=-4m"}
			}
			return nil
		},
	})
	machine := map[string]*harness.Machine{}
	for _, m := range fleet.Machines {
		machine[m.Name] = m
	}

	// During the faults: each faulty agent says what is wrong and keeps
	// going; the full disk holds no half credential.
	want := map[string]string{
		faultMetadata: "instance metadata failed, retrying",
		faultAPI:      "certificate request failed, retrying",
		faultDisk:     "no space left on device",
	}
	statuses := watchStatuses(ctx, t, fleet, fault)
	for name, part := range want {
		t.Logf("%s: STATUS during the fault: %q", name, statuses[name])
		if !slices.ContainsFunc(statuses[name], func(s string) bool { return strings.Contains(s, part) }) {
			t.Errorf("%s: no STATUS with %q during its fault; seen: %q", name, part, statuses[name])
		}
		if s, err := machine[name].Agent.State(ctx); err != nil || s.Exited || s.NRestarts != 0 {
			t.Errorf("%s: the agent stopped during its fault: %v, %v", name, s, err)
		}
	}
	o.check("while its fault lasted (%v), each agent kept running and its STATUS named the fault", fault)
	disk := machine[faultDisk]
	if err := noHalfCredentials(disk.Node.CertDir, disk.Node.Kubeconfig); err != nil {
		t.Error(err)
	}
	if s, err := disk.Agent.State(ctx); err != nil || s.Exited {
		t.Errorf("%s: the agent finished (and so started the kubelet) on a full disk: %v, %v", faultDisk, s, err)
	}
	o.check("the full disk held no half credential (the current pair and the kubeconfig absent or whole) and the agent did not finish there")

	// The faults end.
	ended := time.Now()
	for _, g := range gates {
		if err := g.Open(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	done := map[string]time.Time{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range fleet.Machines {
		wg.Go(func() {
			code, err := m.Agent.Wait(span(4*time.Minute, 8*time.Minute))
			if err != nil || code != 0 {
				t.Errorf("agent of %s: exit %d, %v\n%s", m.Name, code, err, m.Agent.LogTail(20))
				return
			}
			s, err := m.Agent.State(ctx)
			if err != nil || s.ExitedAt.IsZero() {
				t.Errorf("agent of %s: no exit time: %v, %v", m.Name, s, err)
				return
			}
			mu.Lock()
			done[m.Name] = s.ExitedAt
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, m := range fleet.Machines {
		if s, err := m.Agent.State(ctx); err != nil || s.NRestarts != 0 {
			t.Errorf("%s: systemd restarted the agent: %v, %v", m.Name, s, err)
		}
	}
	o.check("once the faults ended, every agent finished on its own (exit 0, no restart by systemd)")
	w.waitReadyServing(t, ctx, names)
	for _, name := range names {
		if name == faultAhead || name == faultBehind {
			o.figure(t, "agent done: "+name, "%.1f s after boot (the skew lasts)", done[name].Sub(bootstrap).Seconds())
			continue
		}
		o.figure(t, "agent done: "+name, "%.1f s after its fault ended", max(0, done[name].Sub(ended)).Seconds())
	}
	for _, name := range []string{faultAhead, faultBehind} {
		if data, err := os.ReadFile(machine[name].Agent.LogFile); err != nil || !strings.Contains(string(data), "the agent's clock is skewed") {
			t.Errorf("%s: the agent does not say its clock is skewed (%v)", name, err)
		}
	}
	o.check("the skewed agents ran with their clocks 4 minutes ahead and behind (their logs say so)")
	o.figure(t, "every Node Ready, initialized and serving", "%.1f s after the faults ended (%.1f s after boot)",
		time.Since(ended).Seconds(), time.Since(bootstrap).Seconds())
	if err := noHalfCredentials(disk.Node.CertDir, disk.Node.Kubeconfig); err != nil {
		t.Error(err)
	}
	clientCSRs := func() map[string]int {
		l, err := w.c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, csr := range l.Items {
			if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
				continue
			}
			if harness.Condition(&csr, certificatesv1.CertificateApproved) == nil || len(csr.Status.Conditions) != 1 {
				t.Errorf("client CSR %s: %+v, want approved once", csr.Name, csr.Status.Conditions)
			}
			per[strings.TrimPrefix(csrSubject(t, csr.Spec.Request), "system:node:")]++
		}
		return per
	}
	before := clientCSRs()
	for _, name := range names {
		if before[name] != 1 {
			t.Errorf("%s: %d client CSRs, want 1", name, before[name])
		}
	}
	o.check("one client CSR per machine, each approved once")

	// A second boot: each agent runs again and keeps its credentials, the
	// skewed clocks included.
	for _, m := range fleet.Machines {
		if err := m.Agent.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range fleet.Machines {
		harness.WaitUntil(ctx, t, m.Name+": the second run keeps its credentials", func() (bool, error) {
			data, err := os.ReadFile(m.Agent.LogFile)
			return strings.Contains(string(data), "Kubelet credentials are valid; skipping the join"), err
		})
		if code, err := m.Agent.Wait(time.Minute); err != nil || code != 0 {
			t.Errorf("agent of %s, second run: exit %d, %v", m.Name, code, err)
		}
	}
	if after := clientCSRs(); !maps.Equal(after, before) {
		t.Errorf("client CSRs per machine after a second boot: %v, before: %v", after, before)
	}
	o.check("a second boot of every machine kept its credentials and filed no CSR (clocks 4 minutes ahead and behind included)")
}

// watchStatuses polls every machine's agent STATUS for d and returns the
// distinct texts each showed, in order.
func watchStatuses(ctx context.Context, t *testing.T, f *harness.Fleet, d time.Duration) map[string][]string {
	t.Helper()
	seen := map[string][]string{}
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for _, m := range f.Machines {
			s, err := m.Agent.State(ctx)
			if err == nil && s.StatusText != "" && !slices.Contains(seen[m.Name], s.StatusText) {
				seen[m.Name] = append(seen[m.Name], s.StatusText)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	return seen
}

// noHalfCredentials checks that the kubelet's current pair and kubeconfig
// are either absent or whole, and that every pair file in dir parses.
func noHalfCredentials(dir, kubeconfig string) error {
	files, err := filepath.Glob(filepath.Join(dir, "kubelet-client-*.pem"))
	if err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue // a dangling link is no credential
		}
		if err != nil {
			return err
		}
		if err := wholePair(data); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	if data, err := os.ReadFile(kubeconfig); err == nil && !strings.Contains(string(data), "client-certificate:") {
		return fmt.Errorf("%s is not a whole kubeconfig:\n%s", kubeconfig, data)
	}
	return nil
}

// wholePair checks a PEM file holds a certificate and a private key.
func wholePair(data []byte) error {
	var cert, key bool
	for rest := data; ; {
		b, r := pem.Decode(rest)
		if b == nil {
			break
		}
		rest = r
		switch {
		case b.Type == "CERTIFICATE":
			if _, err := x509.ParseCertificate(b.Bytes); err != nil {
				return err
			}
			cert = true
		case strings.HasSuffix(b.Type, "PRIVATE KEY"):
			key = true
		}
	}
	if !cert || !key {
		return fmt.Errorf("not a whole pair (certificate %v, key %v)", cert, key)
	}
	return nil
}

// csrSubject is the common name a CSR asks for.
func csrSubject(t *testing.T, request []byte) string {
	t.Helper()
	b, _ := pem.Decode(request)
	if b == nil {
		t.Fatal("a CSR without a PEM block")
	}
	req, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return req.Subject.CommonName
}

// replaceInFile replaces old (which must occur) with new in the file.
func replaceInFile(path, old, new string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !strings.Contains(string(data), old) {
		return fmt.Errorf("%s has no %q", path, old)
	}
	return os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o600)
}
