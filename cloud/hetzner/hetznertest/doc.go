// Package hetznertest is a Hetzner Cloud-compatible endpoint for tests,
// reached by the real client library, hcloud-go v2 (hcloud.WithEndpoint set
// to Cloud.Endpoint(), and the metadata client's WithEndpoint, or the
// agent's metadataURL, set to Cloud.MetadataURL of one server). Everything
// listens on 127.0.0.1 and every server address is a loopback address.
//
// Modelled, after Hetzner's documented Cloud API:
//   - authentication: every call needs Authorization: Bearer <token>
//     (Options.Token); others answer 401 unauthorized;
//   - the error body {"error": {"code", "message", "details"}}, with the
//     API's codes (unauthorized, not_found, invalid_input with
//     details.fields, rate_limit_exceeded, and what Fail injects);
//   - rate limiting: a budget of Options.RateLimit requests per hour (3600
//     by default), refilled evenly (one a second at 3600), the headers
//     RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset (when the
//     budget is full again, Unix seconds) on every answer, and 429
//     rate_limit_exceeded when it is spent;
//   - GET /v1/servers with label_selector (Kubernetes' grammar, as the
//     Cloud API's: k==v, k=v, k!=v, k, !k, k in (...), k notin (...),
//     joined by commas; k>n and k<n refused), name, status, sort (id, name, created, each :asc
//     or :desc; by id without one), page (from 1) and per_page (1-50,
//     default 25; Options.PageLimit lowers the largest page served, as the
//     answer's per_page says); the answer {"servers": [...], "meta":
//     {"pagination": {page, per_page, previous_page, next_page, last_page,
//     total_entries}}}, previous_page and next_page null at the ends; a
//     page past the last is empty. Unknown parameters, per_page out of
//     range and unsupported selectors are 400 invalid_input;
//   - GET /v1/servers/{id}, 404 not_found for an unknown id;
//   - private networks (networks.go; PutNetwork, Network): GET /v1/networks
//     (name, label_selector, page, per_page) and GET /v1/networks/{id}, the
//     network object with id, name, ip_range (loopback here, where
//     Hetzner's is of RFC 1918), one cloud subnet of that range, routes,
//     the servers attached to it (by their private_net entries), and
//     fixed protection, labels and created; POST
//     /v1/networks/{id}/actions/add_route and delete_route
//     ({destination, gateway}), answered 201 with a running action (see
//     actions.go), with the API's checks: the destination an IPv4 network
//     within RFC 1918 space or 0.0.0.0/0, not holding 172.31.1.1, not
//     overlapping the network's range or another route's destination
//     ("network route destination overlaps with another subnetwork or
//     network route"); the gateway inside the network's range ("network
//     route gateway not part of the network IP range"), neither its first
//     address nor 172.31.1.1 ("invalid gateway"); all invalid_input. A
//     change while the network's previous action runs is 409 conflict; an
//     unknown network, or deleting a route it lacks, is not_found (the
//     reference names no code for the latter). Calls are counted as
//     network-list (GET /networks), route-list (GET /networks/{id}),
//     route-create and route-delete, which Fail can fail;
//   - actions (actions.go): a change answers an action, "running"; GET
//     /v1/actions?id=... (ids required) and GET /v1/actions/{id} show it
//     "success" once Options.ActionTime has passed (0: at the first read),
//     or "error" with the code FailAction gave (its change then not made);
//     polls are counted as action-get;
//   - load balancers (loadbalancers.go, the model and PutLoadBalancer,
//     LoadBalancers, CCMLoadBalancer, AddCertificate; loadbalancers_api.go,
//     the handlers; loadbalancers_validate.go, the requests' checks;
//     loadbalancers_wire.go, the bodies; loadbalancers_dataplane.go, the
//     traffic): GET /v1/load_balancers (label_selector, name, sort,
//     pages) and /v1/load_balancers/{id},
//     POST (create: name, load_balancer_type, location or network_zone,
//     algorithm, labels, services, server targets, public_interface,
//     network), PUT (name, labels), DELETE (answered with its action), and
//     the actions add_target, remove_target, add_service, update_service,
//     delete_service, change_algorithm, change_type, attach_to_network,
//     detach_from_network, enable_public_interface and
//     disable_public_interface, each answering an action; the API's
//     refusals: invalid_input naming the field (unknown type, location,
//     network zone or field, both of the last two, labels against the
//     label rules or under hetzner.cloud/, ports out of range, https
//     without certificates, unknown certificates), uniqueness_error (a
//     taken name), 422 source_port_already_used, target_already_defined,
//     load_balancer_not_attached_to_network,
//     server_not_attached_to_network, missing_ipv4,
//     load_balancer_already_attached, load_balancer_public_interface_disabled,
//     invalid_load_balancer_type, 423 locked (an action while the load
//     balancer's previous one runs), 403 resource_limit_exceeded (the type's
//     services and targets: lb11 5 and 25, lb21 15 and 75, lb31 30 and
//     150) and protected, 404 not_found; counted as lb-list, lb-get,
//     lb-create, lb-update (PUT and every action) and lb-delete. A data
//     plane (cloudtest.DataPlane, 127.82.0.0/16) serves every load
//     balancer's services on its public IPv4 and, while attached to a
//     network, on its private IP (a second VIP), forwarding TCP to each
//     target's public IPv4 or, with use_private_ip, its address in the
//     load balancer's network, at the destination port, with the
//     service's health check (TCP, or HTTP on its path); Close stops it;
//   - the server object with the fields of the answer the API gave in
//     hcloud-go's recording (../testdata, compared by genuine_test.go): id,
//     name, status, created (2025-12-15T15:22:19Z form, UTC), public_net
//     (ipv4 and ipv6 objects or null; the IPv6 is the server's /64),
//     private_net (network id, ip, alias_ips, mac_address), server_type
//     (with category, deprecation, prices and locations), location (name,
//     network_zone, ...), image (a fixed Debian 13), labels and the other
//     fields with fixed values; no datacenter (the API dropped it on
//     2026-07-01);
//   - the server metadata service, one listener per server, without
//     authentication as Hetzner's: /hetzner/v1/metadata (the YAML
//     document, with the keys of cloud-init's sample: network-config and
//     network-sysconfig for the public interface among them), and below it
//     hostname, instance-id, public-ipv4, region (the network zone),
//     availability-zone (the location's datacenter name) and
//     private-networks (YAML: ip, alias_ips, interface_num, numbered after
//     the public interface, mac_address, network_id, network_name,
//     network, subnet, gateway); /hetzner/v1/userdata. A server that is not
//     running answers nothing (connections close);
//   - servers a test adds (Put) with a status and a creation time,
//     SetStatus, Delete; OnList runs before each page is served, so a test
//     can change servers between pages as other API clients would;
//   - counters (Calls: list, get, metadata, unauthorized) and faults:
//     Fail and FailPage (the next n calls, or of one page, answer a status
//     and error code), SetDown (an outage: connections close unanswered),
//     OmitPagination (answers without meta.pagination).
//
// Not modelled: every other resource and action, load balancers' IP and
// label selector targets, managed certificates, primary IPs, reverse DNS,
// metrics and HTTP features of the data plane (it forwards TCP, speaks no
// PROXY protocol and ends no TLS), the Link header,
// set-based label selectors (k in (...), k notin (...)), the rate limit's
// burst rules beyond the even refill, floating and primary IPs, firewalls,
// placement groups, Robot servers, several IPv6 addresses, and metadata
// other than the paths above.
package hetznertest
