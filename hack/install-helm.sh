#!/usr/bin/env bash
# Builds the Helm CLI from the Go module proxy, at the version pinned here,
# into a cache outside the checkout (as build-k8s.sh does the Kubernetes
# binaries) and prints its path. A cached binary is reused. `make chart` and
# the chart's Go test (deploy/chart_test.go) run it.
set -euo pipefail

version="${HELM_VERSION:-v3.22.0}"
cache="${MOORING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mooring}"
bindir="$cache/tools/helm-$version"
if [ ! -x "$bindir/helm" ]; then
  echo "install-helm: building helm $version into $bindir" >&2
  mkdir -p "$bindir"
  # Outside any module, so the build uses Helm's own go.mod, not mooring's.
  (cd "$bindir" && GOBIN="$bindir" GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$version")
fi
echo "$bindir/helm"
