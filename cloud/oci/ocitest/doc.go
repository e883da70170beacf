// Package ocitest is an OCI-compatible endpoint for tests, reached by the
// real oci-go-sdk (core.ComputeClient and core.VirtualNetworkClient with
// their Host set to Cloud.Endpoint, signing with the API key of the config
// file Cloud.WriteAPIConfig writes) and by mooring's node agent (metadataURL
// set to Cloud.MetadataURL of one instance). Everything listens on
// 127.0.0.1 and every instance address is inside 127.0.0.0/8.
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
//   - Request signing: every API request must carry OCI's
//     Authorization: Signature header with the keyId
//     tenancy/user/fingerprint of the endpoint's API key, algorithm
//     rsa-sha256, the headers date (request-target) host, and a date within
//     5 minutes of now; the signature is checked by signing the request
//     again with oci-go-sdk's own signer and the endpoint's key and
//     comparing (RSA PKCS #1 v1.5 is deterministic). Anything else is 401
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
//     /opc/v2/vnics/, and the instance principal's identity:
//     /opc/v2/identity/cert.pem, key.pem (PKCS #1) and intermediate.pem.
//     It closes connections unanswered while the instance is not RUNNING.
//   - Instance certificates from a CA the Cloud makes (a root and an
//     intermediate, RSA 2048): the subject OCI gives them (common name the
//     instance OCID; organizational units opc-certtype:instance,
//     opc-instance:<OCID>, opc-compartment:<OCID>, opc-tenant:<OCID>), a
//     new key with each. Rotation: the metadata service serves a new
//     certificate and key once the current one is Options.RotateEvery old
//     (default 1h; OCI says only "multiple times a day"), each valid
//     Options.CertLifetime (default 2h 1min, as a genuine one); Rotate
//     replaces one at once. The intermediate is named as OCI's (common
//     name ... Identity Intermediate r2, organizational unit
//     opc-device:<fingerprint>).
//   - Fault injection (Fail) and counters (Calls) per method:
//     ListInstances, GetInstance, ListVnicAttachments, GetVnic, identity;
//     refused signatures count as unauthenticated.
//
// Not modelled: the SDK's region and realm lookups (the tests set the
// endpoints), any write API, filters and sorting of lists (lifecycleState,
// displayName, sortBy), subcompartments, IAM policies (every signed request
// may read everything), secondary VNICs and IPv6, OCI's own certificate
// lifetimes (not published), revocation (OCI publishes none an approver
// could read), eventual consistency, rate limits other than injected 429s,
// the metadata service's other paths and v1.
package ocitest
