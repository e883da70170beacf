package cloudinit

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// cloud-init's own VMware datasource decodes what GuestInfo writes: its
// environment variable transport (VMX_GUESTINFO_*) takes the same keys and
// encodings as the guestinfo one.
func TestGuestInfoDecodesWithCloudInit(t *testing.T) {
	ci, err := exec.LookPath("cloud-init")
	if err != nil {
		t.Skip("cloud-init is not installed (make deps installs it)")
	}
	// cloud-init's own interpreter (its #! line), which has its modules.
	head, err := os.ReadFile(ci)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(strings.TrimPrefix(string(head), "#!"), "\n")
	python := strings.Fields(line)[0]
	userData := "#cloud-config\nwrite_files:\n- path: /etc/mooring/join-ticket\n  content: a.b.c\n"
	out, err := GuestInfo([]byte(userData), "web-1")
	if err != nil {
		t.Fatal(err)
	}
	env := os.Environ()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %q", line)
		}
		// guestinfo.userdata.encoding -> VMX_GUESTINFO_USERDATA_ENCODING
		env = append(env, "VMX_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))+"="+v)
	}
	const script = `
from cloudinit.sources.DataSourceVMware import guestinfo_envvar, load_json_or_yaml
import sys
md = load_json_or_yaml(guestinfo_envvar("metadata"))
sys.stdout.write(md["local-hostname"] + "|" + ",".join(md["redact"]) + "|" + guestinfo_envvar("userdata"))
`
	cmd := exec.Command(python, "-c", script)
	cmd.Env = env
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cloud-init's decoder: %v\n%s", err, got)
	}
	if want := "web-1|userdata|" + userData; string(got) != want {
		t.Fatalf("cloud-init read %q, want %q", got, want)
	}
	if _, err := GuestInfo([]byte(userData), "web_1"); err == nil {
		t.Fatal("a host name that is no DNS name was accepted")
	}
}
