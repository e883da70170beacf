// Package digitalocean is mooring's DigitalOcean backend, registered as
// "digitalocean" (backend.go; the node identity registers from its own
// package, agentid). DigitalOcean signs no droplet identity, so a droplet
// joins with a join ticket (docs/tickets.md) that the admin's provisioning
// writes into its user data; the approver verifies the ticket itself and
// this backend gives it the cloud's record to check it against:
//
//   - view.go lists the cluster's droplets (tag clusterTag, k8s:<clusterID>
//     by default) with GET /v2/droplets?tag_name=...&page=N&per_page=200
//     through github.com/digitalocean/godo, following links.pages.next and
//     checking meta.total, into mooring's shared instance view. Each
//     droplet's created_at is the instance's creation time, which a join
//     ticket's droplet must fall within;
//   - provider.go is the CCM's k8s.io/cloud-provider provider (InstancesV2
//     over that view; GET /v2/droplets/<id> only to confirm that a droplet
//     the list misses is gone) and the approver's cloud.Attester, with no
//     evidence verifiers of its own;
//   - agentid (cloud/digitalocean/agentid, registered from its own package,
//     all mooring-agent links of the backend) is the node agent's side: the
//     droplet metadata service's /metadata/v1.json (godo has no metadata
//     client) for the droplet's id, name and VPC address; Evidence fails
//     with nodeid.ErrNoEvidence. Its names.go holds the providerID, the
//     Node name and the node name policy, which the view uses too;
//   - config.go is the cloud-config of the CCM and the approver.
//
// What DigitalOcean's own CCM (github.com/digitalocean/
// digitalocean-cloud-controller-manager, cloud-controller-manager/do) does,
// and this backend does alike:
//
//   - providerID digitalocean://<droplet id> (droplets.go, providerIDPrefix);
//   - InstanceMetadata sets InstanceType = the droplet's size_slug and
//     Region = its region slug, and no Zone (droplets.go, InstanceMetadata):
//     Nodes get node.kubernetes.io/instance-type and
//     topology.kubernetes.io/region (e.g. nyc3) and no zone label. Its
//     Zones() returns false (cloud.go; the former zones.go also set only
//     the region), as here;
//   - addresses Hostname (droplet name), InternalIP (private IPv4),
//     ExternalIP (public IPv4), ExternalIP (public IPv6), in that order
//     (common.go, nodeAddresses);
//   - InstanceShutdown is status "off"; the API token comes from
//     DO_ACCESS_TOKEN (cloud.go), the default of tokenEnv here;
//   - it tags a cluster's resources k8s:<DO_CLUSTER_ID> (loadbalancers.go,
//     buildK8sTag), the default cluster tag here.
//
// Where mooring differs: one paginated List per view refresh instead of a
// GET per node and call; Nodes are named as their droplets lower-cased (a
// name that is no DNS-1123 subdomain gives no Node); status archive counts
// as gone (terminated) and new as pending; a Node whose droplet the list
// misses is deleted only after GET /v2/droplets/<id> answers 404, and one
// whose droplet lost the cluster tag is left alone.
//
// Tests run against digitaloceantest, a DigitalOcean API and metadata
// service stand-in on loopback.
package digitalocean
