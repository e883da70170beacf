// Package lb is the local cloud's load balancer data plane: an in-process L4
// proxy. Each load balancer listens on its VIP (a loopback address) on every
// listener port and forwards TCP connections and UDP datagrams round-robin to
// the backends that pass their health checks, after checking the client's
// source address against the allowed ranges. Updates keep sockets that stay,
// so open connections survive a change of backends.
package lb
