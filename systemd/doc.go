// Package systemd is a small wrapper around go-systemd (sd_notify and
// D-Bus) behind interfaces, so the agent can report readiness and start
// kubelet, and tests can swap the connection for a fake or for a real
// systemd --user.
package systemd
