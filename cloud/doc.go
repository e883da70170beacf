// Package cloud will hold the cloud backends mooring talks to, behind one
// interface: the local cloud (a real process on loopback, the default for the
// demo and the tests) first, real clouds next.
package cloud
