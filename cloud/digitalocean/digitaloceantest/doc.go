// Package digitaloceantest is a DigitalOcean-compatible endpoint for
// tests, reached by the real client library (github.com/digitalocean/godo,
// with its base URL set to Cloud.Endpoint) and by the backend's metadata
// client (the agent's metadataURL set to Cloud.MetadataURL of one
// droplet). Everything listens on 127.0.0.1 and every droplet address is
// inside 127.0.0.0/8 (::1 the only IPv6 address).
//
// Modelled, after DigitalOcean's documented API (the OpenAPI description
// of API v2):
//   - Authentication: every API request needs Authorization: Bearer
//     <token> (Cloud.Token); otherwise 401 {"id": "unauthorized", ...}.
//   - Errors: the documented body {"id", "message", "request_id"} with the
//     id of the status (bad_request, unauthorized, not_found,
//     too_many_requests, server_error, service_unavailable), and an
//     X-Request-Id header on every answer.
//   - Rate limit: RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
//     on every answer, a budget of 5,000 requests per sliding hour
//     (Options.HourlyLimit); beyond it 429 too_many_requests. The
//     per-minute limit (250) is not modelled.
//   - GET /v2/droplets with tag_name, page and per_page: droplets carrying
//     exactly that tag, in ascending id order (an assumption: the API
//     documents no order), per_page 1-200 (default 20; above 200 it is
//     lowered to 200), page from 1 (a page past the last is empty). The
//     answer has droplets, links.pages (first and prev after page 1, next
//     and last before the last page, absent on a single page) with
//     absolute URLs, and meta.total. Other parameters (name, type) are
//     400: the backend does not send them.
//   - GET /v2/droplets/{id}: {"droplet": ...}, 404 not_found for an
//     unknown id.
//   - Droplets with the fields of DigitalOcean's documented examples
//     (../testdata, compared by genuine_test.go): id, name, status (new,
//     active, off, archive), created_at (RFC 3339, UTC), size and
//     size_slug, region {slug, name, ...}, networks.v4 (type private for
//     the VPC address, public) and networks.v6 (public), tags, and fixed
//     values for memory, vcpus, disk, disk_info, image, features and
//     vpc_uuid.
//   - One metadata service per droplet (its own listener): GET
//     /metadata/v1.json with droplet_id, hostname, user_data, vendor_data,
//     public_keys, auth_key, region, interfaces.public/private (ipv4
//     ip_address, netmask, gateway; ipv6; the public one's anchor_ipv4;
//     mac; type), floating_ip, reserved_ip, dns, tags and features (every
//     key of the documents cloud-init keeps from droplets); /metadata/v1 without its slash is a 301; other
//     paths 404. A droplet that is not active closes the connections to
//     its metadata service unanswered.
//   - Counters per method (Calls: list, get, metadata) and faults: the
//     next n calls of a method fail with a status (Fail), one page of the
//     list fails (FailPage) or leaves out its last droplet while linking
//     to the next (ShortPage), every API request fails with 503
//     (SetOutage), and a hook runs before each page (BeforePage) for a
//     test to create or delete droplets between pages.
//   - Load balancers (loadbalancers.go): GET /v2/load_balancers (page,
//     per_page as for droplets, oldest first, meta.total and links),
//     GET/PUT/DELETE /v2/load_balancers/{id} (404 not_found for an
//     unknown id; DELETE answers 204) and POST /v2/load_balancers (202).
//     A request is checked as the API documents its fields, every problem
//     a 422 unprocessable_entity naming the field: name, region (required;
//     fixed after creation), forwarding rules (at least one; entry
//     protocols http, https, http2, http3, tcp, udp; ports 1-65535, an
//     entry port once; https, http2 and http3 need a known certificate id
//     (AddCertificate) or TLS passthrough, not both), the health check
//     (http, https, tcp; interval and timeout 3-300 s, thresholds 2-10),
//     size or size_unit (1-100) but not both, http_idle_timeout_seconds
//     30-600, sticky sessions, firewall rules ip:/cidr:, tags as droplet
//     tags, droplet_ids that exist in the region (or a tag, refused: not
//     modelled); over the account's limit (Options.LBLimit, 10) a create
//     is 403. A new load balancer is "new" without an IP until
//     SettleLoadBalancers, or Options.LBBuildTime after its creation; then
//     "active" with a VIP in 127.81.0.0/16 (DataPlanePrefix) where a
//     cloudtest.DataPlane forwards each rule's entry port (tcp, http,
//     https, http2 as TCP, udp as UDP; http3 carries nothing) to every
//     droplet's private address at the target port, with the health
//     check (an https check is made over TCP; Options.HealthCheckSecond
//     shortens its seconds) and the firewall's allow rules as source
//     ranges. Updates keep the id and IP; a destroyed droplet leaves every
//     load balancer; Calls and Fail count lb-list, lb-get, lb-create,
//     lb-update and lb-delete. Not modelled: deny rules, PROXY protocol
//     and TLS in the data plane (bytes pass as they come), redirects,
//     sticky sessions and idle timeouts in the data plane, the
//     droplets and forwarding_rules sub-resources, REGIONAL_NETWORK and
//     GLOBAL load balancers, BYOIP, the "errored" status (only a data
//     plane failure makes it), and the resize limit of once an hour.
//
// Not modelled: other endpoints and methods, token scopes (any request
// with the token is allowed), the name and type filters, page tokens,
// case-insensitive tag matching (tags match exactly), the per-minute rate
// limit, reserved IPs (the anchor address is in the metadata document but
// routes nothing), several private or public networks, GPU droplets, and
// the metadata service's other paths.
package digitaloceantest
