#!/usr/bin/env bash
# Prints the -ldflags value that stamps the version into mooring's binaries:
# github.com/mooring-dev/mooring/internal/version (what --version prints and
# mooring_build_info reports) and, following Kubernetes' convention, the
# version variables of k8s.io/component-base/version (--version=raw, /version,
# kubernetes_build_info) and k8s.io/client-go/pkg/version (the default
# User-Agent).
#
# The version comes from hack/version.sh. The build date is the date of
# SOURCE_DATE_EPOCH when set, else of the commit, never the clock: two builds
# of one commit are the same bytes.
#
# Usage: go build -trimpath -ldflags "$(hack/ldflags.sh)" ./...
# It describes the git checkout of the current directory.
set -euo pipefail

version=$("$(dirname "${BASH_SOURCE[0]}")/version.sh")
commit=$(git rev-parse HEAD)

if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
  if ! [[ $SOURCE_DATE_EPOCH =~ ^[0-9]+$ ]]; then
    echo "ldflags.sh: SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH is not a number of seconds" >&2
    exit 1
  fi
  epoch=$SOURCE_DATE_EPOCH
else
  epoch=$(git log -1 --format=%ct HEAD)
fi
date=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

tree=clean
[[ $(git describe --always --dirty) == *-dirty ]] && tree=dirty

# gitMajor and gitMinor as Kubernetes sets them: the numbers, the minor
# followed by "+" when the version is not exactly vMAJOR.MINOR.PATCH.
[[ $version =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+(.*)$ ]]
major=${BASH_REMATCH[1]}
minor=${BASH_REMATCH[2]}
[ -n "${BASH_REMATCH[3]}" ] && minor+="+"

flags=(
  "-X github.com/mooring-dev/mooring/internal/version.version=$version"
  "-X github.com/mooring-dev/mooring/internal/version.commit=$commit"
  "-X github.com/mooring-dev/mooring/internal/version.buildDate=$date"
)
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  flags+=(
    "-X $p.gitVersion=$version" "-X $p.gitCommit=$commit" "-X $p.gitTreeState=$tree"
    "-X $p.buildDate=$date" "-X $p.gitMajor=$major" "-X $p.gitMinor=$minor"
  )
done
echo "${flags[*]}"
