// Package systemd will hold mooring's unit files and a small wrapper around
// go-systemd (sd_notify and D-Bus) behind an interface, so the agent can
// report readiness and start kubelet, and tests can swap the connection.
package systemd
