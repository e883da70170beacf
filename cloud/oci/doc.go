// Package oci is mooring's Oracle Cloud Infrastructure backend: a CCM
// provider whose InstancesV2 and Zones answer from a shared view of the
// cluster's instances (Compute ListInstances and ListVnicAttachments in
// the configured compartments, every page, instances tagged for the
// cluster; Virtual Network GetVnic once per VNIC for its addresses), and
// the approver's verifier of OCI evidence: a signature over the CSR key's
// binding by the instance principal's key, whose certificate (issued by
// OCI with the instance, compartment and tenancy in its subject, for
// client authentication) chains through the intermediate it comes with to
// one of OCI's roots (attest.go): the region's, which the auth service
// answers to mooring's own signed request, kept and refreshed (roots.go),
// or those of the configuration's rootCAFile. Node names are display names, providerIDs
// oci://<instance OCID>, zones the availability domain's name and the
// fault domain a label, as the upstream OCI CCM writes them; Services'
// load balancers, flexible Load Balancers and Network Load Balancers as
// the upstream CCM makes them (loadbalancers.go), with their security
// rules (securityrules.go; the security lists of modes All and Frontend in
// securitylists.go, the NSGs of mode NSG in securitygroups.go). The node
// agent's side is agentid; the test endpoint ocitest. See docs/oci.md.
package oci
