package agentid

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ProviderIDPrefix starts the providerID of an Azure VM's Node: azure://
// and the VM's resource id, as the Azure CCM writes it.
const ProviderIDPrefix = "azure://"

// Resource is what a VM's resource id names: a VM, or a VM of a scale set
// (ScaleSet and InstanceID set, Name empty).
type Resource struct {
	Subscription, ResourceGroup string
	Name                        string
	ScaleSet, InstanceID        string
}

// ID is the resource id as the Azure CCM writes it into providerIDs: the
// resource group in lower case (cloud-provider-azure lower-cases it), the
// rest as ARM names it.
func (r Resource) ID() string {
	base := "/subscriptions/" + strings.ToLower(r.Subscription) + "/resourceGroups/" + strings.ToLower(r.ResourceGroup) + "/providers/Microsoft.Compute/"
	if r.ScaleSet != "" {
		return base + "virtualMachineScaleSets/" + r.ScaleSet + "/virtualMachines/" + r.InstanceID
	}
	return base + "virtualMachines/" + r.Name
}

// ProviderID is the Node's providerID: azure:// and ID, so
// azure:///subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/virtualMachines/NAME.
func (r Resource) ProviderID() string { return ProviderIDPrefix + r.ID() }

// ParseResourceID reads a VM's or a scale-set VM's resource id (ARM's
// segment names compared case-insensitively, as ARM does).
func ParseResourceID(id string) (Resource, error) {
	f := strings.Split(id, "/")
	bad := func() (Resource, error) {
		return Resource{}, fmt.Errorf("resource id %.200q: want /subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/virtualMachines/NAME or .../virtualMachineScaleSets/SS/virtualMachines/ID", id)
	}
	if len(f) != 9 && len(f) != 11 {
		return bad()
	}
	if f[0] != "" || !strings.EqualFold(f[1], "subscriptions") || !strings.EqualFold(f[3], "resourceGroups") ||
		!strings.EqualFold(f[5], "providers") || !strings.EqualFold(f[6], "Microsoft.Compute") {
		return bad()
	}
	r := Resource{Subscription: strings.ToLower(f[2]), ResourceGroup: strings.ToLower(f[4])}
	switch {
	case len(f) == 9 && strings.EqualFold(f[7], "virtualMachines"):
		r.Name = f[8]
	case len(f) == 11 && strings.EqualFold(f[7], "virtualMachineScaleSets") && strings.EqualFold(f[9], "virtualMachines"):
		r.ScaleSet, r.InstanceID = f[8], f[10]
	default:
		return bad()
	}
	for _, s := range []string{r.Subscription, r.ResourceGroup, r.Name + r.ScaleSet, r.InstanceID} {
		if strings.ContainsFunc(s, func(c rune) bool { return c <= ' ' || c == 0x7f || c == '?' || c == '#' }) {
			return bad()
		}
	}
	if !uuidRE.MatchString(r.Subscription) || r.ResourceGroup == "" || (r.Name == "" && (r.ScaleSet == "" || r.InstanceID == "")) {
		return bad()
	}
	return r, nil
}

// ParseProviderID reads a Node's providerID: azure:// and a resource id.
func ParseProviderID(providerID string) (Resource, error) {
	rest, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	if !ok {
		return Resource{}, fmt.Errorf("providerID %.200q does not start with %s", providerID, ProviderIDPrefix)
	}
	return ParseResourceID(rest)
}

// NodeName is the Node name of a VM: its name in lower case, or for a
// scale-set VM its computer name (the host name its kubelet registers),
// lower case; "" when there is none or it is no Node name (a DNS-1123
// subdomain: an Azure VM's name may hold an underscore).
func NodeName(r Resource, computerName string) string {
	n := strings.ToLower(r.Name)
	if r.ScaleSet != "" {
		n = strings.ToLower(computerName)
	}
	if len(validation.IsDNS1123Subdomain(n)) > 0 {
		return ""
	}
	return n
}
