package azuretest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mooring-dev/mooring/cloud/cloudtest"
)

// TimeLayout is the attested document's timestamp layout for parsing;
// IMDS writes UTC as "-0000" (Go's layout would write "+0000"), as
// FormatTime does.
const TimeLayout = "01/02/06 15:04:05 -0700"

// FormatTime writes a timestamp as genuine documents do:
// "11/19/25 12:53:30 -0000", UTC.
func FormatTime(t time.Time) string { return t.UTC().Format("01/02/06 15:04:05") + " -0000" }

// Document is an attested document's signed content, as IMDS writes it,
// valid from created for DocumentLifetime.
func (c *Cloud) Document(vm VM, nonce string, created time.Time) []byte {
	return c.DocumentFor(vm.VMID, c.opts.Subscription, nonce, created, created.Add(c.opts.DocumentLifetime))
}

// DocumentAt is the content IMDS signs for a request at now, with the
// timestamps genuine documents carry: createdOn at the request, to the
// second, and expiresOn DocumentLifetime (six hours) after it. Microsoft
// documents createdOn as when the document was created; both public
// genuine documents state expiresOn six hours after createdOn.
func (c *Cloud) DocumentAt(vm VM, nonce string, now time.Time) []byte {
	now = now.Truncate(time.Second)
	return c.DocumentFor(vm.VMID, c.opts.Subscription, nonce, now, now.Add(c.opts.DocumentLifetime))
}

// DefaultNonce is the nonce IMDS writes when the request gives none, for
// a document created at created: as both public genuine documents show
// it, the document's expiresOn written yyyyMMdd-HHmmss.
func (c *Cloud) DefaultNonce(created time.Time) string {
	return created.Truncate(time.Second).Add(c.opts.DocumentLifetime).UTC().Format("20060102-150405")
}

// DocumentFor is signed content with every field chosen (for attacks).
func (c *Cloud) DocumentFor(vmID, subscription, nonce string, created, expires time.Time) []byte {
	doc := map[string]any{
		"licenseType": "", "nonce": nonce,
		"plan":           map[string]string{"name": "", "product": "", "publisher": ""},
		"sku":            "",
		"subscriptionId": subscription,
		"timeStamp": map[string]string{
			"createdOn": FormatTime(created), "expiresOn": FormatTime(expires),
		},
		"vmId": vmID,
	}
	b, _ := json.Marshal(doc)
	return b
}

var nonceRE = regexp.MustCompile(`^[0-9A-Za-z]{1,32}$`)

func (c *Cloud) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/msi/token":
		c.serveToken(w, r)
	case strings.HasPrefix(r.URL.Path, "/vm/"):
		c.serveIMDS(w, r)
	case strings.HasPrefix(r.URL.Path, "/pkiops/"):
		c.serveAIA(w, r)
	case strings.HasPrefix(strings.ToLower(r.URL.Path), "/subscriptions/"):
		c.serveARM(w, r)
	default:
		http.NotFound(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	cloudtest.WriteJSON(w, status, v)
}

// serveToken answers App Service's managed identity protocol.
func (c *Cloud) serveToken(w http.ResponseWriter, r *http.Request) {
	c.count("Token")
	if r.Header.Get("X-IDENTITY-HEADER") != c.header || r.URL.Query().Get("resource") == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"statusCode": 400, "message": "missing or wrong X-IDENTITY-HEADER or resource"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{
		"access_token": c.token, "expires_on": strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10),
		"resource": r.URL.Query().Get("resource"), "token_type": "Bearer",
	})
}

// serveAIA publishes the issuing CAs, DER, as Microsoft's PKI repository
// does (application/pkix-cert).
func (c *Cloud) serveAIA(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	cert, ok := c.published[r.URL.EscapedPath()]
	failing := c.failAIA
	c.mu.Unlock()
	if failing {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	c.count("AIA")
	w.Header().Set("Content-Type", "application/pkix-cert")
	_, _ = w.Write(cert.Raw)
}

// throttled records an IMDS request of a VM and reports whether it is
// over the per-second limit.
func (c *Cloud) throttled(vmID string, now time.Time) bool {
	if c.opts.IMDSRateLimit < 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	win := c.imdsHits[vmID]
	if win == nil {
		win = &cloudtest.Window{Limit: c.opts.IMDSRateLimit, Period: time.Second}
		c.imdsHits[vmID] = win
	}
	if !win.Take(now) {
		c.calls.Add("Throttled")
		return true
	}
	return false
}

// attested is the document for a request at now: the VM's cached one
// while the cache window lasts, else a new one signed by the current
// signer.
func (c *Cloud) attested(vm VM, nonce string, now time.Time) ([]byte, error) {
	c.mu.Lock()
	last, ok := c.lastDoc[vm.VMID]
	signer := c.Signer
	c.mu.Unlock()
	if ok && c.opts.DocumentCacheWindow > 0 && now.Sub(last.at) < c.opts.DocumentCacheWindow {
		c.count("StaleDocument")
		return last.der, nil
	}
	der, err := signer.Sign(c.DocumentAt(vm, nonce, now))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.lastDoc[vm.VMID] = cachedDoc{der: der, at: now}
	c.mu.Unlock()
	return der, nil
}

// serveIMDS answers /vm/<vmId>/metadata/{instance,attested/document} as
// IMDS does: GET only, Metadata: true required, no X-Forwarded-For, an
// api-version required.
func (c *Cloud) serveIMDS(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/vm/")
	vmID, path, _ := strings.Cut(rest, "/")
	vm, ok := c.vm(vmID)
	switch {
	case !ok:
		http.NotFound(w, r)
		return
	case r.Method != http.MethodGet:
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "Method not allowed"})
		return
	case r.Header.Get("Metadata") != "true" || r.Header.Get("X-Forwarded-For") != "":
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "Bad request. Required metadata header not specified"})
		return
	case r.URL.Query().Get("api-version") == "":
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "Bad request. api-version was not specified in the request"})
		return
	case c.throttled(vm.VMID, time.Now()):
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "Too many requests"})
		return
	}
	switch path {
	case "metadata/instance":
		c.count("Instance")
		writeJSON(w, http.StatusOK, c.imdsInstance(vm))
	case "metadata/attested/document":
		c.count("AttestedDocument")
		nonce := r.URL.Query().Get("nonce")
		if nonce != "" && !nonceRE.MatchString(nonce) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "Bad request. Invalid nonce"})
			return
		}
		now := time.Now()
		if nonce == "" {
			nonce = c.DefaultNonce(now)
		}
		der, err := c.attested(vm, nonce, now)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"encoding": "pkcs7", "signature": base64.StdEncoding.EncodeToString(der)})
	default:
		http.NotFound(w, r)
	}
}

func (c *Cloud) imdsInstance(vm VM) map[string]any {
	ips := []map[string]string{}
	if vm.PrivateIP != "" {
		ips = append(ips, map[string]string{"privateIpAddress": vm.PrivateIP, "publicIpAddress": vm.PublicIP})
	}
	name := vm.Name
	if vm.ScaleSet != "" {
		name = vm.ScaleSet + "_" + vm.InstanceID
	}
	return map[string]any{
		"compute": map[string]any{
			"location": c.opts.Location, "name": name, "resourceGroupName": c.opts.ResourceGroup,
			"resourceId": c.vmID(vm), "subscriptionId": c.opts.Subscription, "vmId": vm.VMID,
			"vmScaleSetName": vm.ScaleSet, "zone": vm.Zone, "vmSize": vm.Size,
			"osProfile": map[string]string{"computerName": c.computerName(vm)},
		},
		"network": map[string]any{"interface": []any{map[string]any{
			"ipv4": map[string]any{"ipAddress": ips, "subnet": []any{}},
			"ipv6": map[string]any{"ipAddress": []any{}},
		}}},
	}
}

func (c *Cloud) computerName(vm VM) string {
	if vm.ScaleSet != "" {
		return vm.ComputerName
	}
	return vm.Name
}

func (c *Cloud) rgID() string {
	return "/subscriptions/" + c.opts.Subscription + "/resourceGroups/" + c.opts.ResourceGroup
}

func (c *Cloud) vmID(vm VM) string {
	if vm.ScaleSet != "" {
		return c.rgID() + "/providers/Microsoft.Compute/virtualMachineScaleSets/" + vm.ScaleSet + "/virtualMachines/" + vm.InstanceID
	}
	return c.rgID() + "/providers/Microsoft.Compute/virtualMachines/" + vm.Name
}

func (c *Cloud) nicID(vm VM) string {
	if vm.ScaleSet != "" {
		return c.vmID(vm) + "/networkInterfaces/nic0"
	}
	return c.rgID() + "/providers/Microsoft.Network/networkInterfaces/" + vm.Name + "-nic"
}

func (c *Cloud) publicIPID(vm VM) string {
	if vm.ScaleSet != "" {
		return c.nicID(vm) + "/ipConfigurations/ipconfig1/publicIPAddresses/pip0"
	}
	return c.rgID() + "/providers/Microsoft.Network/publicIPAddresses/" + vm.Name + "-pip"
}

func tagsJSON(tags map[string]string) map[string]string {
	if tags == nil {
		return map[string]string{}
	}
	return tags
}

func zonesJSON(vm VM) []string {
	if vm.Zone == "" {
		return nil
	}
	return []string{vm.Zone}
}

func statusesJSON(vm VM) map[string]any {
	return map[string]any{"statuses": []map[string]string{
		{"code": "ProvisioningState/succeeded", "level": "Info"},
		{"code": "PowerState/" + vm.Power, "level": "Info"},
	}}
}

// vmJSON is a VM as ARM writes it; with its instance view if asked.
func (c *Cloud) vmJSON(vm VM, instanceView bool) map[string]any {
	props := map[string]any{
		"vmId":              vm.VMID,
		"hardwareProfile":   map[string]string{"vmSize": vm.Size},
		"provisioningState": "Succeeded",
		"osProfile":         map[string]string{"computerName": c.computerName(vm)},
		"networkProfile": map[string]any{"networkInterfaces": []any{
			map[string]any{"id": c.nicID(vm), "properties": map[string]any{"primary": true}},
		}},
		// RFC 3339, as ARM writes it ("2022-01-14T16:43:41.683Z").
		"timeCreated": vm.Created.UTC().Format(time.RFC3339Nano),
	}
	if instanceView {
		props["instanceView"] = statusesJSON(vm)
	}
	if vm.SecurityType != "" {
		props["securityProfile"] = map[string]any{"securityType": vm.SecurityType,
			"uefiSettings": map[string]bool{"secureBootEnabled": vm.SecureBoot, "vTpmEnabled": vm.VTPM}}
	}
	out := map[string]any{"id": c.vmID(vm), "location": c.opts.Location, "tags": tagsJSON(vm.Tags), "properties": props}
	if z := zonesJSON(vm); z != nil {
		out["zones"] = z
	}
	if vm.ScaleSet != "" {
		out["name"] = vm.ScaleSet + "_" + vm.InstanceID
		out["instanceId"] = vm.InstanceID
		out["type"] = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines"
		out["sku"] = map[string]any{"name": vm.Size, "tier": "Standard"}
	} else {
		out["name"] = vm.Name
		out["type"] = "Microsoft.Compute/virtualMachines"
	}
	return out
}

func (c *Cloud) nicJSON(vm VM) map[string]any {
	ipProps := map[string]any{"primary": true, "privateIPAddress": vm.PrivateIP, "privateIPAddressVersion": "IPv4", "privateIPAllocationMethod": "Dynamic"}
	if vm.PublicIP != "" {
		ipProps["publicIPAddress"] = map[string]string{"id": c.publicIPID(vm)}
	}
	if pools := c.nicPools(c.nicID(vm)); len(pools) > 0 { // nics.go
		var refs []any
		for _, p := range pools {
			refs = append(refs, map[string]string{"id": p})
		}
		ipProps["loadBalancerBackendAddressPools"] = refs
	}
	return map[string]any{
		"id": c.nicID(vm), "name": c.nicID(vm)[strings.LastIndex(c.nicID(vm), "/")+1:], "location": c.opts.Location,
		"etag": c.nicETag(c.nicID(vm)),
		"properties": map[string]any{
			"primary":          true,
			"virtualMachine":   map[string]string{"id": c.vmID(vm)},
			"ipConfigurations": []any{map[string]any{"id": c.nicID(vm) + "/ipConfigurations/ipconfig1", "name": "ipconfig1", "properties": ipProps}},
		},
	}
}

func (c *Cloud) publicIPJSON(vm VM) map[string]any {
	return map[string]any{"id": c.publicIPID(vm), "name": "pip", "location": c.opts.Location,
		"properties": map[string]any{"ipAddress": vm.PublicIP, "publicIPAddressVersion": "IPv4"}}
}

func armError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// serveARM answers the ARM paths the backend calls.
func (c *Cloud) serveARM(w http.ResponseWriter, r *http.Request) {
	if !cloudtest.Bearer(r, c.token) {
		w.Header().Set("WWW-Authenticate", `Bearer authorization_uri="https://login.microsoftonline.com/common", error="invalid_token"`)
		armError(w, http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid.")
		return
	}
	if r.URL.Query().Get("api-version") == "" {
		armError(w, http.StatusBadRequest, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests.")
		return
	}
	if f := strings.Split(strings.Trim(r.URL.Path, "/"), "/"); len(f) < 2 || !strings.EqualFold(f[1], c.opts.Subscription) {
		armError(w, http.StatusNotFound, "SubscriptionNotFound", "The subscription could not be found.")
		return
	}
	// Resources written through ARM, and its operations (arm.go).
	if c.serveARMWrite(w, r) {
		return
	}
	if r.Method != http.MethodGet {
		armError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "only GET is modelled")
		return
	}
	f := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	lower := make([]string, len(f))
	for i, s := range f {
		lower[i] = strings.ToLower(s)
	}
	if len(f) < 2 || !strings.EqualFold(f[1], c.opts.Subscription) {
		armError(w, http.StatusNotFound, "SubscriptionNotFound", "The subscription could not be found.")
		return
	}
	q := r.URL.Query()
	expand := strings.EqualFold(q.Get("$expand"), "instanceView")
	// /subscriptions/S/providers/Microsoft.Compute/virtualMachines?statusOnly=true
	if len(f) == 5 && lower[2] == "providers" && lower[3] == "microsoft.compute" && lower[4] == "virtualmachines" {
		op := "ListAllVMs"
		status := strings.EqualFold(q.Get("statusOnly"), "true")
		if status {
			op = "ListVMStatuses"
		}
		c.count(op)
		var items []any
		for _, vm := range c.sortedVMs() {
			if vm.ScaleSet == "" {
				j := c.vmJSON(vm, status)
				if status {
					j = map[string]any{"id": j["id"], "name": j["name"], "properties": map[string]any{"instanceView": statusesJSON(vm)}}
				}
				items = append(items, j)
			}
		}
		c.page(w, r, items)
		return
	}
	if len(f) < 6 || lower[2] != "resourcegroups" || !strings.EqualFold(f[3], c.opts.ResourceGroup) || lower[4] != "providers" {
		armError(w, http.StatusNotFound, "ResourceGroupNotFound", "Resource group could not be found.")
		return
	}
	rest := lower[5:]
	orig := f[5:]
	switch {
	case len(rest) == 2 && rest[0] == "microsoft.compute" && rest[1] == "virtualmachines":
		c.count("ListVMs")
		var items []any
		for _, vm := range c.sortedVMs() {
			if vm.ScaleSet == "" {
				items = append(items, c.vmJSON(vm, false))
			}
		}
		c.page(w, r, items)
	case len(rest) == 3 && rest[0] == "microsoft.compute" && rest[1] == "virtualmachines":
		c.count("GetVM")
		for _, vm := range c.sortedVMs() {
			if vm.ScaleSet == "" && strings.EqualFold(vm.Name, orig[2]) {
				writeJSON(w, http.StatusOK, c.vmJSON(vm, expand))
				return
			}
		}
		armError(w, http.StatusNotFound, "ResourceNotFound", fmt.Sprintf("The Resource 'Microsoft.Compute/virtualMachines/%s' under resource group '%s' was not found.", orig[2], c.opts.ResourceGroup))
	case len(rest) == 2 && rest[0] == "microsoft.compute" && rest[1] == "virtualmachinescalesets":
		c.count("ListScaleSets")
		c.mu.Lock()
		var names []string
		for n := range c.scaleSets {
			names = append(names, n)
		}
		c.mu.Unlock()
		var items []any
		slices.Sort(names)
		for _, n := range names {
			items = append(items, c.scaleSetJSON(n))
		}
		c.page(w, r, items)
	case len(rest) == 3 && rest[0] == "microsoft.compute" && rest[1] == "virtualmachinescalesets":
		c.count("GetScaleSet")
		if _, ok := c.scaleSet(orig[2]); !ok {
			armError(w, http.StatusNotFound, "ResourceNotFound", "The scale set was not found.")
			return
		}
		writeJSON(w, http.StatusOK, c.scaleSetJSON(orig[2]))
	case len(rest) == 4 && rest[0] == "microsoft.compute" && rest[1] == "virtualmachinescalesets" && rest[3] == "virtualmachines":
		c.count("ListScaleSetVMs")
		c.page(w, r, c.members(orig[2], func(vm VM) any { return c.vmJSON(vm, expand) }))
	case len(rest) == 5 && rest[0] == "microsoft.compute" && rest[1] == "virtualmachinescalesets" && rest[3] == "virtualmachines":
		c.count("GetScaleSetVM")
		for _, vm := range c.sortedVMs() {
			if strings.EqualFold(vm.ScaleSet, orig[2]) && vm.InstanceID == orig[4] {
				writeJSON(w, http.StatusOK, c.vmJSON(vm, expand))
				return
			}
		}
		armError(w, http.StatusNotFound, "ResourceNotFound", "The scale-set VM was not found.")
	case len(rest) == 4 && rest[0] == "microsoft.compute" && rest[1] == "virtualmachinescalesets" && rest[3] == "networkinterfaces":
		c.count("ListNICs")
		c.page(w, r, c.members(orig[2], func(vm VM) any { return c.nicJSON(vm) }))
	case len(rest) == 4 && rest[0] == "microsoft.compute" && rest[1] == "virtualmachinescalesets" && rest[3] == "publicipaddresses":
		c.count("ListPublicIPs")
		var items []any
		for _, it := range c.members(orig[2], func(vm VM) any {
			if vm.PublicIP == "" {
				return nil
			}
			return c.publicIPJSON(vm)
		}) {
			if it != nil {
				items = append(items, it)
			}
		}
		c.page(w, r, items)
	case len(rest) == 2 && rest[0] == "microsoft.network" && rest[1] == "networkinterfaces":
		c.count("ListNICs")
		var items []any
		for _, vm := range c.sortedVMs() {
			if vm.ScaleSet == "" {
				items = append(items, c.nicJSON(vm))
			}
		}
		c.page(w, r, items)
	case len(rest) == 2 && rest[0] == "microsoft.network" && rest[1] == "publicipaddresses":
		c.count("ListPublicIPs")
		var items []any
		for _, vm := range c.sortedVMs() {
			if vm.ScaleSet == "" && vm.PublicIP != "" {
				items = append(items, c.publicIPJSON(vm))
			}
		}
		c.page(w, r, items)
	default:
		armError(w, http.StatusNotFound, "NotFound", "no such path in this Azure stand-in: "+r.URL.Path)
	}
}

func (c *Cloud) members(scaleSet string, f func(VM) any) []any {
	var items []any
	for _, vm := range c.sortedVMs() {
		if strings.EqualFold(vm.ScaleSet, scaleSet) {
			items = append(items, f(vm))
		}
	}
	return items
}

func (c *Cloud) scaleSetJSON(name string) map[string]any {
	tags, _ := c.scaleSet(name)
	return map[string]any{
		"id":   c.rgID() + "/providers/Microsoft.Compute/virtualMachineScaleSets/" + name,
		"name": name, "location": c.opts.Location, "tags": tagsJSON(tags),
		"type": "Microsoft.Compute/virtualMachineScaleSets",
		"sku":  map[string]any{"name": "Standard_D2s_v5", "tier": "Standard"},
	}
}

// page answers one page of items: {"value": [...], "nextLink": URL} with
// $skiptoken, the request's other parameters kept, as ARM's lists do.
func (c *Cloud) page(w http.ResponseWriter, r *http.Request, items []any) {
	q := r.URL.Query()
	start := 0
	if tok := q.Get("$skiptoken"); tok != "" {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 || n > len(items) {
			armError(w, http.StatusBadRequest, "InvalidSkipToken", "The skip token is not valid.")
			return
		}
		start = n
		c.count(NextPage)
	}
	end := min(start+c.opts.PageSize, len(items))
	out := map[string]any{"value": append([]any{}, items[start:end]...)}
	if end < len(items) {
		q.Set("$skiptoken", strconv.Itoa(end))
		out["nextLink"] = (&url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawQuery: q.Encode()}).String()
	}
	writeJSON(w, http.StatusOK, out)
}
