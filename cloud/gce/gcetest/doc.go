// Package gcetest is a GCE-compatible endpoint for tests, reached by the
// real client libraries: google.golang.org/api/compute/v1 (with
// option.WithEndpoint(Cloud.Endpoint()) and no authentication) and
// cloud.google.com/go/compute/metadata (GCE_METADATA_HOST, or the agent's
// metadataURL, set to Cloud.MetadataHost of one instance). Everything
// listens on 127.0.0.1 and every instance address is inside 127.0.0.0/8.
//
// Modelled, after Google's documented wire formats and behaviours:
//   - Compute API v1 instances.aggregatedList
//     (GET /compute/v1/projects/P/aggregated/instances): filter of the one
//     form labels.KEY = "VALUE" (others are 400 invalid filter), maxResults
//     1-500 (default 500; Options.MaxPageSize lowers the largest page),
//     pageToken (a cursor tied to project and filter; another is 400),
//     items keyed zones/ZONE, an instance's zone and machineType as
//     resource URLs, networkInterfaces with networkIP and a ONE_TO_ONE_NAT
//     access config carrying natIP, id as a decimal string.
//   - aggregatedList's scopes: every zone of the project without an
//     instance on the page is still an item, with the warning
//     NO_RESULTS_ON_PAGE. A zone made unreachable (SetUnreachable) lists
//     none of its instances; its item carries the warning UNREACHABLE, and
//     the answer's unreachables names it when the caller set
//     returnPartialSuccess=true. A client that reads a list missing a zone
//     as "those instances are gone" is caught by it.
//   - instances.get (GET /compute/v1/projects/P/zones/Z/instances/NAME),
//     404 in Google's error JSON for unknown ones. Unknown projects answer
//     404. Zone names are any of Google's forms, such as the AI zone
//     us-central1-ai1a.
//   - Instance statuses are set by Put and SetStatus; stopped (TERMINATED)
//     instances have no NAT IP.
//   - The metadata server, one listener per instance: every request needs
//     Metadata-Flavor: Google (403 otherwise) and none may carry
//     X-Forwarded-For (403); answers carry Metadata-Flavor: Google. Paths
//     under /computeMetadata/v1/: instance/id, instance/name,
//     instance/hostname, instance/zone (projects/NUMBER/zones/ZONE),
//     instance/machine-type, instance/network-interfaces/0/ip,
//     instance/network-interfaces/0/access-configs/0/external-ip,
//     project/project-id, project/numeric-project-id, and
//     instance/service-accounts/default/identity?audience=A[&format=full]
//     (400 without an audience). The metadata server closes connections
//     unanswered while the instance is not RUNNING.
//   - Identity tokens: RS256 JWTs signed by the Cloud's signing key, kid
//     in the header, iss https://accounts.google.com (Options.Issuer), aud
//     the audience, azp and sub the service account's id, email, iat and
//     exp one hour later; format=full adds google.compute_engine
//     {instance_creation_timestamp, instance_id, instance_name,
//     project_id, project_number, zone}: the layout of a genuine token
//     (../testdata/genuine-token.json).
//   - The published keys: a JWK set at /oauth2/v3/certs and key ids to PEM
//     certificates at /oauth2/v1/certs, answered with Cache-Control
//     "public, max-age=N, must-revalidate, no-transform" and the matching
//     Expires (Options.CertsMaxAge, default six hours: Google lets its keys
//     be cached for hours, and tells verifiers to refresh by max-age).
//   - Key rotation in Google's order: Publish puts a new key in the set
//     while the current one still signs, Activate makes it sign (the old
//     one stays published, so its tokens still verify), Retire withdraws
//     the old one. Rotate publishes and activates at once, which Google
//     does not do: it is for tests of a verifier meeting a kid it has not
//     fetched.
//   - Fault injection (Fail) and counters (Calls) per method:
//     aggregatedList, get, identity, certs.
//   - Networking resources, each write answering an operation
//     (operations.go): global routes (routes.go), zonal unmanaged instance
//     groups and zones.list (instancegroups.go), regional backend services
//     (backendservices.go), global and regional health checks
//     (healthchecks.go); their file's comment says what each checks and
//     answers. Their lists take both of the API's filter forms (regular
//     expressions with eq/ne, comparisons with = and !=), maxResults and
//     pageToken (listing.go); references are taken as full or partial
//     URLs, of any host, and answered as full URLs of
//     www.googleapis.com (refs.go). FailOperations makes a write's
//     operation end in error.
//   - Shielded VMs (shielded.go): an instance's shieldedInstanceConfig
//     (enableVtpm, enableSecureBoot, enableIntegrityMonitoring) in its
//     record; instances.getShieldedInstanceIdentity (GET .../instances/
//     NAME/getShieldedInstanceIdentity: kind, signingKey {ekPub, ekCert},
//     the AK's public key and certificate in PEM, encryptionKey {ekPub},
//     the EK's; 400 for an instance without a vTPM); an EK/AK CA (a root
//     and an intermediate, RSA, made on first use) issuing AK certificates
//     as Google's EK/AK CA does (subject L=zone, O=Google Compute Engine,
//     OU=project, CN=instance id; digital signature; the instance
//     information extension 1.3.6.1.4.1.11129.2.1.21: zone, project number
//     and id, instance id and name, isProduction), whose layout is that of
//     a genuine certificate (../testdata/genuine-ak-cert.pem);
//     ProvisionVTPM makes a TPM (a simulator) an instance's vTPM: the RSA
//     AK template at NV 0x01c10001, the AK's certificate at 0x01c10000.
//
// Not modelled: authentication of the Compute API (clients call it without
// credentials); other filters and orderBy; OR and NOT in filters; networks
// as resources a route must name (any network name stands); an instance's
// canIpForward, which GCE needs for a route's next hop to receive traffic;
// the rule that an instance may be in one load-balanced instance group
// only; eventual consistency (a Put or
// Delete is seen by the next list at once, where Google's lists may lag a
// change); Google's own rotation schedule (here keys change only when a
// test says so); a max-age that varies between answers, Age, ETag and
// conditional requests on the certs; regions other than the zones' own,
// regional scopes (regions/R) in aggregated lists, zones beyond those of
// a few regions and those the project uses (zones.list), IPv6, several network interfaces, rate limits
// other than injected 429s, and metadata other than the paths above
// (no wait-for-change, no recursive listing); Shielded VMs' ECC keys
// (eccP256SigningKey), EK certificates, integrity monitoring's reports and
// the Shielded VM update calls; the exact error of getShieldedInstanceIdentity
// for an instance without a vTPM.
package gcetest
