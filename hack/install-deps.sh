#!/usr/bin/env bash
# Installs the Debian packages the test bed needs when they are missing:
# etcd (etcd-server) and iproute2. Safe to run again; does nothing when all
# are present. Needs root (as on CI and the developers' machines).
set -euo pipefail
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
[ ${#need[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
