// Package csrapprover approves or denies kubelet client and serving CSRs
// (the signers kubernetes.io/kube-apiserver-client-kubelet and
// kubernetes.io/kubelet-serving, nothing else). A join must carry
// cloud-signed evidence bound to the CSR's key; every request is checked
// against the cloud's own record of the instance. Each check has a
// machine-readable deny reason; cloud and API errors retry and never
// approve. The controller runs inside mooring-ccm
// (--controllers=*,csr-approver) and as mooring-csr-approver.
// docs/csrapprover.md explains every check, flag, metric and reason.
package csrapprover
