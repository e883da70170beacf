// Package hetzner is mooring's Hetzner Cloud backend, registered as
// "hetzner" (backend.go). Hetzner signs no instance identity, so its
// servers join with join tickets (docs/tickets.md): the approver checks a
// ticket against this backend's view of the cluster's servers, whose
// creation times it compares with the ticket's life.
//
//   - view.go lists the cluster's servers (label <clusterLabel>=<clusterID>,
//     default label mooring.dev/cluster) with hcloud-go's servers List
//     (GET /v1/servers?label_selector=...&page=N&per_page=50&sort=id:asc),
//     follows meta.pagination to the last page and checks that the pages
//     add up, and keeps only servers that carry the label. It maps each
//     server into mooring's shared instance view with
//     hcloud-cloud-controller-manager's providerID (hcloud://<server id>;
//     the upstream internal/providerid), the server name, lower-cased, as
//     the Node name, the server's created timestamp, and the status
//     (running; off and stopping are stopped; deleting is terminated; the
//     rest pending);
//   - zone and region are those the upstream CCM labels Nodes with
//     (hcloud/instances.go, hcloudServer.Metadata, and
//     internal/legacydatacenter): the region is the server's location
//     (fsn1), the zone the location's former datacenter name (fsn1-dc14;
//     a location opened since the API dropped datacenters is its own
//     zone). Addresses follow the upstream CCM's order (hcloudNodeAddresses):
//     Hostname (the server name), the public IPv4 and the IPv6 host address
//     (::1 of the server's /64) as ExternalIP, then private network
//     addresses as InternalIP;
//   - provider.go is the CCM's k8s.io/cloud-provider provider (InstancesV2
//     and Zones over that view) and cloud.Attester with no evidence
//     verifier, configured by config.go's cloud-config; routes.go its
//     Routes() through the configured private network (pod CIDRs to
//     their servers' addresses there, only via the cluster's servers);
//     loadbalancers.go its LoadBalancer(): Services' load balancers over
//     cloud/kit/loadbalancer with hcloud-cloud-controller-manager's
//     annotations, name and service-uid label
//     (loadbalancers_annotations.go); no clusters;
//   - agentid (cloud/hetzner/agentid, registered from its own package,
//     all mooring-agent links of the backend) is the node side: hcloud-go's
//     metadata client (instance-id, hostname, private-networks); Evidence
//     wraps nodeid.ErrNoEvidence. Its names.go holds the providerID, the
//     Node name and the node name policy, which the view uses too.
//
// Tests run the real hcloud-go client against hetznertest, a Cloud API and
// metadata service stand-in on loopback.
package hetzner
