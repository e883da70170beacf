#!/usr/bin/env bash
# Builds the Helm CLI from the Go module proxy, at the version pinned here,
# into a cache outside the checkout (as build-k8s.sh does the Kubernetes
# binaries) and prints its path. A cached binary is reused. `make chart`,
# the chart's Go tests (deploy/chart_test.go, hack/chart) and the e2e tests
# run it. docs/install.md names the version operators get from Helm's own
# release; keep the two the same.
#
# Built as Helm's own Makefile builds a release, so that the binary renders
# for the Kubernetes version a release binary of the same version assumes
# (helm template/lint without --kube-version, and the chart's kubeVersion):
# - Helm 4 derives that version from the k8s.io/client-go version in the
#   binary's build info (client-go v0.N => Kubernetes v1.N), which
#   `go install module@version` records: nothing to set.
# - Helm 3 takes it from linker flags only (pkg/chartutil and
#   pkg/lint/rules k8sVersionMajor/Minor) and assumes v1.20 without them:
#   they are set here from the client-go version in that Helm's go.mod, as
#   its Makefile does.
# The version Helm prints (internal/version.version) is a linker flag in
# both; without it `helm version` says only the minor version.
set -euo pipefail

version="${HELM_VERSION:-v4.3.1}"
case "$version" in
  v3.*) major=v3 ;;
  v4.*) major=v4 ;;
  *) echo "install-helm: HELM_VERSION=$version: want v3.x.y or v4.x.y" >&2; exit 2 ;;
esac
module="helm.sh/helm/$major"
cache="${MOORING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mooring}"
bindir="$cache/tools/helm-$version"
ldflags="-X $module/internal/version.version=$version"
if [ "$major" = v3 ]; then
  # The client-go version Helm's go.mod requires: v0.MINOR.PATCH.
  gomod=$(cd / && GOFLAGS=-mod=mod go mod download -json "$module@$version" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  clientgo=$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$gomod")
  minor=$(echo "$clientgo" | cut -d. -f2)
  case "$minor" in
    ''|*[!0-9]*) echo "install-helm: no k8s.io/client-go version in $gomod" >&2; exit 1 ;;
  esac
  for pkg in pkg/chartutil pkg/lint/rules; do
    ldflags="$ldflags -X $module/$pkg.k8sVersionMajor=1 -X $module/$pkg.k8sVersionMinor=$minor"
  done
fi
# A binary cached by an earlier recipe (another ldflags) is built again.
if [ ! -x "$bindir/helm" ] || [ "$(cat "$bindir/ldflags" 2>/dev/null)" != "$ldflags" ]; then
  echo "install-helm: building helm $version into $bindir" >&2
  mkdir -p "$bindir"
  # Outside any module, so the build uses Helm's own go.mod, not mooring's.
  (cd "$bindir" && CGO_ENABLED=0 GOBIN="$bindir" GOFLAGS=-mod=mod \
    go install -trimpath -ldflags "$ldflags" "$module/cmd/helm@$version")
  printf '%s\n' "$ldflags" > "$bindir/ldflags"
fi
echo "$bindir/helm"
