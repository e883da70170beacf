package openstacktest

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// Time layouts of the server object: created and updated as Nova writes
// them, and the OS-SRV-USG timestamps (no zone).
const (
	createdLayout  = "2006-01-02T15:04:05Z"
	launchedLayout = "2006-01-02T15:04:05.000000"
)

// vmStates are a status's OS-EXT-STS:vm_state and power_state (Nova's
// power states: 0 NOSTATE, 1 RUNNING, 3 PAUSED, 4 SHUTDOWN, 7 SUSPENDED).
var vmStates = map[string]struct {
	vm    string
	power int
}{
	"ACTIVE": {"active", 1}, "BUILD": {"building", 0}, "SHUTOFF": {"stopped", 4}, "PAUSED": {"paused", 3},
	"SUSPENDED": {"suspended", 7}, "SOFT_DELETED": {"soft-delete", 4}, "ERROR": {"error", 0},
	"SHELVED": {"shelved", 4}, "SHELVED_OFFLOADED": {"shelved_offloaded", 0}, "RESCUE": {"rescued", 1},
	"REBOOT": {"active", 1}, "HARD_REBOOT": {"active", 1}, "MIGRATING": {"active", 1}, "RESIZE": {"active", 1},
	"VERIFY_RESIZE": {"resized", 1}, "REBUILD": {"active", 1}, "PASSWORD": {"active", 1},
}

// flavorIDs are the ids of the flavors Put knows; others get one made of
// their name.
var flavorIDs = map[string]string{"m1.tiny": "1", "m1.small": "2", "m1.medium": "3", "m1.large": "4", "m1.xlarge": "5"}

func flavorID(name string) string {
	if id, ok := flavorIDs[name]; ok {
		return id
	}
	return "flavor-" + name
}

// mac is a stable MAC address of a server's i-th port.
func mac(id string, i int) string {
	h := strings.ReplaceAll(id, "-", "")
	if len(h) < 8 {
		h = fmt.Sprintf("%08s", h)
	}
	return fmt.Sprintf("fa:16:3e:%s:%s:%02x", h[0:2], h[2:4], byte(i))
}

// wire is a server as Nova shows it at microversion mv, in a listing
// (servers/detail) or alone (show: GET /servers/{id}, which from 2.71 adds
// server_groups, as Nova's detail view does not); base is the compute
// endpoint, for links.
func wire(s Server, mv microversion, base string, show bool) map[string]any {
	st, ok := vmStates[s.Status]
	if !ok {
		st.vm, st.power = strings.ToLower(s.Status), 0
	}
	addresses := map[string][]map[string]any{}
	for i, a := range s.Addresses {
		ip, _ := netip.ParseAddr(a.Addr)
		version := 4
		if ip.Is6() && !ip.Is4In6() {
			version = 6
		}
		typ := "fixed"
		if a.Floating {
			typ = "floating"
		}
		addresses[a.Network] = append(addresses[a.Network], map[string]any{
			"version": version, "addr": a.Addr, "OS-EXT-IPS:type": typ, "OS-EXT-IPS-MAC:mac_addr": mac(s.ID, i)})
	}
	metadata := maps.Clone(s.Metadata)
	if metadata == nil {
		metadata = map[string]string{}
	}
	links := []map[string]any{
		{"rel": "self", "href": base + "/servers/" + s.ID},
		{"rel": "bookmark", "href": strings.TrimSuffix(base, "/v2.1") + "/servers/" + s.ID},
	}
	out := map[string]any{
		"id": s.ID, "name": s.Name, "status": s.Status, "tenant_id": DefaultProjectID, "user_id": DefaultUserID,
		"metadata": metadata, "hostId": "2091634baaccdc4c5a1d57069c833e402921df696b7f970791b12ec6",
		"image": map[string]any{"id": "70a599e0-31e7-49b7-b260-868f441e862b",
			"links": []map[string]any{{"rel": "bookmark", "href": base + "/images/70a599e0-31e7-49b7-b260-868f441e862b"}}},
		"created": s.Created.UTC().Format(createdLayout), "updated": s.Created.UTC().Format(createdLayout),
		"addresses": addresses, "accessIPv4": s.AccessIPv4, "accessIPv6": "", "links": links,
		"OS-DCF:diskConfig": "MANUAL", "progress": 0, "OS-EXT-AZ:availability_zone": s.AvailabilityZone,
		"config_drive": "", "key_name": nil,
		"OS-SRV-USG:launched_at": s.Created.UTC().Format(launchedLayout), "OS-SRV-USG:terminated_at": nil,
		"OS-EXT-STS:task_state": nil, "OS-EXT-STS:vm_state": st.vm, "OS-EXT-STS:power_state": st.power,
		"os-extended-volumes:volumes_attached": []any{}, "security_groups": []map[string]any{{"name": "default"}},
	}
	if mv.atLeast(2, 47) {
		out["flavor"] = map[string]any{"original_name": s.Flavor, "vcpus": 1, "ram": 2048, "disk": 20,
			"ephemeral": 0, "swap": 0, "extra_specs": map[string]string{}}
	} else {
		id := flavorID(s.Flavor)
		out["flavor"] = map[string]any{"id": id,
			"links": []map[string]any{{"rel": "bookmark", "href": base + "/flavors/" + id}}}
	}
	if mv.atLeast(2, 9) {
		out["locked"] = false
	}
	if mv.atLeast(2, 19) {
		out["description"] = nil
	}
	if mv.atLeast(2, 26) {
		tags := slices.Clone(s.Tags)
		if tags == nil {
			tags = []string{}
		}
		out["tags"] = tags
	}
	if mv.atLeast(2, 63) {
		out["trusted_image_certificates"] = nil
	}
	if mv.atLeast(2, 71) && show {
		out["server_groups"] = []string{}
	}
	if mv.atLeast(2, 73) {
		out["locked_reason"] = nil
	}
	if mv.atLeast(2, 90) {
		out["OS-EXT-SRV-ATTR:hostname"] = hostname(s.Name)
	}
	if mv.atLeast(2, 96) {
		out["pinned_availability_zone"] = nil
	}
	return out
}

// hostname is the hostname Nova derives from a server's name: lower case,
// characters other than letters, digits, '-' and '.' dropped, spaces and
// '_' made '-'.
func hostname(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		case r == ' ' || r == '_':
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-.")
}
