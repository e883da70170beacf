package agentid

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
)

func TestRegistered(t *testing.T) {
	if _, err := nodeid.New(Name, nodeid.Config{}); err != nil {
		t.Fatalf("%s: %v (registered: %v)", Name, err, nodeid.Backends())
	}
}

func TestNames(t *testing.T) {
	if got := ProviderID("422E4956-AD22-1139-6D72-59CC8F26BC90"); got != "vsphere://422e4956-ad22-1139-6d72-59cc8f26bc90" {
		t.Errorf("ProviderID = %s", got)
	}
	for name, want := range map[string]string{
		"Node-1": "node-1", "web.example.com": "web.example.com", "under_score": "", "": "", "-dash": "",
	} {
		if got := NodeName(name); got != want {
			t.Errorf("NodeName(%q) = %q, want %q", name, got, want)
		}
	}
	// The upstream CCM's example pair: SMBIOS order and vSphere API order.
	if got := SwapUUID("56492e42-22ad-3911-6d72-59cc8f26bc90"); got != "422e4956-ad22-1139-6d72-59cc8f26bc90" {
		t.Errorf("SwapUUID = %s", got)
	}
	for _, bad := range []string{"", "56492e42-22ad-3911-6d72-59cc8f26bc9", "56492e42_22ad-3911-6d72-59cc8f26bc90", "56492e42-22ad-3911-6d72-59cc8f26bcxx"} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("ParseUUID(%q) accepted", bad)
		}
	}
}

// sysfs lays out product_uuid and, unless ep is nil, the entry point.
func sysfs(t *testing.T, uuid string, ep []byte) string {
	t.Helper()
	dir := t.TempDir()
	write := func(rel string, data []byte) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	write(productUUIDPath, []byte(uuid+"\n"))
	if ep != nil {
		write(smbiosEntryPointPath, ep)
	}
	return dir
}

func entryPoint32(major, minor byte) []byte {
	return append([]byte("_SM_\x00\x1f"), major, minor, 0, 0, 0, 0, 0, 0, 0, 0)
}

func TestBIOSUUID(t *testing.T) {
	const smbiosOrder, apiOrder = "56492E42-22AD-3911-6D72-59CC8F26BC90", "422e4956-ad22-1139-6d72-59cc8f26bc90"
	for _, tc := range []struct {
		name   string
		uuid   string
		ep     []byte
		want   string
		errSub string
	}{
		{"SMBIOS 2.4 (old virtual hardware): swapped", smbiosOrder, entryPoint32(2, 4), apiOrder, ""},
		{"SMBIOS 2.51, read as 2.6", apiOrder, entryPoint32(2, 0x33), apiOrder, ""},
		{"SMBIOS 2.7", apiOrder, entryPoint32(2, 7), apiOrder, ""},
		{"SMBIOS 3.1", apiOrder, append([]byte("_SM3_\x00\x18"), 3, 1, 0), apiOrder, ""},
		{"legacy DMI 2.1", smbiosOrder, append([]byte("_DMI_"), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x21), apiOrder, ""},
		{"no entry point", apiOrder, nil, apiOrder, ""},
		{"garbage entry point", apiOrder, []byte("hello"), "", "not an SMBIOS entry point"},
		{"not a UUID", "Not Settable", entryPoint32(2, 7), "", "not a UUID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BIOSUUID(sysfs(t, tc.uuid, tc.ep))
			if tc.errSub != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errSub) {
					t.Fatalf("got %q, %v; want an error with %q", got, err, tc.errSub)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestInstance(t *testing.T) {
	dir := sysfs(t, "422E4956-AD22-1139-6D72-59CC8F26BC90", entryPoint32(2, 7))
	id, err := NewNodeIdentity(nodeid.Config{Settings: map[string]string{SettingVMName: "Web-1", SettingSysfs: dir}})
	if err != nil {
		t.Fatal(err)
	}
	in, err := id.Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != "422e4956-ad22-1139-6d72-59cc8f26bc90" || in.ProviderID != "vsphere://"+in.ID || in.Name != "Web-1" || in.NodeName != "web-1" {
		t.Fatalf("%+v", in)
	}
	// Without vmName: the hostname.
	id, _ = NewNodeIdentity(nodeid.Config{Settings: map[string]string{SettingSysfs: dir}})
	id.hostname = func() (string, error) { return "db-2.", nil }
	if in, err := id.Instance(context.Background()); err != nil || in.NodeName != "db-2" {
		t.Fatalf("%+v %v", in, err)
	}
	id.hostname = func() (string, error) { return "bad_name", nil }
	if _, err := id.Instance(context.Background()); err == nil {
		t.Fatal("a hostname that is no Node name was accepted")
	}
	if _, err := id.Evidence(context.Background(), "x"); !errors.Is(err, nodeid.ErrNoEvidence) {
		t.Fatalf("Evidence: %v", err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []nodeid.Config{
		{NodeNamePolicy: "Hostname"},
		{MetadataURL: "http://169.254.169.254"},
		{Settings: map[string]string{"network": "1"}},
		{Settings: map[string]string{SettingVMName: "no_good"}},
		{Settings: map[string]string{SettingSysfs: "sys"}},
	} {
		if _, err := NewNodeIdentity(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
