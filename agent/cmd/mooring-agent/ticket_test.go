package main

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/mooring-dev/mooring/agent"
	"github.com/mooring-dev/mooring/agent/cloudinit"
	"github.com/mooring-dev/mooring/internal/ticket"
)

// userDataFiles renders user-data and returns its write_files by path.
func userDataFiles(t *testing.T, args ...string) map[string]string {
	t.Helper()
	stdout, stderr, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var ud struct {
		WriteFiles []struct{ Path, Permissions, Content string } `json:"write_files"`
	}
	if err := yaml.Unmarshal([]byte(stdout), &ud); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range ud.WriteFiles {
		if f.Path == cloudinit.TicketPath && f.Permissions != "0600" {
			t.Errorf("%s: mode %s, want 0600", f.Path, f.Permissions)
		}
		files[f.Path] = f.Content
	}
	return files
}

// TestUserDataWithJoinTicket: user-data carries a join ticket, issued
// elsewhere or here with the keys' directory, and the agent config names
// it.
func TestUserDataWithJoinTicket(t *testing.T) {
	keysDir := filepath.Join(t.TempDir(), "keys")
	keys := &ticket.KeySet{}
	if _, err := keys.AddKey(); err != nil {
		t.Fatal(err)
	}
	if err := keys.WriteDir(keysDir); err != nil {
		t.Fatal(err)
	}
	issued, _, err := keys.Issue("web-2", "c1", time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ticketFile := filepath.Join(t.TempDir(), "ticket")
	if err := os.WriteFile(ticketFile, []byte(issued+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := append(baseArgs("local"), "--metadata-url=http://127.41.0.5:8169", "--ca-cert-hash="+caHash, "--bootstrap-token="+token)
	for _, c := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"issued here", []string{"--ticket-name=web-1", "--ticket-cluster=c1", "--ticket-keys-dir=" + keysDir, "--ticket-lifetime=30m"}, "web-1"},
		{"issued before", []string{"--join-ticket-file=" + ticketFile}, "web-2"},
	} {
		files := userDataFiles(t, append(append([]string{}, common...), c.extra...)...)
		tok := strings.TrimSpace(files[cloudinit.TicketPath])
		claims, err := ticket.Verify([]byte(tok), keys.PublicKeys(), ticket.Expect{Cluster: "c1", Now: time.Now()})
		if err != nil || claims.Name != c.want {
			t.Fatalf("%s: ticket %q: %+v, %v", c.name, tok, claims, err)
		}
		if !strings.Contains(files[agent.DefaultConfigPath], "joinTicketFile: "+cloudinit.TicketPath) {
			t.Errorf("%s: agent config:\n%s", c.name, files[agent.DefaultConfigPath])
		}
	}
	if files := userDataFiles(t, common...); files[cloudinit.TicketPath] != "" || strings.Contains(files[agent.DefaultConfigPath], "joinTicketFile") {
		t.Errorf("a ticket without ticket flags: %v", files)
	}

	notTicket := filepath.Join(t.TempDir(), "not-a-ticket")
	if err := os.WriteFile(notTicket, []byte("abcdef.0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--join-ticket-file=" + notTicket}, "--join-ticket-file " + notTicket + ": not a join ticket"},
		{[]string{"--join-ticket-file=/nonexistent"}, "--join-ticket-file: open /nonexistent"},
		{[]string{"--join-ticket-file=" + ticketFile, "--ticket-name=web-1"}, "give one, not both"},
		{[]string{"--ticket-name=web-1", "--ticket-keys-dir=" + keysDir}, "give all three"},
		{[]string{"--ticket-name=web-1", "--ticket-cluster=c1", "--ticket-keys-dir=/nonexistent"}, "--ticket-keys-dir:"},
		{[]string{"--ticket-name=web_1!", "--ticket-cluster=c1", "--ticket-keys-dir=" + keysDir}, "--ticket-name: instance name"},
		{[]string{"--ticket-name=web-1", "--ticket-cluster=c1", "--ticket-keys-dir=" + keysDir, "--ticket-lifetime=48h"}, "lifetime 48h0m0s"},
	} {
		stdout, stderr, code := runCLI(t, append(append([]string{}, common...), c.extra...)...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q; stderr:\n%s", c.extra, code, c.want, stderr)
		}
	}
}

// TestUserDataGuestInfo: for a vSphere VM, --guestinfo prints the extra
// config keys of cloud-init's VMware datasource: the user-data (with the
// ticket and the agent config, cloud: vsphere) gzip+base64, and metadata
// naming the VM's host name (the ticket's instance) and blanking the
// user-data once read.
func TestUserDataGuestInfo(t *testing.T) {
	keysDir := filepath.Join(t.TempDir(), "keys")
	keys := &ticket.KeySet{}
	if _, err := keys.AddKey(); err != nil {
		t.Fatal(err)
	}
	if err := keys.WriteDir(keysDir); err != nil {
		t.Fatal(err)
	}
	common := append(baseArgs("vsphere"), "--ca-cert-hash="+caHash, "--bootstrap-token="+token, "--guestinfo")
	stdout, stderr, code := runCLI(t, append(common, "--ticket-name=web-1", "--ticket-cluster=c1", "--ticket-keys-dir="+keysDir)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	keysOut := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		k, v, _ := strings.Cut(line, "=")
		keysOut[k] = v
	}
	if keysOut[cloudinit.GuestInfoUserDataEncoding] != "gzip+base64" || keysOut[cloudinit.GuestInfoMetadataEncoding] != "base64" {
		t.Fatalf("keys: %v", keysOut)
	}
	md, err := base64.StdEncoding.DecodeString(keysOut[cloudinit.GuestInfoMetadata])
	if err != nil || !strings.Contains(string(md), "local-hostname: web-1") || !strings.Contains(string(md), "- userdata") {
		t.Fatalf("metadata %q, %v", md, err)
	}
	gz, err := base64.StdEncoding.DecodeString(keysOut[cloudinit.GuestInfoUserData])
	if err != nil {
		t.Fatal(err)
	}
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	ud, err := io.ReadAll(r)
	if err != nil || !strings.HasPrefix(string(ud), "#cloud-config") || !strings.Contains(string(ud), "cloud: vsphere") ||
		!strings.Contains(string(ud), cloudinit.TicketPath) {
		t.Fatalf("user-data %q, %v", ud, err)
	}
	// Without a ticket or vmName, the VM has no name to give.
	if _, stderr, code := runCLI(t, common...); code != 2 || !strings.Contains(stderr, "--guestinfo: the VM's name is needed") {
		t.Errorf("no name: exit %d\n%s", code, stderr)
	}
	withName := append(common, "--cloud-setting=vmName=db-1", "--ticket-name=web-1", "--ticket-cluster=c1", "--ticket-keys-dir="+keysDir)
	if stdout, _, code := runCLI(t, withName...); code != 0 || !strings.Contains(stdout, cloudinit.GuestInfoMetadata+"=") {
		t.Errorf("vmName: exit %d\n%s", code, stdout)
	}
}
