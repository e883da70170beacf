// Package chaos holds mooring's reliability scenarios (docs/reliability.md):
// each one runs on the real test bed (kube-apiserver, etcd,
// kube-controller-manager, the local cloud and mooring's own binaries as
// processes), injects a fault, checks the promise it tests (the invariants)
// and reports how long recovery took.
//
// By default every scenario runs at a reduced size, small enough for
// `make test`. MOORING_CHAOS=full runs the sizes docs/reliability.md quotes
// (`make chaos`); MOORING_CHAOS_RESULTS names a file that receives the
// table of every scenario's invariants and figures when the run ends.
package chaos
