#!/usr/bin/env bash
# The example suite's wall time under nextest before and after its order is learned: the GPU
# test group that `gpu-test-permit nextest-snippet` prints, first with no history (tests start
# by name; no hold time on record, so nothing backfills), then after one recorded run brought
# into the history (`gpu-test-permit history`), with the snippet's priorities (longest first)
# and the hold times on record (backfilling). Rounds alternate the two, each "before" run in a
# fresh state directory of its own.
#
# Runs where scripts/gpu-device.sh runs, from the folder scripts/gpu-validate.sh builds (the
# CLI, cargo-nextest and the nextest archive; no Rust needed): `gpu-run/order-timing.sh`.
# Environment: ORDER_N (permits per GPU and the group's width, 2), ORDER_ROUNDS (3),
# ORDER_OUT (where the report goes: $OUT when set, else results/ in this folder). Prints the
# medians and every run's wall time, and writes them to order-timing.txt there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=${ORDER_N:-2}
rounds=${ORDER_ROUNDS:-3}
out=${ORDER_OUT:-${OUT:-$here/results}}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/order-timing.XXXXXX")
trap 'rm -rf "$work"' EXIT
cli=$here/bin/gpu-test-permit
nextest=$work/cargo-nextest
xz -dc "$here/bin/cargo-nextest.xz" >"$nextest"
chmod +x "$nextest"
archive=$here/tests.tar.zst
ws=$here/workspace
export NEXTEST_HIDE_PROGRESS_BAR=1 CARGO_TERM_COLOR=never
export GPU_TEST_PERMIT_CONCURRENCY=$n REALIZAR_GPU_TEST_CONCURRENCY=$n
unset GPU_TEST_PERMIT_DIR GPU_TEST_PERMIT_STATE GPU_TEST_PERMIT_TRACE
suite='package(gpu-test-permit-example-suite)'
if ! "$cli" probe --json cuda 2>/dev/null | grep -q '"status": "devices"'; then
    suite="$suite & not binary(cuda)"
fi

now() { date +%s.%N; }
median() { sort -n | awk '{ a[NR] = $1 } END { if (NR) printf "%.2f", a[int((NR + 1) / 2)] }'; }

# One nextest run of the suite with slot directory $1 and state directory $2 (the tool config
# file is the snippet printed for them now); prints its wall time, seconds.
run() {
    local slots=$1 state=$2 label=$3
    mkdir -p "$slots" "$state"
    chmod 700 "$slots" "$state"
    GPU_TEST_PERMIT_DIR=$slots GPU_TEST_PERMIT_STATE=$state "$cli" nextest-snippet \
        >"$work/tool.toml" 2>>"$work/log"
    local s e rc=0
    s=$(now)
    GPU_TEST_PERMIT_DIR=$slots GPU_TEST_PERMIT_STATE=$state GPU_TEST_PERMIT_TRACE=$work/$label.json \
        "$nextest" nextest run --archive-file "$archive" --workspace-remap "$ws" \
        --tool-config-file "gpu-test-permit:$work/tool.toml" --no-fail-fast \
        --status-level none --final-status-level none -E "$suite" >>"$work/log" 2>&1 || rc=$?
    e=$(now)
    [ "$rc" -eq 0 ] || echo "order-timing: the $label run failed (exit $rc); see the log" >&2
    awk -v a="$s" -v b="$e" 'BEGIN { printf "%.2f", b - a }'
}

# The run to learn from, then the history brought up to date from its records.
learned_slots=$work/learned/slots
learned_state=$work/learned/state
learn=$(run "$learned_slots" "$learned_state" learn)
GPU_TEST_PERMIT_DIR=$learned_slots GPU_TEST_PERMIT_STATE=$learned_state "$cli" history \
    >>"$work/log" 2>&1
GPU_TEST_PERMIT_DIR=$learned_slots GPU_TEST_PERMIT_STATE=$learned_state "$cli" nextest-snippet \
    >"$work/learned.toml" 2>>"$work/log"
priorities=$(grep -c '^priority' "$work/learned.toml" || true)

before=()
after=()
backfilled=()
for r in $(seq "$rounds"); do
    before+=("$(run "$work/before$r/slots" "$work/before$r/state" "before$r")")
    after+=("$(run "$learned_slots" "$learned_state" "after$r")")
    backfilled+=("$(cat "$work/after$r.json" 2>/dev/null | grep -c '"backfilled":true' || true)")
done
mb=$(printf '%s\n' "${before[@]}" | median)
ma=$(printf '%s\n' "${after[@]}" | median)
{
    echo "example suite under nextest, N = $n, $(nproc) cores, $rounds rounds (${suite})"
    echo "learning run: $learn s; the snippet then gave $priorities priorities"
    echo "before (by name, no hold times on record): median $mb s (${before[*]})"
    echo "after (priorities, hold times on record):  median $ma s (${after[*]}); grants past a waiting head per run: ${backfilled[*]}"
    awk -v a="$ma" -v b="$mb" 'BEGIN { printf "after / before: %.2fx\n", a / b }'
} | tee "$out/order-timing.txt"
cp "$work/log" "$out/order-timing.log"
