package vspheretest

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Guest is the Linux guest of a VM as its SMBIOS shows under sysfs, by the
// SMBIOS version the VM's virtual hardware announces. What a real guest
// shows (cloud/vsphere/agentid/testdata/README.md has the published dumps
// behind it):
//
//   - VMware writes the BIOS UUID's 16 bytes into SMBIOS in the order of
//     the vSphere API's config.uuid, whatever the version;
//   - the system serial number is "VMware-" and those bytes in lower-case
//     hex, space-separated, with "-" after the eighth
//     (/sys/class/dmi/id/product_serial, readable by root only);
//   - Linux prints the system UUID (product_uuid, root only too) from the
//     same bytes in lower case: in their order below SMBIOS 2.6, and with
//     the first three fields (4, 2 and 2 bytes) reversed from 2.6 on, as
//     the specification has them little-endian; so on older virtual
//     hardware (SMBIOS 2.4) product_uuid is config.uuid, and on newer
//     hardware (2.7 and later) its first three fields are swapped;
//   - the SMBIOS entry point is exported as
//     /sys/firmware/dmi/tables/smbios_entry_point: the 32-bit "_SM_"
//     structure for 2.x, the 64-bit "_SM3_" one for 3.x.
type Guest struct {
	// SMBIOS is the version the virtual hardware announces, "2.4" (older
	// virtual hardware, BIOS firmware), "2.7" or "3.1", say; "" is
	// DefaultSMBIOS.
	SMBIOS string
	// NoSerial leaves product_serial out, as a guest that cannot read it
	// shows (the agent then falls back to product_uuid).
	NoSerial bool
	// NoEntryPoint leaves the SMBIOS entry point out, as older kernels do.
	NoEntryPoint bool
}

// DefaultSMBIOS is the SMBIOS version of current virtual hardware.
const DefaultSMBIOS = "2.7"

// Guests of the virtual hardware the tests model.
var (
	// GuestModern is current virtual hardware: SMBIOS 2.7.
	GuestModern = Guest{SMBIOS: "2.7"}
	// GuestOldHardware is older virtual hardware: SMBIOS 2.4.
	GuestOldHardware = Guest{SMBIOS: "2.4"}
)

// Files are the sysfs files of a guest of BIOS UUID uuid (config.uuid),
// relative to sysfs's root.
func (g Guest) Files(uuid string) (map[string][]byte, error) {
	raw, err := hex.DecodeString(strings.ReplaceAll(uuid, "-", ""))
	if err != nil || len(raw) != 16 || len(uuid) != 36 {
		return nil, fmt.Errorf("vspheretest: %q is not a UUID", uuid)
	}
	version := g.SMBIOS
	if version == "" {
		version = DefaultSMBIOS
	}
	var major, minor byte
	if _, err := fmt.Sscanf(version, "%d.%d", &major, &minor); err != nil || major < 2 {
		return nil, fmt.Errorf("vspheretest: SMBIOS version %q: want 2.x or 3.x", version)
	}
	printed := raw
	if major > 2 || minor >= 6 {
		printed = []byte{raw[3], raw[2], raw[1], raw[0], raw[5], raw[4], raw[7], raw[6]}
		printed = append(printed, raw[8:]...)
	}
	h := hex.EncodeToString(printed)
	files := map[string][]byte{
		"class/dmi/id/product_uuid": []byte(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32] + "\n"),
	}
	if !g.NoSerial {
		pairs := make([]string, 16)
		for i, b := range raw {
			pairs[i] = fmt.Sprintf("%02x", b)
		}
		files["class/dmi/id/product_serial"] = []byte("VMware-" + strings.Join(pairs[:8], " ") + "-" + strings.Join(pairs[8:], " ") + "\n")
	}
	if !g.NoEntryPoint {
		files["firmware/dmi/tables/smbios_entry_point"] = entryPoint(major, minor)
	}
	return files, nil
}

// WriteSysfs lays out the guest's files under dir, each readable by its
// owner only, as sysfs has them for root.
func (g Guest) WriteSysfs(dir, uuid string) error {
	files, err := g.Files(uuid)
	if err != nil {
		return err
	}
	for rel, data := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o400); err != nil {
			return err
		}
	}
	return nil
}

// entryPoint is an SMBIOS entry point structure of a version as firmware
// lays it out (the table's address and size left zero): the 31-byte "_SM_"
// one, with its "_DMI_" intermediate anchor, for 2.x, and the 24-byte
// "_SM3_" one for 3.x, with their checksums.
func entryPoint(major, minor byte) []byte {
	if major >= 3 {
		ep := make([]byte, 0x18)
		copy(ep, "_SM3_")
		ep[6], ep[7], ep[8], ep[10] = 0x18, major, minor, 1
		ep[5] = checksum(ep)
		return ep
	}
	ep := make([]byte, 0x1f)
	copy(ep, "_SM_")
	ep[5], ep[6], ep[7] = 0x1f, major, minor
	copy(ep[16:], "_DMI_")
	ep[30] = major<<4 | minor
	ep[21] = checksum(ep[16:])
	ep[4] = checksum(ep)
	return ep
}

// checksum is the byte that makes b's bytes sum to zero (b's checksum byte
// still zero).
func checksum(b []byte) byte {
	var sum byte
	for _, c := range b {
		sum += c
	}
	return -sum
}
