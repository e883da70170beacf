package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mooring-dev/mooring/internal/ticket"
)

var now = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

// runTicket runs `ticket args...` and returns its standard output.
func runTicket(t *testing.T, client kubernetes.Interface, args ...string) (string, error) {
	t.Helper()
	cmd := newTicketCommand(func(string) (kubernetes.Interface, error) { return client, nil }, func() time.Time { return now })
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return strings.TrimSpace(out.String()), err
}

func mustRun(t *testing.T, client kubernetes.Interface, args ...string) string {
	t.Helper()
	out, err := runTicket(t, client, args...)
	if err != nil {
		t.Fatalf("ticket %v: %v", args, err)
	}
	return out
}

// TestTicketCommandRotation: keys are added, made to sign and retired, and
// every ticket issued verifies with the keys the approver would read.
func TestTicketCommandRotation(t *testing.T) {
	for _, store := range []struct {
		name  string
		flags []string
	}{
		{"directory", []string{"--keys-dir", t.TempDir() + "/keys"}},
		{"secret", []string{"--keys-secret", "kube-system/mooring-join-ticket-keys"}},
	} {
		t.Run(store.name, func(t *testing.T) {
			client := fake.NewClientset()
			with := func(args ...string) []string { return append(args, store.flags...) }
			if _, err := runTicket(t, client, with("issue", "--name", "web-1", "--cluster", "c1")...); err == nil {
				t.Fatal("issued without keys")
			}
			first := mustRun(t, client, with("keys", "add")...)
			second := mustRun(t, client, with("keys", "add")...)
			if got := mustRun(t, client, with("keys", "list")...); got != first+"\tsigning\n"+second {
				t.Fatalf("list:\n%s", got)
			}
			old := mustRun(t, client, with("issue", "--name", "web-1", "--cluster", "c1")...)
			mustRun(t, client, with("keys", "sign", second)...)
			if _, err := runTicket(t, client, with("keys", "retire", second)...); err == nil {
				t.Fatal("retired the signing key")
			}
			fresh := mustRun(t, client, with("issue", "--name", "web-2", "--cluster", "c1", "--lifetime", "2h")...)
			keys := approverKeys(t, client, store.flags)
			for _, tok := range []string{old, fresh} {
				if _, err := ticket.Verify([]byte(tok), keys, ticket.Expect{Cluster: "c1", Now: now}); err != nil {
					t.Fatalf("during the overlap: %v", err)
				}
			}
			mustRun(t, client, with("keys", "retire", first)...)
			keys = approverKeys(t, client, store.flags)
			if _, err := ticket.Verify([]byte(old), keys, ticket.Expect{Cluster: "c1", Now: now}); err == nil {
				t.Fatal("a retired key's ticket verifies")
			}
			if c, err := ticket.Verify([]byte(fresh), keys, ticket.Expect{Cluster: "c1", Now: now}); err != nil || !c.Expiry.Equal(now.Add(2*time.Hour)) {
				t.Fatalf("fresh ticket: %+v, %v", c, err)
			}
		})
	}
}

// approverKeys reads the verifying keys as the approver does: the key set
// document of the Secret or directory.
func approverKeys(t *testing.T, client kubernetes.Interface, flags []string) map[string]*ecdsa.PublicKey {
	t.Helper()
	if flags[0] == "--keys-dir" {
		keys, err := ticket.ReadDir(flags[1])
		if err != nil {
			t.Fatal(err)
		}
		return keys.PublicKeys()
	}
	ns, name, _ := strings.Cut(flags[1], "/")
	sec, err := client.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ticket.ParsePublicKeys(sec.Data[ticket.KeysFile])
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func TestTicketCommandRefusesBadUse(t *testing.T) {
	client := fake.NewClientset()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"keys", "add"},
		{"keys", "add", "--keys-dir", dir, "--keys-secret", "a/b"},
		{"keys", "add", "--keys-secret", "no-namespace"},
		{"keys", "sign", "nope", "--keys-dir", dir},
		{"issue", "--name", "web-1", "--keys-dir", dir},
	} {
		if _, err := runTicket(t, client, args...); err == nil {
			t.Errorf("ticket %v succeeded", args)
		}
	}
	mustRun(t, client, "keys", "add", "--keys-dir", dir)
	for _, args := range [][]string{
		{"issue", "--name", "web 1", "--cluster", "c1", "--keys-dir", dir},
		{"issue", "--name", "web-1", "--cluster", "c1", "--lifetime", "48h", "--keys-dir", dir},
		{"keys", "retire", "unknown", "--keys-dir", dir},
	} {
		if _, err := runTicket(t, client, args...); err == nil {
			t.Errorf("ticket %v succeeded", args)
		}
	}
}
