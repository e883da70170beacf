// Package awstest is an AWS-compatible endpoint for tests: one account in
// one region, reached by the real aws-sdk-go-v2 clients (ec2 and sts with
// BaseEndpoint set to Cloud.Endpoint, feature/ec2/imds with Endpoint set to
// Cloud.IMDS, credentials/ec2rolecreds on top of it). Everything listens on
// 127.0.0.1 and every instance address is inside 127.0.0.0/8.
//
// Give SDK clients HTTPClient (Cloud.Config does): on loopback the SDK can
// close a request body under net/http, which then drops the connection
// under a large answer (see HTTPClient); the API holds its answers back a
// millisecond to make that rare for clients that do not.
//
// Modelled, after AWS's documented wire formats and behaviour:
//   - Signature Version 4 on every EC2 and STS call, checked by signing the
//     request again with the SDK's own v4 signer (only the headers the
//     client signed, the same method, path, query and body) and comparing in
//     constant time. Refused: a missing Authorization
//     (MissingAuthenticationToken), a malformed one, or one whose
//     SignedHeaders lack host or x-amz-date (IncompleteSignature); a scope of
//     another service, or of another region than the endpoint's (the Host
//     header: AWS's global sts.amazonaws.com and ec2.amazonaws.com accept
//     only us-east-1, <service>[-fips].<region>.amazonaws.com[.cn] only
//     <region>, any other host the cloud's region; AWSNamesClient sends
//     requests for AWS's host names to the cloud), a scope date other than
//     X-Amz-Date's, a
//     date more than 15 minutes from Now either way ("Signature expired" /
//     "Signature not yet current"), and any other mismatch
//     (SignatureDoesNotMatch); an unknown access key, a wrong or missing
//     session token for role credentials or any session token with a user's
//     key (InvalidClientTokenId); expired role credentials (ExpiredToken).
//     Bodies above 64 KiB are refused (413 RequestEntityTooLarge).
//   - Responses carry Now in their Date header, so the SDK's clock skew
//     correction works against a Cloud whose clock is not the machine's.
//   - EC2 DescribeInstances (Query API version 2016-11-15): DryRun,
//     MaxResults 5-1000, NextToken (a cursor in instance id order, tied to
//     the query's ids and filters), InstanceId.N (InvalidInstanceID.NotFound,
//     InvalidInstanceID.Malformed; not combinable with MaxResults), Filter.N
//     on instance-id, instance-state-name, instance-state-code,
//     private-dns-name, private-ip-address, availability-zone,
//     instance-type, tag-key, tag-value and tag:<key> with EC2's * and ?
//     wildcards; unknown parameters and filters are refused. Each instance
//     is in a reservation of its own, with one network interface. Stopped
//     instances show no public address; terminated ones no addresses or DNS
//     names; deleted ones are not shown.
//   - EC2's eventual consistency after launch (NewInstanceDelay,
//     SetNewInstanceDelay): a new instance is left out of
//     DescribeInstances lists and DescribeInstanceTopology, and unknown by
//     id (InvalidInstanceID.NotFound), for a while; its metadata service
//     answers all along.
//   - EC2 DescribeAvailabilityZones: the region's zones (Options.Zones;
//     default a-f in us-east-1, a-c elsewhere, and instances may only be in
//     them), their ids (<region code>-az<N>, such as use1-az1, mapped to
//     names per account as AWS does), zone type availability-zone, state
//     available, opt-in-not-required, the region as group and network
//     border group; ZoneName.N, ZoneId.N (unknown ones refused), Filter.N,
//     AllAvailabilityZones, DryRun; no pagination.
//   - EC2 DescribeInstanceTopology: running instances of the instance types
//     AWS documents as supported (3 network nodes, 4 for p6-b200 and
//     p6-b300; the first shared by a zone's instances); instances of other
//     types are simply not returned. InstanceId.N (up to 100), GroupName.N,
//     Filter.N on availability-zone, instance-type and zone-id, MaxResults
//     1-100 (default 20, not with InstanceId.N), NextToken, DryRun.
//   - NitroTPM (nitrotpm.go): an instance a test gives a NitroTPM (its
//     endorsement keys' public areas: NitroTPMOf reads a TPM simulator's
//     RSA EK) is described with tpmSupport v2.0, and EC2
//     GetInstanceTpmEkPub serves its key: InstanceId, KeyType rsa-2048 or
//     ecc-sec-p384, KeyFormat der (the DER public key) or tpmt (the
//     TPMT_PUBLIC), all required, DryRun; keyValue base64. An instance EC2
//     does not show is InvalidInstanceID.NotFound (NewInstanceDelay
//     included), one without NitroTPM UnsupportedOperation (the model's
//     code: AWS documents none). No endorsement key certificate is
//     modelled: AWS documents none for NitroTPM, and documents this call
//     as the way to get the key.
//   - EC2 route tables (routetables.go; PutRouteTable, RouteTable) of the
//     account's one VPC (VPCCIDR, loopback, its local route first):
//     DescribeRouteTables (RouteTableId.N, InvalidRouteTableID.NotFound;
//     Filter.N on route-table-id, vpc-id, tag-key and tag:<key>; MaxResults
//     5-100 and NextToken in id order; DryRun) with each route's target (an
//     instance with its owner and network interface, or a gateway), origin
//     and state, blackhole once its instance is shutting down, terminated or
//     gone; CreateRoute to one instance or gateway (RouteAlreadyExists for a
//     destination the table routes already, whatever its target;
//     InvalidInstanceID.NotFound, IncorrectInstanceState, a malformed CIDR
//     block InvalidParameterValue); DeleteRoute by destination
//     (InvalidRoute.NotFound; the local route refused); and
//     ModifyInstanceAttribute's SourceDestCheck.Value, which
//     DescribeInstances then shows (SourceDestCheck).
//   - EC2 request rate limiting (Throttle, Options.Throttle; off by
//     default): a token bucket per action (DefaultBuckets: AWS's documented
//     100 tokens refilled by 20 a second for the Describe actions, or a
//     test's own), a call finding it empty answered HTTP 503
//     RequestLimitExceeded and counted (Throttled).
//   - STS GetCallerIdentity (version 2011-06-15): a user's
//     arn:aws:iam::<account>:user/<name>, or for instance-profile
//     credentials arn:aws:sts::<account>:assumed-role/<role>/<instance-id>
//     with the UserId <role's unique id>:<instance-id>; other STS actions
//     are InvalidAction.
//   - Instance profiles and roles, as far as EC2 shows them: an instance's
//     profile (IamInstanceProfile Arn and Id in DescribeInstances) may be
//     named other than its role, and may be swapped for another
//     (SetInstanceProfile, as ReplaceIamInstanceProfileAssociation does);
//     a role deleted and created again under its name (RecreateRole) gets
//     a new unique id (AROA...), which only sessions issued after carry.
//   - IAM, as far as "instance-profile credentials may not call EC2"
//     (UnauthorizedOperation); users may call everything modelled.
//   - Instance-profile credentials: an assumed-role session per instance,
//     rotated when the metadata service (or RoleCredentials) is asked within
//     a third of their lifetime of expiry; earlier sets stay valid until
//     they expire, also after the instance is stopped or deleted.
//   - IMDSv2 per instance, on its own port: token PUT with a TTL of 1-21600
//     seconds (400 otherwise; 403 with X-Forwarded-For), GETs only with a
//     live token (401 otherwise); tokens die when the instance leaves
//     running. It serves meta-data/ (ami-id, hostname, instance-id,
//     instance-type, local-hostname, local-ipv4, public-ipv4,
//     public-hostname, placement/availability-zone, placement/region,
//     iam/info, iam/security-credentials/[<role>], tags/instance/[<key>]
//     when MetadataTags) and dynamic/instance-identity/document, and closes
//     connections unanswered while the instance is not running.
//   - Fault injection (Fail, after authentication, authorization and
//     throttling) and counters (Calls of each action, throttled ones
//     included; Refused by error code; Throttled by action; Describes:
//     the answered DescribeInstances calls by ids, by private DNS name or
//     address, and lists).
//
// Not modelled:
//   - The IMDS hop limit (every client is one hop away on loopback), IMDSv1,
//     the identity document's signatures (/signature, /pkcs7, /rsa2048),
//     user data, and metadata other than the paths above.
//   - Server errors except through Fail; the smaller buckets AWS gives
//     unfiltered and unpaginated Describe calls, resource rate limits, and
//     STS's own throttling.
//   - Placement groups (GroupName.N of DescribeInstanceTopology matches no
//     instance), capacity blocks, Local and Wavelength Zones, opt-in zones,
//     and DescribeInstanceTopology's answer for ids EC2 does not know (left
//     out here; not checked against AWS).
//   - Eventual consistency of anything but a new instance's visibility
//     (tags, state changes and deletions show at once).
//   - IAM policy evaluation beyond the rule above; every other EC2 and STS
//     action; presigned (query-string) SigV4 and SigV4a; chunked payload
//     signing; headers the SDK's signer never signs (User-Agent, Expect, ...)
//     cannot be listed in SignedHeaders.
//   - EC2's own error code for stale dates and expired tokens
//     (RequestExpired): both APIs answer as STS does.
//   - Reservations of several instances, security groups, VPC and subnet
//     details (their ids are fixed per account, region and zone), launch
//     state transitions over time (states change only by Put and SetState).
package awstest
