#!/usr/bin/env bash
# What `gpu-test-permit watch --` as cargo's target runner costs a passing suite: the wall time
# of fixtures/long-short (20 tests of 100 ms and 3 of 2 s, each holding a permit, N = 2: about
# 5 s) under `cargo test` (its test binary run directly, as cargo runs it, and through the
# watch) and under `cargo nextest run` (without and with the runner), the variants interleaved
# round by round in one sitting, alternating which goes first. Prints each variant's median and
# its ratio to the same runner without the watch.
#
# With OLD_CLI=PATH, a `gpu-test-permit` built before the watch judged verdicts (it watched the
# drivers alone) runs as a third variant, so that what the verdicts add (the output read on its
# way through, the exit awaited) is told apart from what the driver watch costs.
#
# Usage: RUNS=7 [OLD_CLI=path] scripts/verdict-cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-7}
pkg=gpu-test-permit-long-short
cargo build -q -p gpu-test-permit-cli --bin gpu-test-permit
cli=$(pwd)/target/debug/gpu-test-permit
suite=$(cargo test -q -p "$pkg" --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*suite[^"]*"' | head -n1 | cut -d'"' -f4)
[ -x "$suite" ] || { echo "verdict-cost: the long-short suite did not build"; exit 1; }
cargo nextest run -p "$pkg" --no-run >/dev/null 2>&1
host=$(rustc -vV | sed -n 's/^host: //p')
runner_var="CARGO_TARGET_$(echo "$host" | tr 'a-z-' 'A-Z_')_RUNNER"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export LONG_SHORT_BENCH=1 REALIZAR_GPU_TEST_CONCURRENCY=2 GPU_TEST_PERMIT_DIR="$work/slots"

# The variants: a label, a command run in the repository's root, and the variant it is
# compared with (-: none).
labels=("cargo test" "cargo test, watched" "nextest" "nextest, watched")
nextest="cargo nextest run -p $pkg --status-level none --final-status-level none"
commands=("'$suite' -q" "'$cli' watch -- '$suite' -q" "$nextest"
    "env $runner_var='$cli watch --' $nextest")
bases=(- 0 - 2)
if [ -n "${OLD_CLI:-}" ]; then
    labels+=("cargo test, watched by OLD_CLI" "nextest, watched by OLD_CLI")
    commands+=("'$OLD_CLI' watch -- '$suite' -q" "env $runner_var='$OLD_CLI watch --' $nextest")
    bases+=(0 2)
fi

n=${#labels[@]}
for round in $(seq "$runs"); do
    order=$(seq 0 $((n - 1)))
    [ $((round % 2)) -eq 0 ] && order=$(seq $((n - 1)) -1 0)
    for i in $order; do
        s=$(date +%s%N)
        sh -c "${commands[$i]}" >/dev/null 2>&1 || { echo "verdict-cost: ${labels[$i]} failed"; exit 1; }
        e=$(date +%s%N)
        echo "$(( (e - s) / 1000 ))" >> "$work/t$i"
    done
done

median() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "fixtures/long-short at N = 2, median of $runs interleaved rounds, $(nproc) cores"
for i in $(seq 0 $((n - 1))); do
    m=$(median "$work/t$i")
    if [ "${bases[$i]}" = - ]; then
        awk -v l="${labels[$i]}" -v m="$m" 'BEGIN { printf "%-32s %8.3f s\n", l, m / 1e6 }'
    else
        b=$(median "$work/t${bases[$i]}")
        awk -v l="${labels[$i]}" -v m="$m" -v b="$b" -v base="${labels[${bases[$i]}]}" \
            'BEGIN { printf "%-32s %8.3f s   %+.2f %% against %s\n", l, m / 1e6, (m / b - 1) * 100, base }'
    fi
done
