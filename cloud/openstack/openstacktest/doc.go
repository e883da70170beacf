// Package openstacktest is an OpenStack-compatible endpoint for tests,
// reached by the real client library, gophercloud v2 (the provider's
// authURL set to Cloud.AuthURL(), and the agent's metadataURL to
// Cloud.MetadataURL of one server). Everything listens on 127.0.0.1 and
// every server address is a loopback address.
//
// Modelled, after the OpenStack API reference (Identity v3, Compute v2.1)
// and Nova's metadata service:
//   - Keystone: POST /identity/v3/auth/tokens with the application_credential
//     method (by id, or by name with the user's id, and the secret),
//     answered 201 with the token in X-Subject-Token and the token body
//     (methods, expires_at, issued_at, user, project, roles,
//     application_credential, and the catalog: compute and identity, each
//     with public, internal and admin endpoints in Options.Region). Tokens
//     expire after Options.TokenTTL; an unknown, expired or revoked token
//     is 401 on every Nova call, the body keystonemiddleware gives. Other
//     auth methods, a wrong secret, and a revoked credential are 401;
//     malformed requests 400;
//   - Nova microversions: OpenStack-API-Version: compute X.Y and
//     X-OpenStack-Nova-API-Version (either; "latest" is the maximum),
//     2.1 without one, 406 outside 2.1-MaxMicroversion, 400 when malformed;
//     answers carry both headers (the version served) and Vary;
//   - GET /compute/v2.1/servers/detail with limit (capped at
//     Options.MaxLimit, Nova's max_limit, default 1000), marker (400
//     "marker [id] not found" for a marker that is no server), sort_key
//     (created_at, display_name, uuid) and sort_dir (asc, desc; default
//     created_at desc), tags, tags-any, not-tags, not-tags-any (from 2.26;
//     before it they are unknown parameters), name (a regular expression,
//     as Nova's), status; unknown parameters are ignored, as Nova does for
//     non-admin callers. The answer is {"servers": [...], "servers_links":
//     [{"rel": "next", "href": ...}]}, the next link present when the page
//     holds limit servers, as Nova's; Options.LinkBase writes the links
//     with another base, as a Nova behind a proxy without
//     compute_link_prefix does;
//   - GET /compute/v2.1/servers/{id}: 404 itemNotFound for an unknown id;
//   - the server object at the asked microversion: id, name, status,
//     tenant_id, user_id, metadata, hostId, image, flavor ({id, links}
//     before 2.47; from 2.47 the embedded flavor with original_name), created,
//     updated, addresses (per network: version, addr, OS-EXT-IPS:type fixed
//     or floating, OS-EXT-IPS-MAC:mac_addr), accessIPv4, accessIPv6, links,
//     OS-EXT-AZ:availability_zone, OS-EXT-STS:vm_state and power_state,
//     OS-SRV-USG:launched_at, locked (2.9), description (2.19), tags (2.26),
//     trusted_image_certificates (2.63), server_groups (2.71, shown for one
//     server only, never in a listing), locked_reason (2.73), and the other
//     documented fields with fixed values: the fields a project member sees
//     in Nova's own API samples at 2.47 and 2.96 (samples_test.go); Nova's
//     error bodies ({"itemNotFound" | "badRequest" | ...: {"code",
//     "message"}});
//   - a metadata service per server (one loopback listener each), without
//     authentication: /openstack/latest/meta_data.json (uuid, name,
//     hostname, availability_zone, project_id, launch_index, meta,
//     public_keys, keys, devices), /openstack/latest/network_data.json (a
//     link per port, one per network that holds a fixed address; per port a
//     network for its first fixed IPv4 address, type ipv4, or ipv4_dhcp
//     without the address when Server.DHCP, and for its first IPv6 address,
//     type ipv6; no routes or DNS services), /openstack/latest/user_data
//     (404 when the server has none) and the EC2-compatible
//     /latest/meta-data/local-ipv4 (the first fixed IPv4 address). A server
//     that is not ACTIVE answers nothing (connections close), and neither
//     does one made with NoMetadataService (a cloud that offers only config
//     drives);
//   - config drives: WriteConfigDrive writes a server's drive into a
//     directory as Nova lays it out (openstack/latest/meta_data.json,
//     network_data.json, vendor_data.json, vendor_data2.json, user_data;
//     ec2/latest/meta-data.json with local-ipv4, unless
//     DriveOptions.WithoutEC2, and user-data), which is what the agent reads
//     from a mounted drive. Not the ISO 9660 or VFAT image, nor its label;
//   - servers a test adds (Put) with a status, tags, metadata and a creation
//     time, SetStatus, Delete; OnList runs before each page is served, so a
//     test can change servers between pages as other API clients would;
//   - Neutron's routers (routers.go, at the catalog's network endpoint,
//     /networking, with its version document): GET /v2.0/extensions
//     (extraroute, and extraroute-atomic unless
//     Options.NoAtomicExtraRoutes), GET and PUT /v2.0/routers/{id} (routes
//     replaced whole; If-Match: revision_number=N answered 412 when stale)
//     and PUT .../add_extraroutes and .../remove_extraroutes (idempotent;
//     404 without extraroute-atomic), with Neutron's checks: a destination
//     that is a network address, a next hop on a subnet of the router's
//     interfaces (PutSubnet, PutRouter) and not the router's own address
//     there (400 InvalidRoutes), at most Options.MaxRoutes routes (default
//     30: 400 RoutesExhausted), strict bodies, Neutron's error bodies;
//     methods router-get, router-update, router-add-routes,
//     router-remove-routes, extensions;
//   - the servers' ports (ports.go): one per fixed address in a subnet,
//     its id derived from the server's and the address; GET /v2.0/ports
//     (device_id, network_id, id, fixed_ips=ip_address=...) and PUT
//     /v2.0/ports/{id} with allowed_address_pairs (If-Match; 409 without
//     port security, SetPortSecurity); allowed-address-pairs and
//     port-security listed unless Options.NoAllowedAddressPairs; methods
//     port-list, port-update;
//   - Octavia v2 (octavia.go, octavia_api.go, octavia_validate.go, at the
//     catalog's load-balancer endpoint, /load-balancer, its version
//     document at the root, /v2 and /v2.0): load balancers made fully
//     populated in one POST (listeners with named default pools, members,
//     health monitors; the VIP on DefaultSubnetID), listeners, pools,
//     members (the batch PUT), health monitors; every change leaves the
//     load balancer PENDING_* until it settles (LBOptions.PendingFor, or
//     Settle), then ACTIVE (or ERROR: FailBuilds), a change meanwhile
//     answered 409; LBOptions.Quota (403), cascade delete, list filters and
//     tags filters, limit/marker pages, strict bodies, Octavia's error
//     bodies; PutLoadBalancer and SetProvisioning for out of band states;
//     methods lb-*, listener-*, pool-*, member-list, member-batch,
//     monitor-*;
//   - Neutron's floating IPs (floatingips.go): made on
//     DefaultFloatingNetworkID, associated with a load balancer's VIP port
//     (port_id null detaches), freed when the port goes; methods fip-*;
//   - a data plane (cloudtest.DataPlane, DataPlanePrefix 127.84.0.0/16):
//     each ACTIVE load balancer's listeners on its VIP and its floating
//     IPs, forwarded to its members with its monitors' checks (LBHealthy);
//   - counters (Calls: auth, list, get, metadata, unauthorized) and faults:
//     Fail (the next n calls of auth, list, get or metadata answer a status
//     with the service's error body), SetDown (an outage: connections close
//     unanswered), ExpireTokens (every token issued so far expires now),
//     Revoke (the application credential is deleted: auth fails).
//
// Its listeners, counters, faults and hang-ups are cloud/cloudtest's; what
// is here is OpenStack's own.
//
// Not modelled: every other service (Neutron beyond the above, Octavia's
// L7 policies, TLS, flavors beyond one and quotas beyond load balancers,
// Glance, Cinder) and
// Compute resource, password and token auth, scoped-token rules beyond the
// application credential's project, policy (every credential may list),
// the admin-only fields and filters, changes-since, several sort keys at
// once, vendor data, the metadata service's older versions and EC2 tree
// beyond local-ipv4, and rate limiting (a cloud's 429 is Fail).
package openstacktest
