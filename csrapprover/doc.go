// Package csrapprover will hold the approver of kubelet client and serving
// CSRs: it checks cloud-signed instance identity bound to the CSR's key and
// the cloud's own record of the instance, and approves or denies with a
// reason. It runs inside mooring-ccm and as mooring-csr-approver.
package csrapprover
