// Package openstack is mooring's OpenStack backend, registered as
// "openstack" (backend.go; the node identity registers from its own
// package, agentid). OpenStack signs no server identity that mooring can
// check (the metadata service answers anything on the server, unsigned),
// so a server joins with a join ticket (docs/tickets.md) that the admin's
// provisioning writes into its user data; the approver verifies the ticket
// itself and this backend gives it Nova's record to check it against:
//
//   - config.go is the cloud-config of the CCM and the approver: Keystone
//     v3 with an application credential (its secret from a file or the
//     environment), the region and interface of the catalog endpoint, the
//     cluster's tag or metadata key;
//   - provider.go authenticates with gophercloud v2 on first use (POST
//     /v3/auth/tokens, method application_credential; the token is renewed
//     when Nova answers 401), finds Nova in the catalog, and is the CCM's
//     k8s.io/cloud-provider provider and the approver's cloud.Attester, with
//     no evidence verifiers, on the kit (cloud/kit: InstancesV2 and Zones
//     over the view); its own parts are the lookup by server id in the view
//     and GET /servers/{id}, only to confirm that a server the list misses
//     is gone;
//   - view.go lists the cluster's servers with GET /servers/detail at
//     microversion 2.47 (tags=<clusterTag>, limit, marker, oldest first),
//     while servers_links names a next page (asked of the catalog's
//     endpoint, never of the link's host), into mooring's shared instance
//     view, with
//     the OpenStack CCM's providerIDs (openstack:///<id>, or
//     openstack://<region>/<id>), zones (the availability zone), region
//     (the config's), instance type (the flavor's name) and addresses (from
//     Nova's addresses: fixed ones as InternalIP, floating ones as
//     ExternalIP). Each server's created time is what a join ticket's
//     server must fall within;
//   - routes.go is Routes with a routerID: the Nodes' pod CIDRs as extra
//     routes of that Neutron router via the Nodes' InternalIPs, as the
//     OpenStack CCM makes them (add_extraroutes/remove_extraroutes with
//     extraroute-atomic, else the routes written whole under If-Match),
//     touching only routes via the cluster's servers inside --cluster-cidr,
//     and the pod CIDR in the Node's port's allowed_address_pairs;
//   - loadbalancers.go (loadbalancers_annotations.go,
//     loadbalancers_config.go) is the Service load balancers on Octavia
//     over the kit (cloud/kit/loadbalancer), as the OpenStack CCM makes
//     them: its names, load-balancer-id and annotations, one fully
//     populated create, a floating IP on the VIP port, each change waited
//     for until ACTIVE, Octavia's 409 while pending a wait;
//   - agentid (cloud/openstack/agentid, all mooring-agent links of the
//     backend) is the node side: the metadata service's
//     /openstack/latest/meta_data.json (uuid, name) and the EC2-compatible
//     local-ipv4; Evidence wraps nodeid.ErrNoEvidence. Its names.go holds
//     the providerID forms, the Node name and the node name policy, which
//     the view uses too.
//
// Tests run the real gophercloud client against openstacktest, a Keystone,
// Nova and metadata service stand-in on loopback.
package openstack
