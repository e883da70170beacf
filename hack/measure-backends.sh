#!/bin/sh
# measure-backends.sh [REV]: the size of the cloud backends at REV (default HEAD), as markdown: lines per backend
# (non-test, test; the test endpoint apart), the shared packages, the ticket clouds' tests, the e2e package, and,
# where the `duplicates` tool is installed, its pairs in cloud/ (all of them, and those between two backends).
# It measures the committed tree (a detached worktree in a temporary directory, removed afterwards), so
# uncommitted edits do not count. docs/backends.md's "Measured" sections come from its output.
set -eu
REPO=$(git rev-parse --show-toplevel)
REV=$(git -C "$REPO" rev-parse "${1:-HEAD}")
WT=$(mktemp -d)
rmdir "$WT"
git -C "$REPO" worktree add --detach -q "$WT" "$REV"
trap 'git -C "$REPO" worktree remove --force "$WT"' EXIT
cd "$WT"
echo "commit $(git log -1 --format='%h (%cs) %s' | cut -c1-100)"
echo
# Lines: wc -l summed over the *.go files under a directory (recursive, testdata left out).
lines() { # DIR test|nontest
  [ -d "$1" ] || { echo 0; return; }
  if [ "$2" = test ]; then sel="-name *_test.go"; else sel="! -name *_test.go"; fi
  # shellcheck disable=SC2086
  find "$1" -path '*/testdata' -prune -o -type f -name '*.go' $sel -print | xargs -r cat | wc -l
}
BACKENDS=$(cd cloud && for d in */; do d=${d%/}; [ -f "$d/backend.go" ] && echo "$d"; done)
echo "| backend | non-test | test | its test endpoint (non-test, counted in non-test) |"
echo "|---|---|---|---|"
tn=0; tt=0
for b in $BACKENDS; do
  n=$(lines "cloud/$b" nontest); t=$(lines "cloud/$b" test); e=$(lines "cloud/$b/${b}test" nontest)
  tn=$((tn+n)); tt=$((tt+t))
  echo "| $b | $n | $t | $e |"
done
echo "| all backends | $tn | $tt | |"
for o in kit cloudtest view nodeid all; do
  [ -d "cloud/$o" ] && echo "| (shared: cloud/$o) | $(lines "cloud/$o" nontest) | $(lines "cloud/$o" test) | |"
done
echo
echo "A ticket cloud's tests: its *_test.go files under cloud/<name>, its test endpoint's non-test files, and its"
echo "e2e file test/e2e/<name>_test.go if it has one."
echo
echo "| ticket cloud | unit tests | test endpoint | e2e file | total |"
echo "|---|---|---|---|---|"
ta=0
for b in hetzner digitalocean vsphere openstack linode; do
  u=$(lines "cloud/$b" test); e=$(lines "cloud/$b/${b}test" nontest)
  x=0; [ -f "test/e2e/${b}_test.go" ] && x=$(wc -l < "test/e2e/${b}_test.go")
  s=$((u+e+x)); ta=$((ta+s))
  echo "| $b | $u | $e | $x | $s |"
done
echo "| all five | | | | $ta |"
echo
echo "test/e2e: $(lines test/e2e test) test lines, $(lines test/e2e nontest) other (wc -l)."
echo
if ! command -v duplicates >/dev/null 2>&1; then
  echo "duplicates: not installed here; skipped."
  exit 0
fi
D=$(mktemp)
duplicates --repo cloud --most 200 --seconds 300 > "$D"
echo "duplicates --repo cloud --most 200: $(head -1 "$D")"
grep -E '^(incomplete|left out|\(\+)' "$D" || true
awk -v bl="$(echo $BACKENDS)" '
BEGIN { n = split(bl, a, " "); for (i = 1; i <= n; i++) isb[a[i]] = 1 }
/^D[0-9]+ / {
  split($2, x, "/"); split($4, y, "/"); rows++
  if (isb[x[1]] && isb[y[1]] && x[1] != y[1]) { between++; if ($0 ~ /boilerplate/) bp++ }
}
END { printf "rows listed: %d; between two backends: %d (%d of them marked boilerplate)\n", rows, between, bp }' "$D"
rm -f "$D"
