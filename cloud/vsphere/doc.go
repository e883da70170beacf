// Package vsphere is mooring's VMware vSphere backend, registered as
// "vsphere" (backend.go; the node identity registers from its own
// package, agentid). vSphere signs no VM identity, so a VM joins with a
// join ticket (docs/tickets.md) that the admin's provisioning puts into
// its guestinfo user-data; the approver verifies the ticket itself and
// this backend gives it vCenter's record to check it against:
//
//   - view.go lists the cluster's VMs, those in the configured folder and
//     below (and, with clusterTagCategory, carrying the cluster tag), with
//     one property collector retrieval over a container view (name,
//     config.uuid, config.createDate, runtime.powerState, runtime.host,
//     guest.hostName, guest.net, ...) and, for zone and region, the parents
//     of the hosts, clusters, folders and datacenters in the same
//     retrieval; tags.go reads the tags of all of them in one
//     list-attached-tags-on-objects request. Each VM maps into the shared
//     instance view as the vSphere CCM names it: providerID
//     vsphere://<BIOS UUID>, the VM's name (lower-cased) as the Node's,
//     VMware Tools' addresses, zone and region from the tag categories
//     labels.zone and labels.region, config.createDate as the creation
//     time a join ticket's VM must fall within;
//   - session.go holds the SOAP and REST sessions, logged in again when
//     vCenter forgets them;
//   - provider.go is the CCM's k8s.io/cloud-provider provider and the
//     approver's cloud.Attester, with no evidence verifiers, on the kit
//     (cloud/kit: InstancesV2 and Zones over the view); its own parts are
//     finding a Node's VM by a providerID whose BIOS UUID may be in either
//     byte order (exactly one VM of the cluster matching), and
//     SearchIndex.FindByUuid, only to confirm that a VM the list misses is
//     gone;
//   - agentid (cloud/vsphere/agentid) is the node agent's side: the BIOS
//     UUID from SMBIOS's serial number as the upstream provider reads it
//     (the system UUID, by SMBIOS version, where that is unreadable), and
//     the VM's name.
//
// Tests run against govmomi's own vCenter simulator (vspheretest).
package vsphere
