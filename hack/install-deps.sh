#!/usr/bin/env bash
# Installs the Debian packages the test bed needs when they are missing:
# etcd (etcd-server), iproute2, and systemd with a user session bus
# (systemd, dbus-user-session, util-linux's unshare) for the agent's tests,
# which run a private `systemd --user`, never systemd as PID 1. Safe to run again; does nothing when all
# are present. Needs root (as on CI and the developers' machines).
set -euo pipefail
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v systemd >/dev/null 2>&1 || [ -x /usr/lib/systemd/systemd ] || need+=(systemd)
[ -e /usr/lib/systemd/user/dbus.socket ] || need+=(dbus-user-session)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
[ ${#need[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
