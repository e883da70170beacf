#!/usr/bin/env bash
# Builds mooring's release artifacts for each platform into RELEASE_DIR
# (`make release`: bin/release), a directory that must not exist yet or be
# empty:
#
#   <command>_<version>_<os>_<arch>.tar.gz    the binary, LICENSE, README.md
#   <command>_<version>_<os>_<arch>.cdx.json  its SBOM (CycloneDX JSON)
#   mooring-agent_<version>_<os>_<arch>       the agent's binary alone (the
#                                             tarball's), for user-data to
#                                             download (--agent-url)
#   mooring-<version>.tgz                     the Helm chart (hack/chart)
#   mooring_<version>_<overlay>.yaml          each overlay rendered (hack/manifests)
#   SHA256SUMS                                sha256sum's format, over the rest
#
# The chart's version and appVersion are the release's version, so its
# images default to REGISTRY/<image>:<version>, as do the rendered
# manifests'; make push sends the images and the chart there.
#
# Binaries are static (CGO_ENABLED=0), built with -trimpath and the version
# from hack/ldflags.sh, and stripped (-s -w); mooring-agent with the build
# tags of agent_tags (the Makefile's AGENT_TAGS). Tarballs are reproducible:
# the same commit (and SOURCE_DATE_EPOCH, if set) gives the same bytes.
#
# The SBOMs are made by cyclonedx-gomod from the module list Go embeds in each
# binary; the tool is installed from the Go module proxy once, into the cache
# outside the checkout ($MOORING_CACHE, as hack/build-k8s.sh).
#
# Environment: RELEASE_DIR (default bin/release), RELEASE_PLATFORMS (default
# "linux/amd64 linux/arm64"), RELEASE_COMMANDS (default all four commands),
# REGISTRY (default ghcr.io/mooring-dev: where the chart and manifests name
# the images), VERSION and SOURCE_DATE_EPOCH (see hack/version.sh and
# hack/ldflags.sh). docs/release.md describes the outputs and how to verify
# them.
set -euo pipefail

cyclonedx_version=v1.10.0
commands=(
  mooring-ccm=./ccm/cmd/mooring-ccm
  mooring-csr-approver=./csrapprover/cmd/mooring-csr-approver
  mooring-agent=./agent/cmd/mooring-agent
  mooring-localcloud=./cloud/local/cmd/mooring-localcloud
)
# grpc's grpcnotrace: see AGENT_TAGS in the Makefile.
agent_tags=grpcnotrace

log() { echo "release: $*" >&2; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${RELEASE_DIR:-$root/bin/release}
platforms=${RELEASE_PLATFORMS:-linux/amd64 linux/arm64}
registry=${REGISTRY:-ghcr.io/mooring-dev}
if [ -n "${RELEASE_COMMANDS:-}" ]; then
  chosen=()
  for name in $RELEASE_COMMANDS; do
    found=""
    for c in "${commands[@]}"; do [ "${c%%=*}" = "$name" ] && found=$c; done
    if [ -z "$found" ]; then
      log "RELEASE_COMMANDS: no command $name (have: ${commands[*]%%=*})"
      exit 1
    fi
    chosen+=("$found")
  done
  commands=("${chosen[@]}")
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -n "$(ls -A "$out")" ]; then
  log "$out is not empty; remove it first (make release does)"
  exit 1
fi
cd "$root"

version=$(hack/version.sh)
ldflags="$(hack/ldflags.sh) -s -w"
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}

# cyclonedx-gomod, cached by version.
cache="${MOORING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mooring}"
cyclonedx="$cache/tools/cyclonedx-gomod/$cyclonedx_version/cyclonedx-gomod"
if [ ! -x "$cyclonedx" ]; then
  log "installing cyclonedx-gomod $cyclonedx_version into $(dirname "$cyclonedx")"
  mkdir -p "$(dirname "$cyclonedx")"
  gobin=$(mktemp -d "$(dirname "$cyclonedx")/.tmp.XXXXXX")
  GOBIN="$gobin" go install "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$cyclonedx_version"
  mv "$gobin/cyclonedx-gomod" "$cyclonedx"
  rm -rf "$gobin"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# pack NAME BASE BINDIR writes BASE.tar.gz (a directory BASE holding the
# binary, LICENSE, README.md) and BASE.cdx.json, its SBOM, into $out.
pack() {
  local name=$1 base=$2 bindir=$3
  local stage="$work/stage/$base"
  mkdir -p "$stage"
  install -m 0755 "$bindir/$name" "$stage/$name"
  install -m 0644 LICENSE README.md "$stage/"
  # Reproducible: fixed order, owner and times; gzip without a name or time.
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$work/stage" -cf - "$base" | gzip -n > "$out/$base.tar.gz"
  "$cyclonedx" bin -json -noserial -notimestamp -version "$version" \
    -output "$out/$base.cdx.json" "$stage/$name" 2>"$work/$base.cyclonedx.log" ||
    { cat "$work/$base.cyclonedx.log" >&2; return 1; }
}

log "version $version, platforms $platforms, into $out"
artifacts=()
for platform in $platforms; do
  os=${platform%/*}
  arch=${platform#*/}
  pkgs=()
  agent=""
  for c in "${commands[@]}"; do
    if [ "${c%%=*}" = mooring-agent ]; then agent=${c#*=}; else pkgs+=("${c#*=}"); fi
  done
  start=$(date +%s)
  mkdir -p "$work/bin/${os}_$arch"
  if [ ${#pkgs[@]} -gt 0 ]; then
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$work/bin/${os}_$arch/" "${pkgs[@]}"
  fi
  if [ -n "$agent" ]; then
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -tags "$agent_tags" -ldflags "$ldflags" -o "$work/bin/${os}_$arch/" "$agent"
  fi
  log "built $platform in $(( $(date +%s) - start ))s"

  # The commands' tarballs and SBOMs side by side (gzip is single-threaded).
  start=$(date +%s)
  pids=()
  for c in "${commands[@]}"; do
    base="${c%%=*}_${version}_${os}_${arch}"
    pack "${c%%=*}" "$base" "$work/bin/${os}_$arch" &
    pids+=($!)
    artifacts+=("$base.tar.gz" "$base.cdx.json")
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  # The agent alone too: a new machine's user-data downloads it and checks
  # it against SHA256SUMS (mooring-agent user-data --version). The same
  # bytes as the tarball's binary; its SBOM is the tarball's.
  if [ -n "$agent" ]; then
    base="mooring-agent_${version}_${os}_${arch}"
    install -m 0755 "$work/bin/${os}_$arch/mooring-agent" "$out/$base"
    artifacts+=("$base")
  fi
  log "packed $platform in $(( $(date +%s) - start ))s"
done

# The chart and the rendered overlays, naming the images REGISTRY/<image>:<version>.
start=$(date +%s)
chart=$(SOURCE_DATE_EPOCH=$epoch go run ./hack/chart package --version "$version" --registry "$registry" --out "$out")
artifacts+=("$(basename "$chart")")
manifests=$(go run ./hack/manifests --version "$version" --registry "$registry" --out "$out")
for f in $manifests; do artifacts+=("$(basename "$f")"); done
log "packaged the chart and rendered the overlays in $(( $(date +%s) - start ))s"

(cd "$out" && sha256sum -- "${artifacts[@]}" > SHA256SUMS)
log "wrote ${#artifacts[@]} files and SHA256SUMS into $out"
