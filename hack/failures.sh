#!/usr/bin/env bash
# failures.sh LOG: what `go test` (not -v) printed of its failed tests in
# LOG, in short: each "--- FAIL" line and the lines the tests' own files
# logged beneath it (a test's reason, not the harness's log tails), each cut
# to 300 characters, and what the harness found of each machine that did not
# join (Machine.Diagnose, Booted.Diagnose: unit states, STATUS, the kubelet's
# files and log tails). `make e2e` prints it last when a test failed, so the
# reasons stand at the end of a long output, where CI's excerpt shows them.
set -euo pipefail
awk '
	/^--- FAIL|^    --- FAIL/ { failing = 1; diag = 0; print; next }
	/^[^ \t]/ { failing = 0; diag = 0; next }
	!failing { next }
	/^ +[A-Za-z0-9_]+\.go:[0-9]+: / {
		diag = ($0 ~ /^ +(fleet|booted)\.go:[0-9]+: (booted )?machine [^ ]+ \(/)
		if (diag || $0 ~ /^ +[A-Za-z0-9_]+_test\.go:[0-9]+: /) print substr($0, 1, 300)
		next
	}
	diag { print substr($0, 1, 300) }
' "$1"
