#!/usr/bin/env bash
# bench-tuning.sh: the tuning matrix of docs/scale.md ("Tuning"). Each cell
# is `make bench` of one benchmark at one node count with mooring-ccm flags
# (MOORING_BENCH_CCM_ARGS), BENCH_RUNS times on fresh beds; the cells'
# tables go into one file, each under a heading naming its flags.
#
#   hack/bench-tuning.sh [nodeinit|csr|join]...   (default: all three)
#
# OUT (default bin/bench-tuning.md) is the file; BENCH_RUNS (default 3).
# Node init runs without the 5 minutes of steady state; the CSR cells
# and the attested-join cells measure the burst only (MOORING_BENCH_PACED=0).
# Expect about 45 minutes on 2 cores for all three.
set -euo pipefail

cd "$(dirname "$0")/.."
out=${OUT:-bin/bench-tuning.md}
runs=${BENCH_RUNS:-3}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(nodeinit csr join)

# Cells: nodes, then mooring-ccm's flags. mooring-ccm's defaults are the
# last node-init and CSR cells (ccm/app: 500/1000 and 50 node workers;
# csrapprover: 64 workers) and the middle join cell (32 per requester).
nodeinit_cells=(
	"1000 --kube-api-qps=20 --kube-api-burst=30 --concurrent-node-syncs=1"
	"1000 --kube-api-qps=100 --kube-api-burst=200 --concurrent-node-syncs=10"
	"1000 --kube-api-qps=300 --kube-api-burst=500 --concurrent-node-syncs=20"
	"1000 --kube-api-qps=500 --kube-api-burst=1000 --concurrent-node-syncs=50"
	"5000 --kube-api-qps=200 --kube-api-burst=400 --concurrent-node-syncs=30"
	"5000 --kube-api-qps=300 --kube-api-burst=500 --concurrent-node-syncs=20"
	"5000 --kube-api-qps=500 --kube-api-burst=1000 --concurrent-node-syncs=50"
)
csr_cells=(
	"5000 --csr-approver-workers=16 --kube-api-qps=500 --kube-api-burst=1000"
	"5000 --csr-approver-workers=128 --kube-api-qps=500 --kube-api-burst=1000"
	"5000 --csr-approver-workers=64 --kube-api-qps=200 --kube-api-burst=400"
	"5000 --csr-approver-workers=64 --kube-api-qps=1000 --kube-api-burst=2000"
	"5000 --csr-approver-workers=64 --kube-api-qps=500 --kube-api-burst=1000"
)
# Attested joins share one bootstrap token, one requester: the gate decides
# at most --csr-approver-max-pending-attested-per-requester of them at once
# (default half of --csr-approver-max-pending, 500), one per claimed machine.
join_cells=(
	"5000 --csr-approver-max-pending-attested-per-requester=32"
	"5000 --csr-approver-max-pending-attested-per-requester=64"
	"5000 --csr-approver-max-pending-attested-per-requester=500"
)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$out")"
{
	echo "# mooring tuning matrix, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD)"
	echo
	echo "hack/bench-tuning.sh ${parts[*]}: every cell $runs runs on fresh beds, local cloud API limited to 10 calls/s."
} >"$out"

run_cell() { # benchmark pattern (go test -bench), env assignment, nodes, flags...
	local bench=$1 extra=$2 nodes=$3
	shift 3
	local f="$tmp/cell.md"
	# make expands what it is given: a $ of the pattern is written $$.
	echo "== $bench at $nodes nodes: $*" >&2
	rm -f "$f"
	env "$extra" MOORING_BENCH_CCM_ARGS="$*" MOORING_BENCH_OUT="$f" \
		make --no-print-directory bench BENCH="${bench//\$/\$\$}" BENCH_NODES="$nodes" BENCH_RUNS="$runs" >&2
	{
		echo
		echo "## ${bench//[\^\$]/}, $nodes nodes: \`$*\`"
		echo
		# The table without its own title line (the date and rate limit).
		tail -n +3 "$f"
	} >>"$out"
}

for part in "${parts[@]}"; do
	case $part in
	nodeinit)
		for cell in "${nodeinit_cells[@]}"; do
			# shellcheck disable=SC2086 # the cell is words on purpose
			run_cell '^BenchmarkNodeInit$/^mooring$' MOORING_BENCH_STEADY=0 $cell
		done
		;;
	csr)
		for cell in "${csr_cells[@]}"; do
			# shellcheck disable=SC2086
			run_cell '^BenchmarkCSRApproval$' MOORING_BENCH_PACED=0 $cell
		done
		;;
	join)
		for cell in "${join_cells[@]}"; do
			# shellcheck disable=SC2086
			run_cell '^BenchmarkAttestedJoin$' MOORING_BENCH_PACED=0 $cell
		done
		;;
	*)
		echo "unknown part $part (nodeinit, csr, join)" >&2
		exit 2
		;;
	esac
done
echo "tuning matrix written to $out" >&2
