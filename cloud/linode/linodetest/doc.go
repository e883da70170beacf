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
//
// Not modelled: other endpoints and methods, token scopes (any request
// with the token is allowed), +order_by, +and, +or and other filters,
// the Metadata service's text/plain documents and its other paths, VPC and
// VLAN interfaces, shared and additional addresses, IPv6 ranges, and LKE.
package linodetest
