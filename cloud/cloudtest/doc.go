// Package cloudtest is the machinery the test endpoints of the cloud
// backends (cloud/<name>/<name>test) share, so that an endpoint holds only
// what is its cloud's own (its wire format, its instances, its evidence):
//
//   - Servers: the endpoint's API and its per-instance metadata services
//     on loopback listeners, started once each and closed together;
//   - Counter and Faults: calls counted by method, and the failures a test
//     injects into the next calls of a method (or of one page of a list);
//   - Base, Outage and Pages: what an endpoint embeds, its servers,
//     counter and faults with Close, Calls and Fail, SetOutage and
//     BeforePage; Started (NewStarted's body); Table, what a test sets by
//     key (a page's fault, a short page);
//   - Store: the endpoint's instances by id (defaults, ids and creation
//     times given by Put, copies in and out, changes, a sorted listing),
//     and Hook, the function a test runs before each page of a list;
//   - Bucket and Window: request rate limits (a token bucket, a sliding
//     window) and the RateLimit-* headers;
//   - Page: the arithmetic of page/per_page pagination;
//   - Shape, DiffShapes and At: the fields and kinds of a decoded JSON
//     answer, compared with a genuine one's (the endpoints' tests on
//     published artefacts);
//   - HangUp (a machine that is off answers nothing), Unserved, WriteJSON,
//     DecodeStrict (a request body, unknown fields refused), Bearer,
//     MustLoopback and MustIPv6Loopback (a test's instance addresses stay
//     on loopback), Start; Positive, AtMost and Clock (an option's
//     defaults);
//   - a test's own requests: GetJSON (an endpoint's JSON answer), Send
//     and Do; ServeName (a backend answering its name) and Ask (the line a
//     load balancer's address answers).
package cloudtest
