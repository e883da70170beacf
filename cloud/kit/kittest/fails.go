package kittest

import (
	"runtime"
	"testing"
)

// recorder is a test whose failures are recorded, not reported.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Error(...any)          { r.failed = true }
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatal(...any)          { r.failed = true; runtime.Goexit() }
func (r *recorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }

// Fails runs check against a test that records its failures instead of
// reporting them (a Fatal ends check alone) and reports whether check
// failed: for the tests of shared checks, which must fail a backend that
// is wrong. Everything else (TempDir, Setenv, Cleanup) is t's.
func Fails(t testing.TB, check func(testing.TB)) bool {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	return r.failed
}
