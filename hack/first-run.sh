#!/usr/bin/env bash
# Measures `make demo`'s first run on this machine, as on a fresh one:
# each run starts with empty caches of its own (MOORING_CACHE for the
# Kubernetes binaries, GOCACHE, GOMODCACHE: every module comes from the Go
# module proxy again) and, with PACKAGES=1, with the Debian packages the
# demo installs fetched and installed again (apt-get clean, then
# apt-get install --reinstall: downloaded and unpacked as on a fresh
# machine). Then `make demo DEMO_ARGS=--non-interactive` runs to its end.
# Each run's wall time is timed as a whole, from before the packages to
# the demo's teardown, and the load average is sampled every 15 s.
#
#   hack/first-run.sh [RUNS] [RESULT]
#
# RUNS (default 3) runs, one after another; RESULT (default
# docs/scale-results/<date>-demo-first-run.md) gets the figures
# (min/median/max) and each run's line. Needs root for the packages (as
# make demo does). Runs' logs and caches go to a temporary directory under
# ${TMPDIR:-/var/tmp}, removed at the end.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-3}
result=${2:-$root/docs/scale-results/$(date -u +%Y-%m-%d)-demo-first-run.md}
# The packages hack/install-deps.sh installs for the demo when missing
# (those a fresh Debian lacks).
packages=(etcd-server cloud-init runc containerd containernetworking-plugins dbus-user-session)

work=$(mktemp -d "${TMPDIR:-/var/tmp}/mooring-first-run.XXXXXX")
sampler=""
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null || true
  # Go writes its module cache read-only.
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

lines=()
walls=()
for i in $(seq 1 "$runs"); do
  run="$work/run-$i"
  mkdir -p "$run"
  : >"$run/load"
  (while :; do cut -d' ' -f1 /proc/loadavg >>"$run/load"; sleep 15; done) &
  sampler=$!
  start=$(date +%s)
  apt_s=0
  if [ "${PACKAGES:-1}" = 1 ]; then
    apt-get clean
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall --no-install-recommends "${packages[@]}" >"$run/apt.log" 2>&1
    apt_s=$(( $(date +%s) - start ))
  fi
  (cd "$root" && env MOORING_CACHE="$run/cache" GOCACHE="$run/gocache" GOMODCACHE="$run/gomod" \
    make demo DEMO_ARGS="--non-interactive --state-dir=$run/state") >"$run/demo.log" 2>&1 ||
    { echo "first-run: run $i failed; its log:" >&2; tail -50 "$run/demo.log" >&2; exit 1; }
  wall=$(( $(date +%s) - start ))
  kill "$sampler"; wait "$sampler" 2>/dev/null || true; sampler=""
  load=$(awk '{s+=$1; n++} END {if (n) printf "%.1f", s/n}' "$run/load")
  nodes=$(grep -Eo '[0-9]+ nodes Ready.*' "$run/demo.log" | head -1 || true)
  line="run $i: ${wall} s in all (packages ${apt_s} s), load average over the run ${load}; demo: ${nodes}"
  echo "first-run: $line" >&2
  lines+=("$line")
  walls+=("$wall")
  cp "$run/demo.log" "$work/demo-$i.log"
  chmod -R u+w "$run" && rm -rf "$run"
done

sorted=($(printf '%s\n' "${walls[@]}" | sort -n))
n=${#sorted[@]}
min=${sorted[0]}
max=${sorted[$((n - 1))]}
if (( n % 2 )); then med=${sorted[$((n / 2))]}; else med=$(( (sorted[n / 2 - 1] + sorted[n / 2]) / 2 )); fi
{
  echo "# \`make demo\`, first run: $(date -u +%Y-%m-%d)"
  echo
  echo "hack/first-run.sh on $(nproc) cores ($(uname -m)), $(git -C "$root" rev-parse --short=12 HEAD): each run with empty"
  echo "MOORING_CACHE, GOCACHE and GOMODCACHE and, with PACKAGES=${PACKAGES:-1}, the demo's Debian packages fetched and"
  echo "installed again (${packages[*]}), then \`make demo DEMO_ARGS=--non-interactive\` to its end."
  echo
  echo "wall time: min $min s, median $med s, max $max s ($n runs)"
  echo
  for l in "${lines[@]}"; do echo "- $l"; done
  echo
  echo "Last run's demo output (without Go's \`go: downloading\` lines):"
  echo
  echo '```'
  sed -n '/^==>/,$p' "$work/demo-$n.log" | grep -v '^go: downloading '
  echo '```'
} >"$result"
echo "first-run: wrote $result" >&2
