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
//
// Not modelled: other endpoints and methods, token scopes (any request
// with the token is allowed), the name and type filters, page tokens,
// case-insensitive tag matching (tags match exactly), the per-minute rate
// limit, reserved IPs (the anchor address is in the metadata document but
// routes nothing), several private or public networks, GPU droplets, and
// the metadata service's other paths.
package digitaloceantest
