#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl from the Go module
# proxy into a cache outside the checkout, keyed by version, and prints the
# directory that holds them. A cached binary is reused; only missing ones are
# built. See docs/development.md.
set -euo pipefail

version="${KUBE_VERSION:-v1.36.3}"
cache="${MOORING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mooring}"
bindir="$cache/kubernetes/$version/bin"
cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

missing=()
for c in "${cmds[@]}"; do
  [ -x "$bindir/$c" ] || missing+=("$c")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$bindir"
  exit 0
fi

log() { echo "build-k8s: $*" >&2; }
work="$cache/kubernetes/$version/module"
mkdir -p "$work" "$bindir"
cd "$work"

# The scratch module requires k8s.io/kubernetes and pins each staging module
# (which k8s.io/kubernetes itself resolves through ./staging) to the matching
# published v0.x.y version.
minor="v0.${version#v1.}"
modfile=$(GOFLAGS=-mod=mod go list -m -f '{{.GoMod}}' "k8s.io/kubernetes@$version")
{
  echo "module mooring.local/k8sbuild"
  echo
  echo "go $(awk '$1=="go"{print $2; exit}' "$modfile")"
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  echo "replace ("
  awk -v v="$minor" '$2=="=>" && $3 ~ /^\.\/staging\// {print "\t" $1 " => " $1 " " v}' "$modfile"
  echo ")"
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package k8sbuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO

log "resolving modules for k8s.io/kubernetes@$version (cold: a few minutes)"
GOFLAGS=-mod=mod go mod tidy

major=${version#v}; major=${major%%.*}
minorn=${version#v*.}; minorn=${minorn%%.*}
ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$version -X $p.gitMajor=$major -X $p.gitMinor=$minorn"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

tmp=$(mktemp -d "$bindir/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pkgs=()
for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
log "building ${missing[*]} (cold: about 5 minutes on 2 idle cores, much longer on busy ones)"
start=$(date +%s)
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -tags tools -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
for c in "${missing[@]}"; do mv "$tmp/$c" "$bindir/$c"; done
log "built in $(( $(date +%s) - start ))s into $bindir"
echo "$bindir"
