// Package linode is mooring's Linode (Akamai Cloud) backend, registered as
// "linode" (backend.go; the node identity registers from its own package,
// agentid). Linode signs no instance identity, so a Linode joins with a
// join ticket (docs/tickets.md) that the admin's provisioning writes into
// its user data; the approver verifies the ticket itself and this backend
// gives it the cloud's record to check it against:
//
//   - view.go lists the cluster's Linodes (tag clusterTag, k8s:<clusterID>
//     by default) with GET /v4/linode/instances?page=N&page_size=500 and
//     X-Filter {"tags": "<tag>"} through github.com/linode/linodego, one
//     page at a time, checking each answer's pages and results, into
//     mooring's shared instance view. Each Linode's created is the
//     instance's creation time, which a join ticket's Linode must fall
//     within;
//   - provider.go is the CCM's k8s.io/cloud-provider provider (InstancesV2
//     over that view; GET /v4/linode/instances/<id> only to confirm that a
//     Linode the list misses is gone) and the approver's cloud.Attester,
//     with no evidence verifiers of its own;
//   - agentid (cloud/linode/agentid, registered from its own package, all
//     mooring-agent links of the backend) is the node agent's side: the
//     Metadata service (a token from PUT /v1/token first, then
//     /v1/instance and /v1/network with it; linodego has no metadata
//     client) for the Linode's id, label and private address; Evidence
//     fails with nodeid.ErrNoEvidence. Its names.go holds the providerID,
//     the Node name and the node name policy, which the view uses too;
//   - loadbalancers.go and annotations.go are Service load balancers as
//     NodeBalancers: a loadbalancer.Cloud (cloud/kit/loadbalancer) over
//     linodego's NodeBalancer calls, reading the Service annotations of
//     Linode's CCM (service.beta.kubernetes.io/linode-loadbalancer-*) and
//     refusing, by name, those it does not support; docs/linode.md has
//     the table. tls.go reads an https port's certificate from the Secret
//     it names (Initialize's client, a GET each time); firewall.go
//     attaches a NodeBalancer to the Cloud Firewall firewall-id names;
//     vpc.go finds the VPC backends' subnet and the nodes' addresses in
//     it;
//   - config.go is the cloud-config of the CCM and the approver.
//
// What Linode's own CCM (github.com/linode/linode-cloud-controller-manager,
// cloud/linode) does, and this backend does alike:
//
//   - providerID linode://<linode id>;
//   - InstanceMetadata sets InstanceType = the Linode's type and Region =
//     its region, and no Zone (instances.go): Nodes get
//     node.kubernetes.io/instance-type and topology.kubernetes.io/region
//     (e.g. us-east) and no zone label;
//   - addresses: Hostname (the label), then each IPv4 address in the API's
//     order, InternalIP when private (192.168.128.0/17) and ExternalIP
//     otherwise;
//   - Nodes are the Linodes' labels; InstanceShutdown is status offline or
//     shutting_down; the API token comes from LINODE_API_TOKEN, the
//     default of tokenEnv here;
//   - a Service's NodeBalancer is labelled ccm-<12 hex digits> and found by
//     the nodebalancer-id annotation or by the address in the Service's
//     status; a config per port, each node's private address at the node
//     port, with the same annotations' defaults.
//
// Where mooring differs: one paginated List per view refresh instead of a
// GET per node and call; a Node is named as its Linode's label lower-cased
// (a label that is no DNS-1123 subdomain, with an underscore, gives no
// Node); the SLAAC IPv6 address follows as an ExternalIP; deleting counts
// as gone (terminated), the transitional statuses as pending; the private
// ranges are configurable (privateCIDRs); a Node whose Linode the list
// misses is deleted only after GET /v4/linode/instances/<id> answers 404,
// and one whose Linode lost the cluster tag is left alone.
//
// Tests run against linodetest, a Linode API and Metadata service stand-in
// on loopback.
package linode
