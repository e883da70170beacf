// Package azure is mooring's Azure backend, registered as "azure"
// (backend.go; the node identity registers from its own package,
// agentid). A node proves which VM it is without any secret:
//
//   - on the node, agentid (cloud/azure/agentid, all mooring-agent links of
//     the backend) reads the VM's record from IMDS (header Metadata: true,
//     a pinned api-version) and asks IMDS for an attested document whose
//     nonce is derived from the CSR key's binding (agentid.Nonce);
//   - in the approver, attest.go's Verifier checks the document's PKCS#7
//     signature (github.com/smallstep/pkcs7) over the embedded content,
//     chains its one signer to the configured roots, requires the signer's
//     name under metadata.azure.com, and reads only the signed content:
//     nonce, subscription, and createdOn/expiresOn, which bound when the
//     document may be used (maxDocumentAge, maxClockSkew);
//   - view.go lists the cluster's VMs and scale-set VMs (tag
//     kubernetes.io_cluster_<clusterID> = owned or shared) with the Azure
//     SDK's paginated ARM lists, with their NIC addresses, into the shared
//     instance view, with the Azure CCM's providerIDs (agentid's names.go);
//   - with a Trusted Launch VM's vTPM (tpm.go, docs/azure.md TPM), the
//     agent also quotes with the AK Azure persisted at 0x81000003
//     (agentid.TPMKey) and sends its certificate from NV 0x01C101D0;
//     VerifyTPM (cloud.TPMVerifier) checks the quote and that the
//     certificate chains to Azure's vTPM root, holds that AK and names the
//     attested VM; the view's VTPM is the VM's securityProfile;
//   - provider.go and instances.go are the CCM's provider: InstancesV2 and
//     Zones over that view, cloud.Attester; routes.go its Routes, kubenet's
//     routes in the route table routeTableName names, written whole under
//     its ETag.
//
// ARM calls take a token from azidentity (managed identity by default).
// Tests run against azuretest, an IMDS, attested-document signer, token
// endpoint and ARM stand-in on loopback.
package azure
