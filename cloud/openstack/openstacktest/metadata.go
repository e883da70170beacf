package openstacktest

import (
	"net/http"
	"net/netip"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// The metadata service's paths served.
const (
	metaDataPath  = "/openstack/latest/meta_data.json"
	userDataPath  = "/openstack/latest/user_data"
	localIPv4Path = "/latest/meta-data/local-ipv4"
)

func (c *Cloud) serveMetadata(id string, w http.ResponseWriter, r *http.Request) {
	s, ok := c.Get(id)
	if !ok || s.Status != StatusActive {
		// A machine that is not running answers nothing.
		cloudtest.HangUp(w)
		return
	}
	if f := c.count("metadata"); f != nil {
		http.Error(w, "injected fault", f.Status)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case metaDataPath:
		meta := map[string]string{}
		for k, v := range s.Metadata {
			meta[k] = v
		}
		cloudtest.WriteJSON(w, http.StatusOK, map[string]any{
			"uuid": s.ID, "name": s.Name, "hostname": hostname(s.Name) + ".novalocal",
			"availability_zone": s.AvailabilityZone, "project_id": DefaultProjectID, "launch_index": 0,
			"meta": meta, "public_keys": map[string]string{}, "keys": []any{}, "devices": []any{},
			"random_seed": "", "dedicated_cpus": []int{},
		})
	case userDataPath:
		if s.UserData == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write([]byte(s.UserData))
	case localIPv4Path:
		for _, a := range s.Addresses {
			if ip, err := netip.ParseAddr(a.Addr); err == nil && ip.Is4() && !a.Floating {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				_, _ = w.Write([]byte(a.Addr))
				return
			}
		}
		http.NotFound(w, r)
	default:
		http.NotFound(w, r)
	}
}
