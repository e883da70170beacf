#!/usr/bin/env bash
# Prints the version of the git checkout in the current directory, in a form
# that is a semantic version (so k8s.io/component-base can parse it):
#
#   v1.2.3                     HEAD is tagged v1.2.3
#   v1.2.3-4-g0123456789ab     4 commits after the tag v1.2.3
#   v0.0.0-69-geba10a7c0ffe    no vX.Y.Z tag: 69 commits in HEAD's history
#   ...-dirty                  tracked files have uncommitted changes
#
# This is `git describe --tags --always --dirty --abbrev=12`, with a version
# without a tag (or with a tag that is not vMAJOR.MINOR.PATCH[-PRERELEASE])
# written as if v0.0.0 tagged the first commit. VERSION, when set, is printed
# instead (it must be a semantic version too). docs/release.md explains it.
set -euo pipefail

semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$'

if [ -n "${VERSION:-}" ]; then
  if ! [[ $VERSION =~ $semver ]]; then
    echo "version.sh: VERSION=$VERSION is not vMAJOR.MINOR.PATCH[-PRERELEASE]" >&2
    exit 1
  fi
  echo "$VERSION"
  exit 0
fi

if ! described=$(git describe --tags --always --dirty --abbrev=12 --match 'v[0-9]*' 2>/dev/null); then
  echo "version.sh: $(pwd) is not a git checkout with commits; set VERSION" >&2
  exit 1
fi
if [[ $described =~ $semver ]]; then
  echo "$described"
  exit 0
fi
dirty=""
[[ $described == *-dirty ]] && dirty="-dirty"
echo "v0.0.0-$(git rev-list --count HEAD)-g$(git rev-parse --short=12 HEAD)$dirty"
