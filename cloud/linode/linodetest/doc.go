// Package linodetest is a Linode-compatible endpoint for tests, reached by
// the real client library (github.com/linode/linodego, with its base URL
// set to Cloud.Endpoint) and by the backend's Metadata service client (the
// agent's metadataURL set to Cloud.MetadataURL of one Linode). Everything
// listens on 127.0.0.1 and every Linode address is inside 127.0.0.0/8 (::1
// the only IPv6 address).
//
// Modelled, after Linode's documented API v4 and Metadata service v1:
//   - Authentication: every API request needs Authorization: Bearer
//     <token> (Cloud.Token); otherwise 401 {"errors": [{"reason": "Invalid
//     Token"}]}.
//   - Errors: the documented body {"errors": [{"reason", "field"}]} under
//     Content-Type application/json (linodego compares it with its Accept
//     header).
//   - Rate limits: X-RateLimit-Limit, X-RateLimit-Remaining and
//     X-RateLimit-Reset (Unix seconds) on every answer, and Retry-After
//     (seconds) with a 429 {"errors": [{"reason": "Too many requests"}]}
//     beyond them: GET of a collection 100 a sliding minute
//     (Options.ListLimit), other requests 800 (Options.Limit). The 10 per
//     second of collections and the 1,600 per two minutes of all requests
//     are not modelled.
//   - GET /v4/linode/instances with page (from 1), page_size (25-500,
//     default 100; outside it 400 with field page_size) and X-Filter
//     {"tags": "<tag>"}: the Linodes whose tags hold that tag, in ascending
//     id order (an assumption: the API documents no order without
//     +order_by), as {"data", "page", "pages", "results"}; pages is at least
//     1, a page past the last is empty. Other parameters and filters are
//     400: the backend sends none.
//   - GET /v4/linode/instances/{id}: the Linode, 404 {"errors": [{"reason":
//     "Not found"}]} for an unknown id.
//   - Linodes as documented: id, label, status (running, offline, booting,
//     ...), created and updated (UTC, 2006-01-02T15:04:05), type, region,
//     ipv4 (the public address, then the private one), ipv6 (SLAAC, with
//     /128), tags, has_user_data, and fixed values for the rest (image,
//     site_type, specs, alerts, backups, hypervisor, host_uuid of 40 hex
//     digits, maintenance_policy, locks, ...): the fields, and the error
//     bodies of an unknown Linode and a spent rate limit, of the real API's
//     answers that linodego recorded (genuine_test.go, ../testdata).
//   - X-Accepted-Oauth-Scopes: linodes:read_only on the list and on a
//     Linode's GET, the scope the real API names for both.
//   - One Metadata service per Linode (its own listener): PUT /v1/token
//     with Metadata-Token-Expiry-Seconds (1-86400, else 400) answers a
//     token as text/plain; GET /v1/instance (id, label, region, type,
//     host_uuid, tags, specs, backups, image) and /v1/network (ipv4
//     public, private and shared with prefix lengths; ipv6) as
//     application/json, and /v1/user-data (base64) need Metadata-Token, a
//     token of this Linode that has not expired (else 401). A Linode that
//     is not running closes the connections to its service unanswered.
//   - Counters per method (Calls: list, get, token, instance, network,
//     userdata, throttled) and faults: the next n calls of a method fail
//     with a status (Fail), one page of the list fails (FailPage) or leaves
//     out its last Linode while results still counts it (ShortPage), every
//     API request fails with 503 (SetOutage), and a hook runs before each
//     page (BeforePage) for a test to create or delete Linodes between
//     pages.
//   - NodeBalancers (nodebalancers.go, the model and the tests' functions;
//     nodebalancers_api.go, the handlers; nodebalancers_validate.go, the
//     requests' checks; nodebalancers_wire.go, the bodies;
//     nodebalancers_dataplane.go, the traffic): GET and POST
//     /v4/nodebalancers (pages as above; X-Filter {"ipv4"}, {"label"} or
//     {"tags"}), GET, PUT (label, client_conn_throttle, tags) and DELETE
//     /v4/nodebalancers/{id},
//     GET and POST .../configs, GET, PUT and DELETE .../configs/{id},
//     POST .../configs/{id}/rebuild (the nodes given replace the
//     config's; one with the id of one it has keeps it) and GET
//     .../configs/{id}/nodes. A NodeBalancer gets its ipv4 and hostname
//     (the address, then .ip.linodeusercontent.com) at creation and keeps
//     them; it is ready at once (the API has no build state). The
//     documented validation answers 400 naming the field (configs[0].port,
//     configs[0].nodes[1].address, ...): a label of 3-32 letters, digits,
//     dashes, underscores and periods (beginning and ending with a letter
//     or digit, unique among the account's), client_conn_throttle 0-20, tags of 3-50
//     characters, region required at creation, type common, premium or
//     premium_40gb; per config a port 1-65535 used once, protocol http
//     (default), https, tcp or udp, proxy_protocol none, v1 or v2 (v1 and
//     v2 only on tcp), the algorithms and stickiness of the protocol,
//     check none, connection, http or http_body, check_interval 2-3600,
//     check_timeout 1-30 and below the interval, check_attempts 1-30,
//     check_path beginning with / for the http checks, check_body for
//     http_body, ssl_cert and ssl_key for https only, a PEM certificate
//     and its key (shown as <REDACTED>, with ssl_commonname and
//     ssl_fingerprint, the SHA-1 of the certificate's DER in
//     colon-separated hex),
//     check_passive false on udp; what a request leaves out takes the
//     defaults of the recorded answers (stickiness none, session on udp;
//     check none; check_timeout 30, or below check_interval; check_attempts
//     3; cipher_suite recommended, none on udp) and check_interval 60 (not
//     recorded);
//     per node an address ip:port, label 3-32, weight 1-255, mode accept,
//     reject, drain or backup. firewall_id at creation attaches the new
//     NodeBalancer to that Cloud Firewall (400 when there is none); vpcs
//     (one entry: a subnet of the account's, an IPv4 range in CIDR
//     notation) gives it VPC backends, and a node with a subnet_id must be
//     at a Linode's address in that subnet, one of the NodeBalancer's vpcs
//     (vpc_config_id in its answer). A field the endpoint does not model
//     is a 400 naming it. Methods lb-list, lb-get (a NodeBalancer, its configs, a
//     config's nodes), lb-create, lb-update (the NodeBalancer's PUT and
//     every change of a config) and lb-delete count and fail as the others;
//     reads answer X-Accepted-Oauth-Scopes nodebalancers:read_only,
//     changes nodebalancers:read_write.
//   - The NodeBalancers' data plane (cloudtest.DataPlane): every
//     NodeBalancer listens on its ipv4, an address of 127.83.0.0/16, and
//     forwards each config's port (TCP for tcp, http and https; UDP for
//     udp) to the config's nodes in mode accept or backup, checking them as
//     the config says (connection: TCP; http and http_body: an HTTP GET of
//     check_path, the body not read; udp's checks on udp_check_port), every
//     check_interval, a node down after check_attempts failures. It does
//     not speak HTTP or TLS itself, nor send PROXY protocol headers, nor
//     throttle clients (an https port's bytes are forwarded as TCP: TLS
//     is not ended). Its clients are those a NodeBalancer's enabled Cloud
//     Firewalls let through: under inbound policy DROP the addresses of
//     the TCP or UDP ACCEPT rules that cover every port of the
//     NodeBalancer; under ACCEPT without DROP rules, all; what its source
//     ranges cannot express (a deny list, a rule of some ports only) it
//     fails closed (no client). Close stops it.
//   - Cloud Firewalls (firewalls.go): made by the test (PutFirewall, as a
//     user in the Cloud Manager; ChangeFirewall changes their rules out
//     of band), with inbound rules and policies; GET
//     /v4/networking/firewalls/{id}, .../rules and .../devices, POST
//     .../devices (type nodebalancer; 400 for a NodeBalancer that already
//     has another enabled firewall, as Linode documents one enabled
//     firewall at a time; 404 for an unknown one) and DELETE
//     .../devices/{id}; GET /v4/nodebalancers/{id}/firewalls. A deleted
//     NodeBalancer leaves its firewalls. Methods fw-get and fw-update;
//     answers X-Accepted-Oauth-Scopes firewall:read_write.
//   - VPCs (vpcs.go): made by the test (PutVPC, with subnets of loopback
//     ranges; AddVPCAddress gives a Linode an address in a subnet); GET
//     /v4/vpcs (with their subnets), .../{id}/subnets and .../{id}/ips,
//     each one page. Method vpc-get; answers X-Accepted-Oauth-Scopes
//     vpc:read_only.
//   - Where the endpoint differs from Linode: a node's address must be a
//     Linode's private address (PrivateIP, on loopback here) where Linode
//     wants one in 192.168.128.0/17 of the NodeBalancer's region; the
//     region is not checked against the Linodes'.
//
// Not modelled: other endpoints and methods (a NodeBalancer node's own
// calls, stats, a NodeBalancer's VPC configs' own calls, VPCs' creation
// and changes; firewalls' list, creation, rules' PUT and Linode devices),
// token scopes (any request
// with the token is allowed), +order_by, +and, +or and other filters,
// the Metadata service's text/plain documents and its other paths, VPC and
// VLAN interfaces, shared and additional addresses, IPv6 ranges, and LKE.
package linodetest
