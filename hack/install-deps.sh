#!/usr/bin/env bash
# Installs the Debian packages the test bed needs when they are missing:
# etcd (etcd-server), iproute2, and systemd with a user session bus
# (systemd, dbus-user-session, util-linux's unshare) for the agent's tests,
# which run a private `systemd --user`, never systemd as PID 1, and cloud-init, whose `cloud-init schema`
# checks the user-data mooring renders (the unit tests of agent/cmd/mooring-agent and agent/cloudinit) and
# which runs that user-data on the e2e tests' booted machines (test/harness/boot: runc containers, system-mode
# systemd as their PID 1 over an overlay of /, with the system bus of dbus and curl for the agent's download),
# and ca-certificates, whose bundle `make images` copies into the images (and hack/images' test checks),
# and containerd, runc and containernetworking-plugins (its loopback plugin), which the e2e tests run
# directly, one containerd per control-plane node, for nodes whose kubelets run real pods (test/testbed/containerd.go),
# and apt-utils (apt-ftparchive) and gnupg, with which the booted machines' test builds and signs a kubelet package
# repository for the user-data's --kubernetes-version (test/harness/aptrepo.go),
# and gcc, with which the tests build their TPM simulator (cloud/tpm/tpmtest's mooring-tpmsim links go-tpm-tools'
# simulator with cgo; no mooring binary does).
# Safe to run again; does nothing when all are present. Needs root (as on CI and the developers' machines).
set -euo pipefail
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v systemd >/dev/null 2>&1 || [ -x /usr/lib/systemd/systemd ] || need+=(systemd)
[ -e /usr/lib/systemd/user/dbus.socket ] || need+=(dbus-user-session)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
command -v cloud-init >/dev/null 2>&1 || need+=(cloud-init)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v dbus-daemon >/dev/null 2>&1 || need+=(dbus)
command -v curl >/dev/null 2>&1 || need+=(curl)
[ -s /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
command -v containerd >/dev/null 2>&1 || need+=(containerd)
[ -x /usr/lib/cni/loopback ] || need+=(containernetworking-plugins)
command -v apt-ftparchive >/dev/null 2>&1 || need+=(apt-utils)
command -v gpg >/dev/null 2>&1 || need+=(gnupg)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ ${#need[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${need[*]}" >&2
# Only its schema check is wanted here: installing cloud-init starts nothing, but it would run at the next
# boot as on a new instance (SSH host keys, users, network). cloud-init.disabled, written before the package
# (and only when this script installs it), keeps it from ever running on this machine.
if [[ " ${need[*]} " == *" cloud-init "* ]]; then
  mkdir -p /etc/cloud
  touch /etc/cloud/cloud-init.disabled
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
