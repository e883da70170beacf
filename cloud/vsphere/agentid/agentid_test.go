package agentid

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mooring-dev/mooring/cloud/nodeid"
	"github.com/mooring-dev/mooring/cloud/nodeid/nodeidtest"
)

func TestNames(t *testing.T) {
	if got := ProviderID("422E4956-AD22-1139-6D72-59CC8F26BC90"); got != "vsphere://422e4956-ad22-1139-6d72-59cc8f26bc90" {
		t.Errorf("ProviderID = %s", got)
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
	// The serial number: "VMware-" and the 16 bytes in the API's order.
	for serial, want := range map[string]string{
		"VMware-42 30 bf 6a ce 71 e1 68-6c 2d 17 6e 66 d0 4a 0d\n": "4230bf6a-ce71-e168-6c2d-176e66d04a0d",
		"VMware-564D6049 9D7D 6E8B-4A41 7B2DB147ABA7":              "564d6049-9d7d-6e8b-4a41-7b2db147aba7",
	} {
		if got, err := SerialUUID(serial); err != nil || got != want {
			t.Errorf("SerialUUID(%q) = %q, %v; want %q", serial, got, err, want)
		}
	}
	for _, bad := range []string{"", "VMware-", "None", "Parallels-1A 1B CB 3B 64 66 4B 13 86 B0 86 FF 7E 2B 20 30",
		"VMware-42 30 bf 6a ce 71 e1 68-6c 2d 17 6e 66 d0 4a", "VMware-42 30 bf 6a ce 71 e1 68-6c 2d 17 6e 66 d0 4a 0d 00",
		"VMware-42 30 bf 6a ce 71 e1 68-6c 2d 17 6e 66 d0 4a zz"} {
		if got, err := SerialUUID(bad); err == nil {
			t.Errorf("SerialUUID(%q) = %q", bad, got)
		}
	}
}

// sysfs lays out product_uuid, product_serial unless serial is "", and the
// entry point unless ep is nil.
func sysfs(t *testing.T, uuid, serial string, ep []byte) string {
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
	if uuid != "" {
		write(productUUIDPath, []byte(uuid+"\n"))
	}
	if serial != "" {
		write(productSerialPath, []byte(serial+"\n"))
	}
	if ep != nil {
		write(smbiosEntryPointPath, ep)
	}
	return dir
}

func entryPoint32(major, minor byte) []byte {
	return append([]byte("_SM_\x00\x1f"), major, minor, 0, 0, 0, 0, 0, 0, 0, 0)
}

// The serial number wins whatever product_uuid and the SMBIOS version say;
// without it, product_uuid is taken in order below SMBIOS 2.6 and swapped
// back from 2.6 on and when no entry point tells the version.
func TestBIOSUUID(t *testing.T) {
	const (
		api     = "422e4956-ad22-1139-6d72-59cc8f26bc90"
		swapped = "56492E42-22AD-3911-6D72-59CC8F26BC90"
		serial  = "VMware-42 2e 49 56 ad 22 11 39-6d 72 59 cc 8f 26 bc 90"
	)
	for _, tc := range []struct {
		name         string
		uuid, serial string
		ep           []byte
		want, errSub string
	}{
		{"serial, SMBIOS 2.7 (product_uuid swapped)", swapped, serial, entryPoint32(2, 7), api, ""},
		{"serial, SMBIOS 2.4 (product_uuid in order)", api, serial, entryPoint32(2, 4), api, ""},
		{"serial, product_uuid matching in neither order", "00000000-0000-0000-0000-000000000001", serial, entryPoint32(2, 7), api, ""},
		{"serial, no product_uuid, garbage entry point", "", serial, []byte("hello"), api, ""},
		{"serial in upper case", swapped, strings.ToUpper(serial), nil, api, ""},
		{"no serial, SMBIOS 2.4", api, "", entryPoint32(2, 4), api, ""},
		{"no serial, SMBIOS 2.51 (read as 2.6)", swapped, "", entryPoint32(2, 0x33), api, ""},
		{"no serial, SMBIOS 2.7", swapped, "", entryPoint32(2, 7), api, ""},
		{"no serial, SMBIOS 3.1", swapped, "", append([]byte("_SM3_\x00\x18"), 3, 1, 0), api, ""},
		{"no serial, legacy DMI 2.1", api, "", append([]byte("_DMI_"), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x21), api, ""},
		{"no serial, no entry point (the newer order guessed)", swapped, "", nil, api, ""},
		{"a serial number not VMware's, SMBIOS 2.7", swapped, "CZ1234ABCD", entryPoint32(2, 7), api, ""},
		{"a VMware serial of 15 bytes", swapped, "VMware-42 2e 49 56 ad 22 11 39-6d 72 59 cc 8f 26 bc", entryPoint32(2, 7), api, ""},
		{"no serial, garbage entry point", swapped, "", []byte("hello"), "", "not an SMBIOS entry point"},
		{"no serial, not a UUID", "Not Settable", "", entryPoint32(2, 7), "", "not a UUID"},
		{"nothing", "", "", nil, "", "product_uuid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BIOSUUID(sysfs(t, tc.uuid, tc.serial, tc.ep))
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

// A product_serial the agent cannot read is passed over for product_uuid;
// one it may not read (it is root's) is said so when nothing else works.
func TestUnreadableSerial(t *testing.T) {
	dir := sysfs(t, "56492e42-22ad-3911-6d72-59cc8f26bc90", "", entryPoint32(2, 7))
	if err := os.Mkdir(filepath.Join(dir, productSerialPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := BIOSUUID(dir); err != nil || got != "422e4956-ad22-1139-6d72-59cc8f26bc90" {
		t.Fatalf("product_serial unreadable: got %q, %v", got, err)
	}
	if os.Geteuid() == 0 {
		t.Skip("root reads files whatever their mode")
	}
	dir = sysfs(t, "", "VMware-42 2e 49 56 ad 22 11 39-6d 72 59 cc 8f 26 bc 90", nil)
	if err := os.Chmod(filepath.Join(dir, productSerialPath), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := BIOSUUID(dir); err == nil || !strings.Contains(err.Error(), "root only") {
		t.Fatalf("no product_uuid, product_serial not readable: %v", err)
	}
}

func TestInstance(t *testing.T) {
	dir := sysfs(t, "56492E42-22AD-3911-6D72-59CC8F26BC90", "VMware-42 2e 49 56 ad 22 11 39-6d 72 59 cc 8f 26 bc 90", entryPoint32(2, 7))
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

// nodeidtest.Check: registered, Node names and refusals as every backend;
// its own refusals: another policy, any metadata URL (it reads SMBIOS),
// its settings' bad values.
func TestShared(t *testing.T) {
	nodeidtest.Check(t, nodeidtest.Spec[*NodeIdentity]{Name: Name, NodeName: NodeName, New: NewNodeIdentity, Policy: PolicyVMName,
		Refusals: map[string]nodeid.Config{
			"another policy":                 {NodeNamePolicy: "Hostname"},
			"any metadata URL":               {MetadataURL: "http://169.254.169.254"},
			"an unknown setting":             {Settings: map[string]string{"network": "1"}},
			"a VM name that is no Node name": {Settings: map[string]string{SettingVMName: "no_good"}},
			"a relative sysfs":               {Settings: map[string]string{SettingSysfs: "sys"}},
		}})
}
