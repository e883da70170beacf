package agentid

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// smbiosLittleEndianUUID is SMBIOS 2.6 (major<<8 | minor), from which on
// the specification has the UUID's first three fields little-endian, and
// Linux (and dmidecode) print them reversed from the order of the bytes.
// VMware writes the bytes in the vSphere API's order whatever the SMBIOS
// version (as far as published guests show: testdata/README.md), so from
// 2.6 on product_uuid shows the API's UUID with those fields swapped.
const smbiosLittleEndianUUID = 0x0206

// smbiosVersion reads the SMBIOS version from sysfs's entry point; known is
// false when sysfs has none (older kernels do not export it).
func smbiosVersion(sysfs string) (ver int, known bool, err error) {
	path := filepath.Join(sysfs, smbiosEntryPointPath)
	ep, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if ver, err = SMBIOSVersion(ep); err != nil {
		return 0, false, fmt.Errorf("%s: %w", path, err)
	}
	return ver, true, nil
}

// SMBIOSVersion reads the SMBIOS version, major<<8 | minor, from an SMBIOS
// entry point structure (sysfs's smbios_entry_point), as Linux does when
// it decides how to print the UUID: the 64-bit entry point "_SM3_" (major
// and minor at offsets 7 and 8), the 32-bit one "_SM_" (offsets 6 and 7,
// with the versions some firmware misreports corrected as Linux corrects
// them: 2.31 and 2.33 are 2.3, 2.51 is 2.6), or the legacy "_DMI_" (one
// BCD byte at offset 14).
func SMBIOSVersion(ep []byte) (int, error) {
	switch {
	case bytes.HasPrefix(ep, []byte("_SM3_")) && len(ep) >= 9:
		return int(ep[7])<<8 | int(ep[8]), nil
	case bytes.HasPrefix(ep, []byte("_SM_")) && len(ep) >= 8:
		v := int(ep[6])<<8 | int(ep[7])
		switch v {
		case 0x021f, 0x0221:
			v = 0x0203
		case 0x0233:
			v = 0x0206
		}
		return v, nil
	case bytes.HasPrefix(ep, []byte("_DMI_")) && len(ep) >= 15:
		return int(ep[14]>>4)<<8 | int(ep[14]&0x0f), nil
	}
	return 0, fmt.Errorf("not an SMBIOS entry point (%d bytes, no _SM3_, _SM_ or _DMI_ anchor)", len(ep))
}
