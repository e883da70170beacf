// Package gce is mooring's Google Compute Engine backend, registered as
// "gce" (backend.go; the node identity registers from its own package,
// agentid). A node proves which GCE instance it is with a token Google
// signs, bound to its CSR key:
//
//   - on the node, agentid (cloud/gce/agentid, all mooring-agent links of
//     the backend) reads the instance record from the metadata server
//     (cloud.google.com/go/compute/metadata) and asks it for the default
//     service account's identity token with audience = the CSR key's
//     binding and format=full (the evidence, PEM type GCE IDENTITY TOKEN);
//     its names.go holds what both sides share: providerIDs, the node name
//     policy, the forms of project, zone and instance names;
//   - in the approver, attest.go's Verifier checks the token with go-jose:
//     RS256 only, a key of Google's published set (keys.go: JWK or PEM
//     certificates, refetched on an unknown key id at a bounded rate),
//     issuer, audience, iat/exp with a bounded skew and lifetime, and an
//     instance of an allowed project; the replay key is the digest of the
//     token's signed part;
//   - view.go lists the cluster's instances (label
//     <clusterLabel>=<clusterID>) with paginated instances.aggregatedList
//     calls (google.golang.org/api/compute/v1) into mooring's shared
//     instance view, with the upstream GCE CCM's providerIDs
//     (gce://<project>/<zone>/<name>); Nodes are named as their instances;
//   - provider.go is the CCM's k8s.io/cloud-provider provider (InstancesV2
//     and Zones over that view, and cloud.Attester), configured by
//     config.go's cloud-config. No load balancers, no routes.
//   - a Shielded VM may also prove its join with its vTPM: agentid names
//     GCE's AK (node.GCEKey: its template and certificate in NV), and
//     tpm.go's VerifyTPM (cloud.TPMVerifier) checks the quote and proves
//     the AK the instance's by its certificate (to Google's EK/AK CA,
//     tpmca/, naming the token's instance, project and zone) or by
//     instances.getShieldedInstanceIdentity; the view marks instances
//     whose shieldedInstanceConfig enables the vTPM.
//
// Tests run against gcetest, a metadata server, token signer and Compute
// API stand-in on loopback.
package gce
