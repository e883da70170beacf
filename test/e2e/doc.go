// Package e2e holds mooring's end-to-end tests. They run real
// kube-apiserver, etcd, kube-controller-manager and kubelets (the test bed in
// test/testbed) and need the binaries built by `make kube-bins`.
package e2e
