package agentid

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// publishedGuest is what a public dump of a real VMware guest shows
// (testdata/README.md names each source).
type publishedGuest struct {
	// smbios is the SMBIOS version line's major and minor, when the dump
	// has one.
	smbios         []byte
	serial, system string
}

var (
	smbiosLine = regexp.MustCompile(`^SMBIOS (\d+)\.(\d+)(?:\.\d+)? present\.`)
	catLine    = regexp.MustCompile(`cat /sys/class/dmi/id/(product_uuid|product_serial)\s*$`)
)

// readPublished reads a testdata excerpt: dmidecode's lines (the SMBIOS
// version, "Serial Number:", "UUID:") or a shell transcript of cat on
// product_uuid and product_serial.
func readPublished(t *testing.T, name string) publishedGuest {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var g publishedGuest
	next := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case next != "" && trimmed != "":
			if next == "product_uuid" {
				g.system = trimmed
			} else {
				g.serial = trimmed
			}
			next = ""
		case catLine.MatchString(line):
			next = catLine.FindStringSubmatch(line)[1]
		case smbiosLine.MatchString(line):
			m := smbiosLine.FindStringSubmatch(line)
			g.smbios = []byte{m[1][0] - '0', m[2][0] - '0'}
		case strings.HasPrefix(trimmed, "Serial Number: "):
			g.serial = strings.TrimPrefix(trimmed, "Serial Number: ")
		case strings.HasPrefix(trimmed, "UUID: "):
			g.system = strings.TrimPrefix(trimmed, "UUID: ")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if g.serial == "" || g.system == "" {
		t.Fatalf("%s: no serial number or UUID read", name)
	}
	return g
}

// readKind reads the upstream CCM's kind node files (whole files).
func readKind(t *testing.T, node string) publishedGuest {
	t.Helper()
	read := func(what string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "cloud-provider-vsphere", node+"-product-"+what+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return publishedGuest{serial: read("serial"), system: read("uuid")}
}

// sysfsOf lays out the guest's sysfs: product_uuid, product_serial unless
// withoutSerial, the SMBIOS entry point when the dump gave the version.
func (g publishedGuest) sysfsOf(t *testing.T, withoutSerial bool) string {
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
	write(productUUIDPath, []byte(g.system+"\n"))
	if !withoutSerial {
		write(productSerialPath, []byte(g.serial+"\n"))
	}
	if g.smbios != nil {
		// The 32-bit entry point, as VMware's SMBIOS 2.x firmware has it.
		ep := make([]byte, 0x1f)
		copy(ep, "_SM_")
		ep[5], ep[6], ep[7] = 0x1f, g.smbios[0], g.smbios[1]
		copy(ep[16:], "_DMI_")
		write(smbiosEntryPointPath, ep)
	}
	return dir
}

// TestPublishedGuests derives the BIOS UUID from what real VMware guests
// show, as published (testdata/README.md), and checks it is their VM's
// config.uuid: the serial number's bytes, which is what vCenter knows the
// VM by (the upstream vSphere provider reads it for that reason). With the
// serial number the agent reads that; without it (unreadable), it falls
// back to product_uuid, in order below SMBIOS 2.6 and swapped back from
// 2.6 on or when the version is not known.
func TestPublishedGuests(t *testing.T) {
	for _, tc := range []struct {
		name  string
		guest func(t *testing.T) publishedGuest
		// want is the VM's config.uuid: the serial number's bytes.
		want string
		// fallback is what the agent derives without the serial number.
		fallback string
	}{
		// SMBIOS 2.4 (older virtual hardware): product_uuid is config.uuid.
		{"glpi-agent vmware-esx (dmidecode 2.10, SMBIOS 2.4)", file("glpi-agent_vmware-esx.txt"),
			"4230bf6a-ce71-e168-6c2d-176e66d04a0d", "4230bf6a-ce71-e168-6c2d-176e66d04a0d"},
		{"glpi-agent rhel-6.2-vmware-2vcpus (dmidecode 2.11, SMBIOS 2.4)", file("glpi-agent_rhel-6.2-vmware-2vcpus.txt"),
			"421bbabd-5f4e-af7e-3a56-b5af1ce1a977", "421bbabd-5f4e-af7e-3a56-b5af1ce1a977"},
		{"glpi-agent rhel-6.3-esx-1vcpu (dmidecode 2.11, SMBIOS 2.4)", file("glpi-agent_rhel-6.3-esx-1vcpu.txt"),
			"564d6049-9d7d-6e8b-4a41-7b2db147aba7", "564d6049-9d7d-6e8b-4a41-7b2db147aba7"},
		{"insights-core DMIDECODE_V (dmidecode 2.12, SMBIOS 2.4)", file("insights-core_test_dmidecode_DMIDECODE_V.txt"),
			"4210e913-1e11-e221-13c5-c81f11427ccb", "4210e913-1e11-e221-13c5-c81f11427ccb"},
		{"vikas99341/Ansible RHEL 7.2 (dmidecode 2.12-dmifs, SMBIOS 2.4)", file("vikas99341-Ansible_prevalidation-AnsibleClient2.txt"),
			"564d82f6-bfc4-d81a-82ad-5935a9a71504", "564d82f6-bfc4-d81a-82ad-5935a9a71504"},
		{"yumaojun03/dmidecode#22 (dmidecode 3.2, SMBIOS 2.4)", file("yumaojun03-dmidecode_issue-22.txt"),
			"564da6d2-1706-6343-dc2d-9959b533a7b3", "564da6d2-1706-6343-dc2d-9959b533a7b3"},
		// Virtual hardware 13 and the upstream CCM's kind nodes, no SMBIOS
		// version shown: product_uuid is swapped; the fallback swaps it back.
		{"kubernetes#59519 vSphere 6.5 compatible VM (sysfs)", file("kubernetes_pr-59519.txt"),
			"420e3f74-ea84-f9a2-7736-6106bb5dbf6b", "420e3f74-ea84-f9a2-7736-6106bb5dbf6b"},
		{"netbox-agent#99 VMware Virtual Platform (dmidecode)", file("netbox-agent_issue-99.txt"),
			"42174c3e-ec05-e323-fd4b-7d0e7e9bbcd0", "42174c3e-ec05-e323-fd4b-7d0e7e9bbcd0"},
		{"cloud-provider-vsphere test/kind c01", kind("c01"),
			"fe19f404-8886-6640-a16d-cbc4193d5b93", "fe19f404-8886-6640-a16d-cbc4193d5b93"},
		{"cloud-provider-vsphere test/kind w01", kind("w01"),
			"fe19f404-8886-6640-a16d-cbc4193d5b94", "fe19f404-8886-6640-a16d-cbc4193d5b94"},
		// A guest whose product_uuid is in order, no SMBIOS version shown:
		// without the serial number the agent guesses the newer order and
		// presents the swapped UUID, which the CCM finds the VM by too when
		// no other VM has it (cloud/vsphere TestProviderIDInEitherByteOrder).
		{"kubernetes#58927 node-1 (sysfs)", file("kubernetes_issue-58927.txt"),
			"421c2ff3-c92f-05e6-16ef-e07d97394978", "f32f1c42-2fc9-e605-16ef-e07d97394978"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.guest(t)
			if got, err := BIOSUUID(g.sysfsOf(t, false)); err != nil || got != tc.want {
				t.Errorf("with product_serial %q and product_uuid %q: BIOS UUID %q, %v; want %q (vCenter's config.uuid)", g.serial, g.system, got, err, tc.want)
			}
			if got, err := BIOSUUID(g.sysfsOf(t, true)); err != nil || got != tc.fallback {
				t.Errorf("product_uuid %q, SMBIOS %v, no product_serial: BIOS UUID %q, %v; want %q", g.system, g.smbios, got, err, tc.fallback)
			}
		})
	}
}

func file(name string) func(*testing.T) publishedGuest {
	return func(t *testing.T) publishedGuest { return readPublished(t, name) }
}

func kind(node string) func(*testing.T) publishedGuest {
	return func(t *testing.T) publishedGuest { return readKind(t, node) }
}
