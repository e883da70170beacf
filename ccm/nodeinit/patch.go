package nodeinit

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
)

// jsonPatchOp is one operation of an RFC 6902 JSON patch.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// jsonNull is a patch operation's value null (a nil Value is left out).
var jsonNull = json.RawMessage("null")

// standardLabel: the labels the library writes from the instance's
// metadata whatever the Node has (instance type, zone, region).
var standardLabel = map[string]bool{
	v1.LabelInstanceType: true, v1.LabelInstanceTypeStable: true,
	v1.LabelFailureDomainBetaZone: true, v1.LabelTopologyZone: true,
	v1.LabelFailureDomainBetaRegion: true, v1.LabelTopologyRegion: true,
}

// pointer escapes one reference token of an RFC 6901 JSON pointer.
func pointer(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}

// k8sNamespace matches label keys in the kubernetes.io and k8s.io
// namespaces, which a cloud's additional labels may not use (as in the
// library's controller).
var k8sNamespace = regexp.MustCompile(`(^|\.)(kubernetes|k8s)\.io/`)

// initLabels is the labels the library's cloud-node controller writes from
// the instance's metadata: instance type, zone and region under their GA
// and beta keys, then the cloud's additional labels, which never replace a
// label the Node has and never use a Kubernetes namespace.
func initLabels(node *v1.Node, md *cloudprovider.InstanceMetadata) map[string]string {
	out := map[string]string{}
	if md.InstanceType != "" {
		out[v1.LabelInstanceType] = md.InstanceType
		out[v1.LabelInstanceTypeStable] = md.InstanceType
	}
	if md.Zone != "" {
		out[v1.LabelFailureDomainBetaZone] = md.Zone
		out[v1.LabelTopologyZone] = md.Zone
	}
	if md.Region != "" {
		out[v1.LabelFailureDomainBetaRegion] = md.Region
		out[v1.LabelTopologyRegion] = md.Region
	}
	for k, v := range md.AdditionalLabels {
		if k8sNamespace.MatchString(k) {
			klog.InfoS("Discarding the cloud's label in a Kubernetes namespace", "node", klog.KObj(node), "label", k)
			continue
		}
		if _, set := out[k]; set {
			continue
		}
		if old, ok := node.Labels[k]; ok {
			if old != v {
				klog.InfoS("Discarding the cloud's label the Node already has", "node", klog.KObj(node), "label", k)
			}
			continue
		}
		out[k] = v
	}
	return out
}

// initPatch is the one write that initializes a Node's metadata and spec: a
// JSON patch that sets the providerID (when the Node has none), sets the
// labels, and removes the uninitialized taint. It carries no
// resourceVersion, so a kubelet's status update in between cannot make it
// conflict. What it changes on the strength of what it read is guarded by
// test operations instead: the taint is removed by index after a test that
// the index still holds it, so a taint another controller added or removed
// meanwhile is kept or makes the patch fail (422) and be rebuilt, never
// lost; every taint of the key goes. The cloud's additional labels are
// added after a test that the label is still absent, so a value written
// since the read is kept. A Node without labels (none registered by a
// kubelet) is written with a resourceVersion test, the only way to add the
// whole map safely.
// It returns nil when there is nothing to write.
func initPatch(node *v1.Node, md *cloudprovider.InstanceMetadata) ([]byte, error) {
	var ops []jsonPatchOp
	if node.Labels == nil {
		ops = append(ops, jsonPatchOp{Op: "test", Path: "/metadata/resourceVersion", Value: node.ResourceVersion})
	}
	if node.Spec.ProviderID == "" && md.ProviderID != "" {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/providerID", Value: md.ProviderID})
	}
	labels := initLabels(node, md)
	if node.Labels == nil && len(labels) > 0 {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/labels", Value: labels})
	} else {
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			old, ok := node.Labels[k]
			if ok && old == labels[k] {
				continue
			}
			path := "/metadata/labels/" + pointer(k)
			if !ok && !standardLabel[k] {
				// The cloud's own label goes only where the Node has none:
				// a test that it is still absent (a null value passes only
				// for a missing member), so a value another client wrote
				// since the read fails the patch (422) and is kept.
				ops = append(ops, jsonPatchOp{Op: "test", Path: path, Value: jsonNull})
			}
			ops = append(ops, jsonPatchOp{Op: "add", Path: path, Value: labels[k]})
		}
	}
	// Every taint of the key goes (NoSchedule and NoExecute both, as the
	// library removes them), highest index first so that the lower ones
	// keep theirs.
	for i := len(node.Spec.Taints) - 1; i >= 0; i-- {
		t := node.Spec.Taints[i]
		if t.Key != cloudproviderapi.TaintExternalCloudProvider {
			continue
		}
		path := "/spec/taints/" + strconv.Itoa(i)
		ops = append(ops,
			jsonPatchOp{Op: "test", Path: path + "/key", Value: t.Key},
			jsonPatchOp{Op: "remove", Path: path})
	}
	if len(ops) == 0 || (len(ops) == 1 && ops[0].Op == "test") {
		return nil, nil
	}
	return json.Marshal(ops)
}

// labelsPatch is the merge patch that reconciles the beta and GA labels of
// an initialized Node (as the library's controller does), or nil.
func labelsPatch(node *v1.Node) ([]byte, error) {
	update := map[string]string{}
	for _, r := range labelReconcile {
		primary, ok := node.Labels[r.primary]
		if !ok {
			continue
		}
		if secondary, ok := node.Labels[r.secondary]; !ok || secondary != primary {
			update[r.secondary] = primary
		}
	}
	if len(update) == 0 {
		return nil, nil
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"labels": update}})
}

// labelReconcile: the beta label is the source of truth and the GA label
// follows it, as in the library's controller.
var labelReconcile = []struct{ primary, secondary string }{
	{v1.LabelFailureDomainBetaZone, v1.LabelTopologyZone},
	{v1.LabelFailureDomainBetaRegion, v1.LabelTopologyRegion},
	{v1.LabelInstanceType, v1.LabelInstanceTypeStable},
}

// statusPatch is addressesPatch of the addresses the Node should have, or
// nil when the cloud gives none or they are the Node's already.
func statusPatch(node *v1.Node, md *cloudprovider.InstanceMetadata) ([]byte, error) {
	addresses, err := desiredAddresses(node, md)
	if err != nil || addresses == nil || !addressesChanged(node.Status.Addresses, addresses) {
		return nil, err
	}
	return addressesPatch(node, addresses)
}

// addressesPatch is the status patch that sets a Node's addresses: a JSON
// merge patch, which replaces the list whole (what the library's
// PatchNodeStatus does by hand for a strategic one), with the Node's UID as
// its precondition and no resourceVersion.
func addressesPatch(node *v1.Node, addresses []v1.NodeAddress) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": node.UID},
		"status":   map[string]any{"addresses": addresses},
	})
}
