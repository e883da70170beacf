package ocitest

import (
	"net/http"
	"strings"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// metadataHandler is an instance's metadata service, v2.
func (c *Cloud) metadataHandler(id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, ok := c.Get(id)
		if !ok || in.State != "RUNNING" {
			cloudtest.HangUp(w) // a machine that is not running answers nothing
			return
		}
		switch {
		case r.Header.Get("Authorization") != "Bearer Oracle":
			http.Error(w, "Unauthorized: IMDS v2 requires Authorization: Bearer Oracle", http.StatusUnauthorized)
			return
		case r.Header.Get("Forwarded") != "" || r.Header.Get("X-Forwarded-For") != "" || r.Header.Get("X-Forwarded-Host") != "":
			http.Error(w, "Forbidden", http.StatusForbidden)
			return
		case r.Method != http.MethodGet:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		path := r.URL.Path
		switch path {
		case "/opc/v2/instance", "/opc/v2/instance/":
			tags := in.FreeformTags
			if tags == nil {
				tags = map[string]string{}
			}
			cloudtest.WriteJSON(w, http.StatusOK, map[string]any{
				"id": in.ID, "displayName": in.DisplayName, "hostname": strings.ToLower(in.DisplayName),
				"compartmentId": in.Compartment, "availabilityDomain": in.AvailabilityDomain,
				"ociAdName":   strings.ToLower(in.AvailabilityDomain[strings.LastIndexByte(in.AvailabilityDomain, ':')+1:]),
				"faultDomain": in.FaultDomain, "region": c.opts.RegionKey, "canonicalRegionName": c.opts.Region,
				"shape": in.Shape, "state": "Running", "timeCreated": in.Created.UnixMilli(), "freeformTags": tags,
			})
			return
		case "/opc/v2/vnics", "/opc/v2/vnics/":
			vnic := map[string]any{"vnicId": in.VnicID, "nicIndex": 0}
			if in.PrivateIP != "" {
				vnic["privateIp"] = in.PrivateIP
			}
			if in.IPv6 != "" {
				// The fields OCI's metadata service gives an IPv6 VNIC
				// (pritunl-cloud's oracle/metadata.go reads them).
				vnic["ipv6Addresses"] = []string{in.IPv6}
			}
			cloudtest.WriteJSON(w, http.StatusOK, []map[string]any{vnic})
			return
		}
		which, ok := strings.CutPrefix(path, "/opc/v2/identity/")
		if !ok || (which != "cert.pem" && which != "key.pem" && which != "intermediate.pem") {
			http.NotFound(w, r)
			return
		}
		if st := c.count("identity", 0); st != 0 {
			http.Error(w, "injected fault", st)
			return
		}
		ident, err := c.CurrentIdentity(id)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		switch which {
		case "cert.pem":
			_, _ = w.Write(ident.certPEM())
		case "key.pem":
			_, _ = w.Write(ident.keyPEM())
		default:
			_, _ = w.Write(ident.intermediatePEM())
		}
	})
}
