package gce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	compute "google.golang.org/api/compute/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/mooring-dev/mooring/cloud/gce/agentid"
	"github.com/mooring-dev/mooring/cloud/view"
)

// pageSize is aggregatedList's maxResults: the Compute API's largest page.
const pageSize = 500

// maxPages bounds one listing of a project (500 × 1,000 instances).
const maxPages = 1000

// Source lists a cluster's GCE instances for the shared instance view: one
// paginated instances.aggregatedList per project, filtered by the cluster
// label, whose answer is checked again here (the filter narrows the
// listing, it does not decide membership).
type Source struct {
	// Compute is the Compute API client.
	Compute *compute.Service
	// Projects are listed in turn.
	Projects []string
	// ClusterLabel and ClusterID: an instance is the cluster's when its
	// label ClusterLabel has the value ClusterID.
	ClusterLabel, ClusterID string
	// RequestTimeout bounds each page's call; 0 leaves it to the context.
	RequestTimeout time.Duration
}

var _ view.Source = Source{}

// ListInstances follows every page of every project. A listing the API
// marks incomplete (unreachable zones) is an error, never a shorter list:
// the view believes what a fresh list lacks is gone.
func (s Source) ListInstances(ctx context.Context) ([]view.Instance, error) {
	filter := fmt.Sprintf("labels.%s = %q", s.ClusterLabel, s.ClusterID)
	var out []view.Instance
	for _, project := range s.Projects {
		seen := map[string]bool{}
		token := ""
		for n := 1; ; n++ {
			if n > maxPages {
				return nil, fmt.Errorf("compute instances.aggregatedList of project %s: more than %d pages", project, maxPages)
			}
			page, err := s.page(ctx, project, filter, token)
			if err != nil {
				return nil, fmt.Errorf("compute instances.aggregatedList of project %s (page %d, filter %s): %w", project, n, filter, err)
			}
			if len(page.Unreachables) > 0 {
				return nil, fmt.Errorf("compute instances.aggregatedList of project %s: incomplete, unreachable: %s", project, strings.Join(page.Unreachables, ", "))
			}
			for scope, list := range page.Items {
				if list.Warning != nil && list.Warning.Code == "UNREACHABLE" {
					return nil, fmt.Errorf("compute instances.aggregatedList of project %s: %s unreachable: %s", project, scope, list.Warning.Message)
				}
				for _, in := range list.Instances {
					if vi, ok := s.toView(project, in); ok {
						out = append(out, vi)
					}
				}
			}
			token = page.NextPageToken
			if token == "" {
				break
			}
			if seen[token] {
				return nil, fmt.Errorf("compute instances.aggregatedList of project %s: page token repeated", project)
			}
			seen[token] = true
		}
	}
	return out, nil
}

func (s Source) page(ctx context.Context, project, filter, token string) (*compute.InstanceAggregatedList, error) {
	if s.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.RequestTimeout)
		defer cancel()
	}
	call := s.Compute.Instances.AggregatedList(project).Filter(filter).MaxResults(pageSize).Context(ctx)
	if token != "" {
		call = call.PageToken(token)
	}
	return call.Do()
}

// toView converts a Compute API instance into the shared view's form; false
// when it is not the cluster's (label missing or another value) or its
// name or zone cannot make a providerID.
func (s Source) toView(project string, in *compute.Instance) (view.Instance, bool) {
	if in == nil || in.Labels[s.ClusterLabel] != s.ClusterID {
		return view.Instance{}, false
	}
	zone := lastSegment(in.Zone)
	if !agentid.ValidInstanceName(in.Name) || !agentid.ValidZone(zone) || in.Id == 0 {
		klog.V(2).InfoS("Leaving out a GCE instance without a usable name, zone or id", "project", project, "name", in.Name, "zone", in.Zone)
		return view.Instance{}, false
	}
	id := strconv.FormatUint(in.Id, 10)
	// creationTimestamp is RFC 3339 text (the Compute API's Instance
	// reference). One that does not parse leaves the time unknown, and so
	// zero, which the approver refuses for a join ticket; the instance
	// itself stays listed, as dropping it would make it gone to the view.
	created, err := time.Parse(time.RFC3339, in.CreationTimestamp)
	if err != nil {
		klog.V(2).InfoS("A GCE instance's creationTimestamp is not RFC 3339 text; its creation time is unknown (a join ticket cannot name it)",
			"project", project, "instance", in.Name, "creationTimestamp", in.CreationTimestamp)
		created = time.Time{}
	}
	return view.Instance{
		ProviderID:   agentid.ProviderID(project, zone, in.Name),
		ID:           id,
		Name:         in.Name,
		NodeName:     strings.ToLower(in.Name),
		Zone:         zone,
		Region:       agentid.RegionOf(zone),
		InstanceType: lastSegment(in.MachineType),
		Cluster:      s.ClusterID,
		State:        viewState(id, in.Status),
		Addresses:    nodeAddresses(project, zone, in),
		Labels:       in.Labels,
		Created:      created,
		// The vTPM's own proof is the TPM evidence; this only says one is
		// expected (view.Instance.VTPM).
		VTPM: in.ShieldedInstanceConfig != nil && in.ShieldedInstanceConfig.EnableVtpm,
	}, true
}

// viewState maps GCE's instance statuses onto the view's. TERMINATED is a
// stopped instance on GCE (a deleted one is simply absent), so it and the
// states on the way to it, and suspension, are stopped; PROVISIONING,
// STAGING, REPAIRING and any status GCE may add later are pending: neither
// running (no join) nor gone.
func viewState(id, status string) view.State {
	switch status {
	case "RUNNING":
		return view.StateRunning
	case "STOPPING", "PENDING_STOP", "STOPPED", "TERMINATED", "SUSPENDING", "SUSPENDED":
		return view.StateStopped
	case "PROVISIONING", "STAGING", "REPAIRING":
		return view.StatePending
	}
	klog.V(2).InfoS("Unknown GCE instance status; treating it as pending", "instance", id, "status", status)
	return view.StatePending
}

// nodeAddresses lists an instance's addresses: for each network interface
// its internal IP then the NAT IPs of its access configs (the upstream GCE
// CCM's order), then the zonal internal DNS name NAME.ZONE.c.PROJECT.internal
// (InternalDNS) and the hostname: the custom hostname when the instance has
// one, else that DNS name. Unparsable addresses are left out.
func nodeAddresses(project, zone string, in *compute.Instance) []v1.NodeAddress {
	var out []v1.NodeAddress
	addIP := func(t v1.NodeAddressType, addr string) {
		if addr == "" {
			return
		}
		ip := net.ParseIP(addr)
		if ip == nil {
			klog.V(2).InfoS("Leaving out an unparsable GCE address", "instance", in.Name, "type", t, "address", addr)
			return
		}
		out = append(out, v1.NodeAddress{Type: t, Address: ip.String()})
	}
	for _, nic := range in.NetworkInterfaces {
		if nic == nil {
			continue
		}
		addIP(v1.NodeInternalIP, nic.NetworkIP)
		for _, ac := range nic.AccessConfigs {
			if ac != nil {
				addIP(v1.NodeExternalIP, ac.NatIP)
			}
		}
	}
	dns := InternalDNSName(project, zone, in.Name)
	out = append(out, v1.NodeAddress{Type: v1.NodeInternalDNS, Address: dns})
	host := dns
	if h := strings.ToLower(strings.TrimSuffix(in.Hostname, ".")); h != "" && hostnamePattern.MatchString(h) {
		host = h
	}
	out = append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: host})
	return out
}

// InternalDNSName is an instance's zonal internal DNS name.
func InternalDNSName(project, zone, name string) string {
	return name + "." + zone + ".c." + project + ".internal"
}

// hostnamePattern: a custom hostname, a lower-case FQDN.
var hostnamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)+$`)

// lastSegment is the last path segment of a resource URL (a zone or
// machine type URL), or s itself.
func lastSegment(s string) string { return s[strings.LastIndex(s, "/")+1:] }

// errProviderID is wrapped by ParseProviderID's errors.
var errProviderID = errors.New("not a GCE providerID")

// ParseProviderID reads gce://<project>/<zone>/<name>, each part checked.
func ParseProviderID(providerID string) (project, zone, name string, err error) {
	rest, ok := strings.CutPrefix(providerID, agentid.ProviderIDPrefix)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 {
		return "", "", "", fmt.Errorf("%w: %q: want %s<project>/<zone>/<instance-name>", errProviderID, providerID, agentid.ProviderIDPrefix)
	}
	project, zone, name = parts[0], parts[1], parts[2]
	if !agentid.ValidProjectID(project) || !agentid.ValidZone(zone) || !agentid.ValidInstanceName(name) {
		return "", "", "", fmt.Errorf("%w: %q: malformed project, zone or instance name", errProviderID, providerID)
	}
	return project, zone, name, nil
}
