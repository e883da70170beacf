// Package ocitest is an OCI-compatible endpoint for tests, reached by the
// real oci-go-sdk (core.ComputeClient and core.VirtualNetworkClient with
// their Host set to Cloud.Endpoint, signing with the API key of the config
// file Cloud.WriteAPIConfig writes) and by mooring's node agent (metadataURL
// set to Cloud.MetadataURL of one instance). Everything listens on
// 127.0.0.1 and every instance address is a loopback address (IPv4 in
// 127.0.0.0/8; an instance's IPv6 address is ::1).
//
// Modelled, after Oracle's documented wire formats and behaviours:
//   - Core Services API 20160918, GET only: ListInstances
//     (/20160918/instances?compartmentId=C) and ListVnicAttachments
//     (/20160918/vnicAttachments?compartmentId=C[&instanceId=I]), paged by
//     limit (1-1000, default 100; Options.MaxPageSize lowers the largest
//     page) and page (the opaque opc-next-page of the answer before, tied
//     to the list and compartment; another is 400 InvalidParameter);
//     GetInstance (/20160918/instances/I) and GetVnic (/20160918/vnics/V),
//     404 NotAuthorizedOrNotFound for unknown ones. Bodies are the SDK's
//     own types (core.Instance, core.VnicAttachment, core.Vnic) as JSON;
//     errors OCI's {"code", "message"}.
//   - Virtual Network's part the security rules of Service load
//     balancers use (vcn.go): GetSubnet (cidrBlock, securityListIds,
//     vcnId; a subnet's CIDR must be inside 127.0.0.0/8), GetSecurityList
//     and UpdateSecurityList (PUT: the arrays given replace the list's;
//     an etag that changes with every change, If-Match compared, 412
//     NoEtagMatch on a stale one; BeforeSecurityListUpdate runs a test's
//     writer in between), and NSGs: CreateNetworkSecurityGroup (compartment
//     and a known VCN required; opc-retry-token answers the same NSG, 409
//     InvalidatedRetryToken once it is deleted), ListNetworkSecurityGroups
//     (compartmentId, vcnId or vlanId; displayName exact; sortBy and
//     sortOrder; paged), Get, Update (tags, If-Match) and Delete
//     (If-Match; 409 while NSGInUse says something holds it; other NSGs'
//     rules naming it stay with isValid false), the rules' list (by
//     direction, paged), addSecurityRules (1 to 25 rules, ids given as
//     six hex digits, at most 120 rules per NSG: 400 LimitExceeded; an NSG
//     named as a peer must exist) and removeSecurityRules (1 to 25 ids of
//     its rules). Rules are checked: protocol all or an IANA number,
//     addresses CIDR blocks or NSG OCIDs of the right type, options only of
//     their protocol, port ranges 1 <= min <= max <= 65535, descriptions 1
//     to 255 characters. Bodies are read strictly (an unknown field is 400
//     InvalidParameter, bad JSON 400 CannotParseRequest); counters and
//     faults by method (GetSubnet, GetSecurityList, UpdateSecurityList,
//     CreateNetworkSecurityGroup, GetNetworkSecurityGroup,
//     ListNetworkSecurityGroups, UpdateNetworkSecurityGroup,
//     DeleteNetworkSecurityGroup, ListNetworkSecurityGroupSecurityRules,
//     AddNetworkSecurityGroupSecurityRules,
//     RemoveNetworkSecurityGroupSecurityRules). PutSubnet,
//     PutSecurityList and PutNSG seed them.
//   - The Load Balancer API 20170115 (loadbalancers_api.go) and the
//     Network Load Balancer API 20200501 (networkloadbalancers.go), on the
//     API's listener (the SDK's LB host is Core Services'; the NLB's is
//     the config's networkLoadBalancerEndpoint), one model of both
//     (loadbalancers.go: Balancer, PutBalancer, Balancers): a create of the
//     whole tree (listeners, backend sets, certificates; the NLB answers
//     its body, CREATING), the load balancer's Get, List (compartmentId
//     required; displayName and lifecycleState exact; creation order;
//     paged as the Core lists, LB a bare array, NLB {"items"}), Update
//     (displayName, freeformTags), Delete, updateShape (LB),
//     networkSecurityGroups (at most 5), backend sets' and listeners'
//     Create, Update and Delete, CreateCertificate and ListCertificates
//     (LB), the LB's workRequests and GetWorkRequest of both. Every write
//     answers opc-work-request-id and changes nothing at once: its work
//     request (workrequests.go) is ACCEPTED, IN_PROGRESS, and SUCCEEDED
//     (the change made; the load balancer ACTIVE, an NLB back from
//     UPDATING) once Options.WorkRequestTime (default 20 ms) has passed,
//     or when Settle is called while HoldWorkRequests holds them;
//     FailWorkRequests makes the next ones FAILED (errorDetails BAD_INPUT;
//     a load balancer being created, and an NLB, go FAILED), and
//     StartWorkRequest starts one that changes nothing (another client's).
//     A write while one runs, or to an LB not ACTIVE, is 409
//     (IncorrectState; an NLB's Conflict, "Invalid State Transition");
//     DELETING ends in the load balancer gone (404). Bodies are read
//     strictly and checked: mandatory fields (400 MissingParameter),
//     shapes (fixed names, or flexible with 10 <= min <= max <= 8000
//     Mbps), policies, protocols, health checkers (LB interval
//     1000-1800000 ms, NLB from 10000), a listener's backend set and
//     certificate existing, certificates parsed (and their keys matched),
//     one or two subnet OCIDs (NLB one), display names of 1-1024
//     characters, the compartment known (400
//     RelatedResourceNotAuthorizedOrNotFound); an opc-retry-token seen
//     answers the same work request. A cloudtest.DataPlane on
//     127.85.0.0/16 (DataPlanePrefix) gives each load balancer its IP once
//     ACTIVE and forwards its listeners (TCP, UDP, TCP_AND_UDP) to its
//     backends that pass its health checker (HTTP path or TCP, checked at
//     most every 2 s); LBHealthy reports them.
//   - The auth service's GET /v1/instancePrincipalRootCACertificates
//     (Cloud.AuthEndpoint, the API's listener), which answers the region's
//     instance identity roots to any signed caller (Oracle's "Retrieving
//     the Instance Identity Root CA Certificate"), as JSON
//     {"certificates": [base64 DER], "refreshIn": RFC 3339}, the shape
//     Teleport's verifier reads (lib/join/oraclejoin); Oracle's page says
//     only "PEM-encoded x.509 root certificates".
//   - Request signing: every request must carry OCI's Authorization:
//     Signature header with the keyId tenancy/user/fingerprint of the
//     endpoint's API key, algorithm rsa-sha256, the headers date
//     (request-target) host (a POST or PUT also content-length
//     content-type x-content-sha256, whose values must be the body's length
//     and base64 SHA-256), and a date within 5 minutes of now; the
//     signature is checked with the API key's public key (crypto/rsa) over
//     the digest of the signing string that oci-go-sdk's own signer builds
//     for the request as received (the SDK hands it to the key's
//     crypto.Signer; the SDK has no verifier). Anything else is 401
//     NotAuthenticated.
//   - Instances: lifecycle states as set by Put and SetState; a
//     TERMINATED instance is still listed (OCI lists them for a while),
//     its VNIC detached; freeform and defined tags; the region as Compute
//     answers it (its short key iad for us-ashburn-1); availability
//     domains with their tenancy prefix (Uocm:US-ASHBURN-AD-1).
//   - The instance metadata service v2, one listener per instance: every
//     request needs Authorization: Bearer Oracle (401 otherwise), none may
//     carry Forwarded, X-Forwarded-For or X-Forwarded-Host (403).
//     /opc/v2/instance/ (id, displayName, compartmentId, availabilityDomain,
//     faultDomain, region, canonicalRegionName, shape, timeCreated, ...),
//     /opc/v2/vnics/ (vnicId, nicIndex, privateIp unless the instance is
//     IPv6-only, ipv6Addresses when it has an IPv6 address), and the
//     instance principal's identity:
//     /opc/v2/identity/cert.pem, key.pem (PKCS #1) and intermediate.pem.
//     It closes connections unanswered while the instance is not RUNNING.
//   - Instance certificates from CAs the Cloud makes (RSA 2048): the
//     subject OCI gives them (common name the instance OCID; organizational
//     units opc-certtype:instance, opc-instance:<OCID>,
//     opc-compartment:<OCID>, opc-tenant:<OCID>), the extended key usage
//     clientAuth, a new key with each. Rotation: the metadata service
//     serves a new certificate and key once the current one is
//     Options.RotateEvery old (default 1h; OCI says only "multiple times a
//     day"), each valid Options.CertLifetime (default 2h 1min, as a
//     genuine one); Rotate replaces one at once. Intermediates are per
//     device, as OCI's (one instance's genuine certificates a week apart
//     came from two): each instance's come from an intermediate of its
//     own, valid 90 days as a genuine one, named as OCI's (common name ...
//     Identity Intermediate r2, organizational unit
//     opc-device:<fingerprint>); RotateIntermediates moves every instance
//     to a new one. Roots rotate on demand: RotateRoots publishes a new
//     root of the same name and a new key beside the others (new
//     intermediates are its), RetireRoots withdraws all but the newest.
//   - Fault injection (Fail) and counters (Calls) per method:
//     ListInstances, GetInstance, ListVnicAttachments, GetVnic, identity,
//     roots, and the Method* constants of the load balancer APIs; refused
//     signatures count as unauthenticated.
//
// Not modelled: the SDK's region and realm lookups (the tests set the
// endpoints), of the load balancers: hostnames, path route sets, rule
// sets, routing policies, SSL cipher suites, backend-set SSL, session
// persistence, reserved and IPv6 addresses, defined tags, backends' own
// calls, work request logs and the NLB's list of work requests; any
// other write API of Core Services (VCNs, subnets and
// security lists are made by the tests only),
// UpdateNetworkSecurityGroupSecurityRules, NSGs' VNIC members, the rule
// limits of security lists, filters and sorting of the instance lists
// (lifecycleState, displayName, sortBy), subcompartments, IAM policies (every signed request
// may read everything), secondary VNICs and more than one IPv6 address,
// OCI's own certificate lifetimes (not published), how Oracle rotates its
// roots (not published), the auth service's other paths (federation,
// /v1/x509), revocation (OCI publishes none an approver could read),
// eventual consistency, rate limits other than injected 429s, the
// metadata service's other paths and v1.
package ocitest
